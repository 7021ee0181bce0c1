"""What the host machine was, for forecasts about worker processes and threads.

A trace does not say how many cores were free. `perfsleuth run` records it (record/trace_metadata.py,
read back as `Trace.run_metadata`): the usable cores, a capacity probe (the CPU time k busy
processes got at the start of the run), the CPU share the main thread and the DataLoader got over
the active window, torch's threads and each loader's settings. `analyze --cpus N` supplies the core
count for traces recorded elsewhere (the machine is then assumed otherwise idle). Every number that
had to be assumed is named in `assumptions`, and ends up in the forecast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np


def _num(v) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if np.isfinite(v) and v >= 0 else None


@dataclass
class Machine:
    cores: Optional[float]  # cores the process may use (affinity, cpu count, or --cpus); None: unknown
    probe_threads: tuple = ()  # capacity probe: k busy processes ...
    probe_cores: tuple = ()  # ... got this many cores in all
    main_share: Optional[float] = None  # CPU per wall second of the main thread over the window, outside the loader
    loader_cpu_share: Optional[float] = None  # the same inside in-process DataLoader __next__ calls
    worker_cpu_share: Optional[float] = None  # CPU seconds per wall second of each loader worker
    # CPU of the training process's other threads (torch's intra-op pool, spinning or working; the
    # profiler's) per CPU second of its main thread, over the window: they compete for the cores too
    pool_per_main: Optional[float] = None
    torch_threads: Optional[int] = None
    # Cores other processes kept busy over the recorded window (the machine's CPU time from /proc/stat less
    # this process tree's, per wall second; `perfsleuth.cpu.window.others_cpu_s`): None when not recorded.
    others_cores: Optional[float] = None
    loaders: list = field(default_factory=list)
    assumptions: dict = field(default_factory=dict)

    def capacity(self, n: float) -> float:
        """Cores this process tree gets with `n` busy threads (the probe, or min(n, cores), or n)."""
        if self.probe_threads:
            k = np.concatenate([[0.0], np.asarray(self.probe_threads, float)])
            c = np.concatenate([[0.0], np.asarray(self.probe_cores, float)])
            return float(np.interp(n, k, c))  # flat beyond the largest probe
        if self.cores is not None:
            return float(min(n, self.cores))
        return float(n)

    def speed(self, n: float) -> float:
        """CPU per wall second one of `n` busy threads gets, on the scale of the main thread's own
        during the recording (the probe ran at another moment than the window)."""
        n = max(n, 1.0)
        per_thread = self.capacity(n) / n
        if self.main_share is not None and self.probe_threads:
            return per_thread * self.main_share / max(self.capacity(1.0), 1e-6)
        return per_thread

    @property
    def free_cores(self) -> Optional[float]:
        """The cores this run could use, less what other processes kept busy over the window (None: unknown)."""
        if self.cores is None:
            return None
        return max(self.cores - (self.others_cores or 0.0), 0.0)

    @property
    def recording_speed(self) -> float:
        """The main thread's CPU per wall second while the trace was recorded."""
        if self.main_share is not None:
            return self.main_share
        return self.speed(1.0)


def others_load(run_metadata: dict) -> Optional[dict]:
    """Other processes' CPU use over the recorded window, as `run` measured it (Linux: /proc/stat, less this
    process tree; record/trace_metadata.py): {"others_cores", "own_cores", "cpus" (the CPUs counted: this run's
    affinity), "machine_cpus", "resolution" (± cores: one clock tick per CPU over the window)}; None when
    it was not recorded."""
    cpu = run_metadata.get("cpu") if isinstance(run_metadata, dict) else None
    window = cpu.get("window") if isinstance(cpu, dict) else None
    if not isinstance(window, dict):
        return None
    wall, others = _num(window.get("wall_s")), _num(window.get("others_cpu_s"))
    if not wall or others is None:
        return None
    counted, tree, tick = _num(window.get("counted_cpus")), _num(window.get("tree_cpu_s")), _num(window.get("tick_s"))
    steal = _num(window.get("steal_cpu_s"))
    return {"others_cores": round(others / wall, 3), "own_cores": round(tree / wall, 3) if tree is not None else None,
            "cpus": counted or None, "machine_cpus": _num(window.get("machine_cpus")),
            "resolution": round(((counted or 1) + 1) * (tick or 0.01) / wall, 3),
            "steal_cores": round(steal / wall, 3) if steal is not None else None}


def machine_facts(run_metadata: dict, cpus: Optional[float] = None) -> Machine:
    """The machine, from what `run` recorded and `--cpus`; the assumptions made on the way."""
    meta = run_metadata if isinstance(run_metadata, dict) else {}
    host = meta.get("host") if isinstance(meta.get("host"), dict) else {}
    cpu = meta.get("cpu") if isinstance(meta.get("cpu"), dict) else {}
    loaders = [x for x in meta.get("loaders") or [] if isinstance(x, dict)]
    assumptions: dict = {}
    recorded = _num(host.get("affinity_cpus")) or _num(host.get("cpu_count"))
    if cpus is not None:
        cores, assumptions["cores"] = float(cpus), f"{cpus:g} (--cpus)"
    elif recorded:
        cores, assumptions["cores"] = recorded, f"{recorded:g} (recorded by perfsleuth run)"
    else:
        cores = None
        assumptions["cores"] = "unknown (no run metadata; pass --cpus N): each process assumed to get a core"
    m = Machine(cores=cores, torch_threads=int(_num(host.get("torch_threads")) or 0) or None, loaders=loaders,
                assumptions=assumptions)
    probe = cpu.get("probe") if isinstance(cpu.get("probe"), dict) else None
    if probe and cpus is None:
        ks, cs = probe.get("threads") or [], probe.get("cores") or []
        pairs = [(_num(k), _num(c)) for k, c in zip(ks, cs)]
        pairs = [(k, c) for k, c in pairs if k and c is not None]
        if pairs:
            m.probe_threads, m.probe_cores = tuple(k for k, _ in pairs), tuple(c for _, c in pairs)
            shown = ", ".join(f"{k:g}: {c:.2f}" for k, c in pairs)
            assumptions["capacity"] = f"cores this run could get with k busy processes, measured at its start ({shown})"
    elif cores is not None:
        assumptions["capacity"] = f"the machine otherwise idle: k busy processes get min(k, {cores:g}) cores"
    window = cpu.get("window") if isinstance(cpu.get("window"), dict) else {}
    wall = _num(window.get("wall_s"))
    if wall and cpus is None:
        main = _num(window.get("main_cpu_s"))
        lw, lc = _num(window.get("loader_wall_s")) or 0.0, _num(window.get("loader_cpu_s")) or 0.0
        if main is not None and wall - lw > 0.1 * wall:  # outside the loader the main thread computes
            m.main_share = min(1.0, max(main - lc, 0.0) / (wall - lw))
        if lw:
            m.loader_cpu_share = min(1.0, lc / lw)
        nw, wc = _num(window.get("workers")), _num(window.get("worker_cpu_s"))
        if nw and wc is not None:
            m.worker_cpu_share = min(1.0, wc / (nw * wall))
        tree = _num(window.get("tree_cpu_s"))
        if main and tree is not None:
            m.pool_per_main = max(tree - (wc or 0.0) - main, 0.0) / main
        if m.main_share is not None:
            assumptions["main_thread_cpu"] = (f"{m.main_share:.0%} of a core over the recorded steps, outside the "
                                              "DataLoader (measured)")
        load = others_load(meta)
        if load is not None:
            m.others_cores = load["others_cores"]
            n = load["cpus"]
            on = f"the {n:g} CPU{'s' if n != 1 else ''} this run could use" if n else "the machine's CPUs"
            assumptions["others_cores"] = (f"{m.others_cores:.2f} cores of {on} kept busy by other processes over the "
                                           f"recorded window (/proc/stat less this process and its DataLoader "
                                           f"workers, ±{load['resolution']:.2f})")
        else:
            assumptions["others_cores"] = ("not recorded (no /proc/stat: not Linux, or an older perfsleuth): "
                                           "other processes' load unknown, taken as none")
    return m
