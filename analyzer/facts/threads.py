"""Facts about CPU threads and cores: how many threads the run wants against the cores it has.

From a `perfsleuth run` / `perfsleuth.profile()` trace these are recorded facts (`Trace.run_metadata`,
see record/trace_metadata.py): cores available to the process, torch's intra-op threads, DataLoader
workers, ranks on the node. Each DataLoader worker runs one busy thread (torch sets one intra-op
thread in workers); the main process runs torch's intra-op pool while it computes on the CPU, and
one thread that launches kernels when a GPU computes. From any other trace only a symptom is left:
repeated identical CPU matrix multiplies whose times scatter far above their median (threads waiting
for descheduled siblings), which makes oversubscription a suspicion, not a fact.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis.forecast.models.loader import suggested_workers
from ..analysis.machine import machine_facts
from ..trace.model import ANNOTATION, CPU_OP
from ..trace.names import is_dataloader, name_mask
from .common import Context

CPU_GEMM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation"})
MIN_REPEATS = 5  # a (GEMM, input types) group needs this many calls for its spread to mean anything

THREAD_FACTS = {
    "has_run_metadata": ("bool", "the trace carries the machine facts `perfsleuth run` / `perfsleuth.profile()` record"),
    "cpu_cores": ("count", "CPU cores the process may run on (affinity, else the CPU count); 0 when unknown"),
    "cpu_torch_threads": ("count", "torch intra-op threads in the main process; 0 when unknown"),
    "cpu_loader_workers": ("count", "DataLoader worker processes (the largest num_workers recorded); 0 when unknown or none"),
    "cpu_local_ranks": ("count", "training processes on this machine (LOCAL_WORLD_SIZE; 1 when not distributed)"),
    "cpu_threads_wanted": ("count", "busy threads the run asks for: (intra-op threads when the CPU computes, else 1, "
                           "plus one per DataLoader worker) x local ranks; 0 when unknown"),
    "cpu_oversubscription": ("ratio", "cpu_threads_wanted / cpu_cores (0 when unknown)"),
    "cpu_load_per_core": ("ratio", "load average (1 minute) per core when the trace was recorded (0 when unknown)"),
    "loader_dataset": ("text", "Dataset class of the DataLoader with the most workers (recorded by `perfsleuth run`; "
                       "'' otherwise)"),
    "loader_collate_fn": ("text", "its collate_fn ('' when not recorded)"),
    "dataloader_workers_suggested": ("count", "the DataLoader worker count the fix suggests and forecasts "
                                     "(analysis/forecast/models/loader.py suggested_workers): min(8, free cores), at least one "
                                     "more than now; free cores: the cores less what other processes kept busy, "
                                     "when recorded, rounded to the nearest core; 4 when the "
                                     "cores are unknown (the forecast may advise another count: "
                                     "its snippet then shows that one)"),
    "cpu_gemm_us_per_step": ("us/step", "host time in CPU matrix multiplies (aten::mm, addmm, bmm, baddbmm)"),
    "cpu_gemm_spread": ("ratio", "CPU matrix multiplies repeated with the same input types: mean / median duration, "
                        "weighted by time (1 when steady; large when calls wait for descheduled threads)"),
    "cpu_gemm_excess_us_per_step": ("us/step", "time those repeated matrix multiplies spend above the median duration "
                                    "of their group (what steady threads would not spend)"),
}


def _int(v) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else 0


def thread_facts(ctx: Context) -> tuple[dict, dict]:
    meta = ctx.trace.run_metadata if isinstance(ctx.trace.run_metadata, dict) else {}
    host = meta.get("host") if isinstance(meta.get("host"), dict) else {}
    loaders = [x for x in meta.get("loaders") or [] if isinstance(x, dict)]
    cores = _int(host.get("affinity_cpus")) or _int(host.get("cpu_count"))
    threads = _int(host.get("torch_threads"))
    workers = max((_int(x.get("num_workers")) for x in loaders), default=0)
    busiest = max(loaders, key=lambda x: _int(x.get("num_workers")), default={})
    ranks = max(_int(host.get("local_world_size")), 1)
    gpu = bool(ctx.breakdown.has_device and ctx.trace.device_type in ("cuda", "rocm"))
    wanted = ((1 if gpu else threads) + workers) * ranks if threads and meta else 0
    load = host.get("loadavg")
    load1 = float(load[0]) if isinstance(load, list) and load and isinstance(load[0], (int, float)) else 0.0
    gemm_us, spread, excess = _gemm_spread(ctx)
    return {
        "has_run_metadata": bool(meta and host),
        "cpu_cores": cores,
        "cpu_torch_threads": threads,
        "cpu_loader_workers": workers,
        "cpu_local_ranks": ranks,
        "cpu_threads_wanted": wanted,
        "cpu_oversubscription": round(wanted / cores, 3) if cores and wanted else 0.0,
        "cpu_load_per_core": round(load1 / cores, 3) if cores else 0.0,
        "loader_dataset": str(busiest.get("dataset") or ""),
        "loader_collate_fn": str(busiest.get("collate_fn") or ""),
        "dataloader_workers_suggested": _suggested(ctx, meta, workers),
        "cpu_gemm_us_per_step": ctx.per_step_us(gemm_us),
        "cpu_gemm_spread": spread,
        "cpu_gemm_excess_us_per_step": ctx.per_step_us(excess),
    }, {}


def _suggested(ctx: Context, meta: dict, workers: int) -> int:
    """The forecast's worker count (the same function, the same machine facts: what `run` recorded)."""
    ann = ctx.kind(ANNOTATION, CPU_OP)
    loaders = ann[name_mask(ann["name"], is_dataloader)]
    multi = bool(name_mask(loaders["name"], lambda n: "_MultiProcessing" in n).any()) if len(loaders) else False
    before = (workers or 1) if multi else 0
    m = machine_facts(meta)
    return suggested_workers(m.cores, m.others_cores, before)[0]


def _gemm_spread(ctx: Context) -> tuple[float, float, float]:
    """(ns in CPU GEMM ops, time-weighted mean/median over repeated (name, input types) groups, ns above
    the group medians)."""
    if ctx.breakdown.has_device:
        return 0.0, 1.0, 0.0
    ops = ctx.kind(CPU_OP)
    gemm = ops[ops["name"].isin(CPU_GEMM_OPS)]
    if gemm.empty:
        return 0.0, 1.0, 0.0
    g = pd.DataFrame({"name": gemm["name"].astype(str).to_numpy(), "in_type": gemm["in_type"].astype(str).to_numpy(),
                      "dur": gemm["dur"].to_numpy(np.float64)})
    by = g.groupby(["name", "in_type"])["dur"]
    size, median = by.transform("size").to_numpy(), by.transform("median").to_numpy()
    repeated = (size >= MIN_REPEATS) & (median > 0)
    total = float(g["dur"].sum())
    if not repeated.any():
        return total, 1.0, 0.0
    excess = float(np.clip(g["dur"].to_numpy()[repeated] - median[repeated], 0, None).sum())
    stats = by.agg(["size", "sum", "mean", "median"])
    stats = stats[(stats["size"] >= MIN_REPEATS) & (stats["median"] > 0)]
    ratio, weight = (stats["mean"] / stats["median"]).to_numpy(), stats["sum"].to_numpy()
    return total, round(float((ratio * weight).sum() / weight.sum()), 3), excess
