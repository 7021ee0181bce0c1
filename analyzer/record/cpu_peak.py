"""This CPU's peak, measured once per machine and thread count by `perfsleuth run` (a CPU has no
datasheet row): the best rate of an fp32 `torch.mm` at the run's thread count, and the memory
bandwidth of a large copy. A second or two, after the recorded steps; cached as JSON under
$PERFSLEUTH_CACHE_DIR, else $XDG_CACHE_HOME/perfsleuth, else ~/.cache/perfsleuth, keyed by the CPU
model, the thread count and torch's version. Recorded in the trace's `perfsleuth_final` metadata as
`peak` (the shape of analysis/efficiency/peaks.py, `kind` "measured"). Not cached when other processes
kept more than BUSY_CORES cores busy while it measured: a peak measured then is lower than the machine's
(one was cached at 49 GFLOP/s for 2 threads, on a 2-core machine where 1 thread gave 86, and matmuls then
ran at 145 % of it); that run keeps it, with `others_cores`, and the next run measures again.

`PERFSLEUTH_CPU_PEAK="TFLOPS,GBPS"` gives the peak instead (the tests inject it: they never
benchmark).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

MATMUL_N = 1024  # fp32 mm of n x n: 2·n³ FLOPs a call
COPY_BYTES = 64 << 20  # a copy far larger than the caches: read + write
REPEATS = 7  # the fastest of these
ENV = "PERFSLEUTH_CPU_PEAK"


def cache_dir() -> Path:
    if os.environ.get("PERFSLEUTH_CACHE_DIR"):
        return Path(os.environ["PERFSLEUTH_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "perfsleuth"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _peak(tflops: float, gbps: float, threads: int, source: str) -> dict:
    return {"name": f"this CPU ({threads} thread{'' if threads == 1 else 's'})", "kind": "measured", "source": source,
            "mem_bw_gbps": round(gbps, 3), "threads": threads,
            "max_achievable_tflops": {"matrix_fp32": round(tflops, 6),
                                      "vector_fp32": round(tflops, 6)}}


def injected(threads: int) -> Optional[dict]:
    """The peak `PERFSLEUTH_CPU_PEAK="TFLOPS,GBPS"` gives (None when unset or not two positive
    numbers)."""
    text = os.environ.get(ENV)
    if not text:
        return None
    try:
        tflops, gbps = (float(x) for x in text.split(","))
    except ValueError:
        log.warning("%s=%r is not TFLOPS,GBPS: ignored", ENV, text)
        return None
    if tflops <= 0 or gbps <= 0:
        return None
    return _peak(tflops, gbps, threads, f"given by {ENV}")


BUSY_CORES = 0.5  # other processes keeping more than this many cores busy while it measured: not cached


def others_cores(before: Optional[tuple], after: Optional[tuple], own_s: float, wall_s: float) -> Optional[float]:
    """Cores other processes kept busy over `wall_s`: the machine's busy CPU seconds (trace_metadata.machine_busy,
    before and after) less this process's own `own_s`; None off Linux."""
    if before is None or after is None or wall_s <= 0:
        return None
    return max(0.0, (after[0] - before[0] - own_s) / wall_s)


def measure(threads: int) -> dict:
    """fp32 matmul FLOP/s and copy bandwidth at `threads` threads: the fastest of REPEATS timings
    each; `others_cores` when other processes kept more than BUSY_CORES cores busy meanwhile (a peak
    measured so is lower than the machine's: the caller does not cache it)."""
    import torch

    from .trace_metadata import machine_busy

    busy0, own0, wall0 = machine_busy(), time.process_time(), time.perf_counter()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            a, b = torch.randn(MATMUL_N, MATMUL_N), torch.randn(MATMUL_N, MATMUL_N)
            torch.mm(a, b)  # warm the kernels and the allocator
            flops = 2 * MATMUL_N**3
            mm = sorted(timed(lambda: torch.mm(a, b)) for _ in range(REPEATS))
            src = torch.empty(COPY_BYTES // 4)
            dst = torch.empty_like(src)
            dst.copy_(src)
            cp = sorted(timed(lambda: dst.copy_(src)) for _ in range(REPEATS))
    finally:
        torch.set_num_threads(before)
    try:
        load = f", load average {os.getloadavg()[0]:.1f}"
    except OSError:
        load = ""
    source = (f"measured by perfsleuth run: fp32 torch.mm {MATMUL_N}x{MATMUL_N} and a "
              f"{COPY_BYTES >> 20} MiB copy at {threads} threads, the fastest of {REPEATS}{load}")
    others = others_cores(busy0, machine_busy(), time.process_time() - own0, time.perf_counter() - wall0)
    busy = others is not None and others > BUSY_CORES
    if busy:
        source += f"; other processes kept {others:.1f} cores busy meanwhile: not cached, measured again next run"
    # a peak is the best the machine does: the fastest run (others' load only slows runs down)
    peak = _peak(flops / mm[0] / 1e12, 2 * COPY_BYTES / cp[0] / 1e9, threads, source)
    if busy:
        peak["others_cores"] = round(others, 2)
    return peak


def timed(fn) -> float:
    """Seconds one call of `fn` took (at least a nanosecond)."""
    t0 = time.perf_counter()
    fn()
    return max(time.perf_counter() - t0, 1e-9)


def cpu_peak(threads: int) -> Optional[dict]:
    """The injected peak, else the cached one for this machine and thread count, else measured now
    and cached. None when torch or the measurement fails (the report then says there is no peak)."""
    given = injected(threads)
    if given is not None:
        return given
    try:
        import torch

        key = f"{_cpu_model()}|threads={threads}|torch={torch.__version__}"
    except Exception:  # noqa: BLE001 -- never the user's run's problem
        return None
    path = cache_dir() / "cpu_peaks.json"
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cached = {}
    if isinstance(cached, dict) and isinstance(cached.get(key), dict):
        return cached[key]
    try:
        peak = measure(threads)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not measure this CPU's peak: %s", exc)
        return None
    if peak.get("others_cores") is not None:  # measured on a busy machine: lower than its peak, kept for this run only
        return peak
    cached = cached if isinstance(cached, dict) else {}
    cached[key] = peak
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(cached, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        log.info("could not cache the CPU peak in %s: %s", path, exc)
    return peak


def for_run(record_shapes: bool, threads: Optional[int] = None) -> Optional[dict]:
    """`perfsleuth run`'s peak on a CPU-only machine at the recorded window's thread count
    (`threads`, else torch's current one); None on a GPU, whose peak is the datasheet's, or when
    shapes are not recorded (no FLOPs to compare it with)."""
    if not record_shapes:
        return None
    try:
        import torch

        if torch.cuda.is_available():
            return None
        return cpu_peak(int(threads) if threads else torch.get_num_threads())
    except Exception as exc:  # noqa: BLE001 -- never the user's run's problem
        log.warning("no CPU peak: %s", exc)
        return None
