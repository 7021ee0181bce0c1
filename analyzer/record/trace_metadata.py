"""What the machine and the loaders were, recorded by `perfsleuth run` and `perfsleuth.profile()` into the
trace itself (torch.profiler's `add_metadata_json`, top-level key `perfsleuth`), so that `analyze` of
the same file later knows them too: a trace alone says nothing about free cores or loader settings.

    "perfsleuth": {"version": 1,
                   "host": {"cpu_count", "affinity_cpus", "torch_threads", "torch_interop_threads",
                            "omp_num_threads", "loadavg", "torch_version", "accelerator", "rank", "world_size",
                            "local_world_size"},
                   "loaders": [{"dataset", "num_workers", "batch_size", "pin_memory", "persistent_workers",
                                "prefetch_factor", "collate_fn"}, ...],
                   "cpu": {"probe": {"threads": [1, 2], "cores": [0.9, 1.7], "seconds": 0.1},
                           "window": {"wall_s", "main_cpu_s", "loader_wall_s", "loader_cpu_s",
                                      "loader_calls", "workers", "worker_cpu_s",
                                      "tree_cpu_s", "others_cpu_s", "counted_cpus", "machine_cpus", "tick_s"}},
                   "clock": {"unit": "us", "unprofiled_us", "unprofiled_cpu_us", "unprofiled_thread_us",
                             "after_us", "after_cpu_us", "after_thread_us", "profiled_us", "profiled_cpu_us",
                             "profiled_thread_us", "profiled_steps", "warmup_us", "stacks_us",
                             "memory_us"},                                     # step_clock.py: steps timed
                   "schedule": {"wait", "warmup", "active", "after", "with_stack", "record_shapes", "stack_steps",
                                "stack_shapes", "memory_steps"},
                   "stacks_trace": "trace.stacks.pt.trace.json.gz" | null,     # the companion (source lines)
                   "program": "train.py",                     # run's script (file name) or module
                   "optimizers": [{"class", "file", "line", "function", "foreach", "fused", "count",
                                   "zero_grad": [{"file", "line", "function"}]}],  # code_sites.py: where the
                                                                                   # user's code built them
                   "code": {"user_dir", "library_roots": [...]},               # code_sites.py: not the user's
                   "stacks_window": {"steps", "cut", "scale", "limit_bytes", "estimated_step_bytes"},
                                                                               # only in the companion (budget)
                   "partial_step": "ProfilerStep#N",                           # only when the run ended inside it
                   "role": "stacks" | "memory", "main_trace": "..."}           # only in a companion

    "perfsleuth_final": {"clock": {...}, "compile": {...},                     # see below
                         "peak": {...} | absent,                               # cpu_peak.py: this CPU's
                         "batched_probe": {"threads", "source", "seconds",     # batched_probe.py: the loops'
                                           "ops": [{"name", "shapes", "per_step", "batch", "ns"}]} | absent,
                                                                               # small ops timed batched
                         "model_flops": {"flops_per_step", "source", "by_op",  # model_flops.py: one step
                                         "step_s", "unprofiled_step_s", "unavailable"},  # under FlopCounterMode
                         "memory_trace": "trace.memory.pt.trace.json.gz" | null,  # memory_window.py: the window
                         "memory": {"device": "cpu" | "cuda:0", "source": "export_memory_timeline",
                                    "peak_bytes": int | null,                  # torch's memory profile, window
                                    "categories_at_peak": {"parameter", "gradient", "optimizer_state",
                                                           "activation", "input", "temporary", "other"} | null,
                                    "known": {"parameter_bytes", "gradient_bytes",  # the live optimizers'
                                              "optimizer_state_bytes"} | null,     # tensors, exact
                                    "cost": {"steps", "window_s", "unprofiled_window_s", "write_s",
                                             "categories_s", "trace_bytes"} | null,
                                    "unavailable": null | "why there are no numbers"}}

`memory` (memory_window.py, memory_categories.py): the memory window records `RunConfig.memory_steps` (3) steps
with profile_memory, shapes and stacks after the `after` steps into `memory_trace` (its `ProfilerStep#0..2` and
`[memory]` events: the level at each step's end); `peak_bytes` and `categories_at_peak` come from torch's memory
profile of that window (pre-existing tensors that an op of the window uses count, on the CPU too), `known` from
the optimizers themselves at the window's last step boundary (after an optimizer step: gradients alive), `cost`
is what the window cost: its steps' wall time against as many unprofiled steps (median), the seconds spent
writing its trace and computing the categories, its trace's size. Bytes are integers. With `--no-memory`, or when
the run ended before the window, `memory_trace` is null and `memory` has only nulls and `unavailable`.

`cpu` is what the forecasts of worker and thread counts need and a trace cannot show: how many
cores this process could get when the run started (`probe`: k = 1, 2, 4, 8 busy processes for a tenth of a second,
the CPU time they got per second of wall time) and, over the active window, the CPU time of the main
thread, of the in-process DataLoader `__next__` calls and of the loader worker processes; and (Linux,
/proc/stat) the CPU time other processes took meanwhile: `others_cpu_s`, the busy time of the
`counted_cpus` CPUs this process may use (its affinity; `machine_cpus` in all) less this process tree's
own (`tree_cpu_s`: the process, all its threads, and its DataLoader workers), at /proc/stat's resolution
(`tick_s` per CPU). Elsewhere these keys are absent.

The trace's top-level `perfsleuth_final` (run_outputs.finish_trace) holds the `clock` as it stood when the
file was finished, after the `after` steps; `trace/model.py` reads both back as `Trace.run_metadata`, the
later keys winning (an empty dict for other traces). Torch is
imported inside the functions only.
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional

from ..trace.names import OWN_SPAN

METADATA_KEY = "perfsleuth"
METADATA_VERSION = 1


def host_facts(rank: Optional[int] = None, world_size: Optional[int] = None) -> dict:
    import torch

    try:
        affinity: Optional[int] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        affinity = None
    try:
        load: Optional[list] = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    accelerator = "cuda" if torch.cuda.is_available() else "cpu"
    if accelerator == "cuda" and getattr(torch.version, "hip", None):
        accelerator = "rocm"
    return {"cpu_count": os.cpu_count(), "affinity_cpus": affinity, "torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "loadavg": load,
            "torch_version": torch.__version__, "accelerator": accelerator, "rank": rank, "world_size": world_size,
            "local_world_size": _env_int("LOCAL_WORLD_SIZE")}


def _env_int(name: str) -> Optional[int]:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _name(obj: Any) -> Optional[str]:
    if obj is None:
        return None
    return getattr(obj, "__qualname__", None) or type(obj).__qualname__


def loader_facts(loader: Any) -> dict:
    """The settings of one torch DataLoader that bear on loading speed."""
    return {"dataset": type(loader.dataset).__qualname__, "num_workers": int(loader.num_workers),
            "batch_size": loader.batch_size, "pin_memory": bool(loader.pin_memory),
            "persistent_workers": bool(loader.persistent_workers), "prefetch_factor": loader.prefetch_factor,
            "collate_fn": _name(loader.collate_fn)}


def remember_loader(seen: list, loader: Any) -> None:
    """Add the loader's settings to `seen` unless the same settings are there (one entry per epoch
    would grow without end). The loader is not kept: a loop that iterates a temporary DataLoader drops it."""
    try:
        facts = loader_facts(loader)
    except Exception:  # a DataLoader subclass without these attributes: nothing to record
        return
    if facts not in seen:
        seen.append(facts)


def metadata(host: dict, loaders: list, cpu: Optional[dict] = None) -> dict:
    out = {"version": METADATA_VERSION, "host": host, "loaders": list(loaders)}
    if cpu is not None:
        out["cpu"] = cpu
    return out


PROBE_SECONDS = 0.1


def _spin(seconds: float, start: float, out: int) -> None:
    """In a forked child: busy-loop from `start` for `seconds`, write CPU seconds per wall second."""
    while time.monotonic() < start:
        pass
    c0, t0 = time.process_time(), time.monotonic()
    while time.monotonic() - t0 < seconds:
        pass
    os.write(out, f"{(time.process_time() - c0) / max(time.monotonic() - t0, 1e-9):.4f}".encode())


def probe_capacity(seconds: float = PROBE_SECONDS, max_threads: int = 8) -> Optional[dict]:
    """How many cores this process tree can get now: for k = 1, 2, 4, 8 (more than the usable cores:
    on a busy machine more processes get a larger share of it), k forked children spin together for
    `seconds` and report the CPU they got. Linux only (None elsewhere, or on any failure): load, cgroup
    quotas and the scheduler's grouping all show in it."""
    if not hasattr(os, "fork") or not hasattr(os, "sched_getaffinity"):
        return None
    try:
        ks = [k for k in (1, 2, 4, 8, 16) if k <= max(max_threads, 1)]
        return {"threads": ks, "cores": [round(_probe(k, seconds), 3) for k in ks], "seconds": seconds}
    except Exception:  # never the user's run's problem
        return None


def _probe(k: int, seconds: float) -> float:
    start = time.monotonic() + 0.005
    children = []
    for _ in range(k):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                os.close(r)
                _spin(seconds, start, w)
            finally:
                os._exit(0)
        os.close(w)
        children.append((pid, r))
    total = 0.0
    for pid, r in children:
        data = os.read(r, 64)
        os.close(r)
        os.waitpid(pid, 0)
        total += float(data or 0.0)
    return total


def _proc_cpu_s(pid: int) -> Optional[float]:
    """utime + stime of a process in seconds (Linux /proc), None when unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


PROC_STAT = "/proc/stat"
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (guest time is inside user and nice)
_STEAL = 7


def parse_proc_stat(text: str, cpus: Optional[set] = None) -> Optional[tuple]:
    """(busy ticks summed over the CPUs in `cpus` (all when None), CPUs summed, CPUs listed, the steal ticks
    among the busy ones) from the text of /proc/stat's `cpuN` lines; None when there is none. Steal time counts
    as busy: the hypervisor gave the CPU to someone else (said apart: no process of this machine took it)."""
    busy = counted = listed = steal = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        try:
            values = [int(v) for v in rest.split()]
        except ValueError:
            continue
        listed += 1
        if cpus is None or int(name[3:]) in cpus:
            busy += sum(values[i] for i in _BUSY_FIELDS if i < len(values))
            steal += values[_STEAL] if _STEAL < len(values) else 0
            counted += 1
    return (busy, counted, listed, steal) if listed else None


def machine_busy(path: str = PROC_STAT) -> Optional[tuple]:
    """(busy CPU seconds of the CPUs this process may use, those CPUs, the machine's CPUs, the steal seconds among
    the busy ones) now; None off Linux."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read()
        cpus = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        found = parse_proc_stat(text, cpus)
        tick = os.sysconf("SC_CLK_TCK")
        return None if found is None else (found[0] / tick, found[1], found[2], found[3] / tick)
    except (OSError, ValueError, AttributeError):
        return None


class CpuClock:
    """CPU and wall time over the active window: the main thread, its in-process DataLoader calls,
    the worker processes of multi-process loaders (by pid), the machine's busy time (/proc/stat); and
    the capacity probe."""

    def __init__(self):
        self.started: Optional[tuple] = None
        self.loader_wall = self.loader_cpu = 0.0
        self.loader_calls = 0
        self._workers: dict = {}  # pid -> [CPU seconds when first seen, when last read]
        self._probe: Optional[dict] = None
        self._machine: Optional[tuple] = None  # machine_busy() when the window started

    def probe(self) -> None:
        self._probe = probe_capacity()

    def tick(self, steps: int, start_at: int) -> None:
        """Called at every step boundary: the window starts after `start_at` steps."""
        if steps == start_at:
            self.start()

    def start(self) -> None:
        self.started = (time.perf_counter(), time.thread_time(), time.process_time())
        self._machine = machine_busy()
        self.loader_wall = self.loader_cpu = 0.0
        self.loader_calls = 0
        self._workers = {}

    def loader_call(self, fn, *args):
        """Run one DataLoader `__next__`, timing it when the window is running."""
        if self.started is None:
            return fn(*args)
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*args)
        finally:
            self.loader_wall += time.perf_counter() - w0
            self.loader_cpu += time.thread_time() - c0
            self.loader_calls += 1

    def see_workers(self, iterators) -> None:
        """Note the worker processes of these multi-process DataLoader iterators and their CPU time so far
        (the last reading stands for a worker that has exited by the window's end)."""
        pids = [w.pid for it in list(iterators) for w in getattr(it, "_workers", ())]
        for pid in pids:
            cpu = _proc_cpu_s(pid)
            if cpu is not None:
                self._workers.setdefault(pid, [cpu, cpu])[1] = cpu

    def window(self) -> Optional[dict]:
        if self.started is None:
            return None
        wall = time.perf_counter() - self.started[0]
        process = time.process_time() - self.started[2]
        now = [(_proc_cpu_s(p), first, last) for p, (first, last) in self._workers.items()]
        worker_cpu = sum((cpu if cpu is not None else last) - first for cpu, first, last in now)
        out = {"wall_s": round(wall, 6), "main_cpu_s": round(time.thread_time() - self.started[1], 6),
               "loader_wall_s": round(self.loader_wall, 6), "loader_cpu_s": round(self.loader_cpu, 6),
               "loader_calls": self.loader_calls, "workers": len(now), "worker_cpu_s": round(worker_cpu, 6),
               "tree_cpu_s": round(process + worker_cpu, 6)}
        machine = machine_busy() if self._machine is not None else None
        if machine is not None and machine[1:3] == self._machine[1:3]:
            others = max(machine[0] - self._machine[0] - process - worker_cpu, 0.0)
            out.update(others_cpu_s=round(others, 6),
                       counted_cpus=machine[1], machine_cpus=machine[2], tick_s=round(1 / os.sysconf("SC_CLK_TCK"), 6))
            if len(machine) > 3 and len(self._machine) > 3:  # the hypervisor's part of it (a VM's steal time)
                out["steal_cpu_s"] = round(min(max(machine[3] - self._machine[3], 0.0), others), 6)
        return out

    def facts(self) -> dict:
        return {"probe": self._probe, "window": self.window()}


def own_span():
    """A profiler range marking perfsleuth's own time in the trace (trace/names.py OWN_SPAN)."""
    from torch.profiler import record_function

    return record_function(OWN_SPAN)
