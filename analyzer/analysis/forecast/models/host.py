"""Forecast models of host-side fixes: zero_grad(set_to_none=True), a foreach optimizer, fewer threads
under oversubscription, the caching allocator, outlier steps (batched or vectorised tiny ops:
`fc_batched`).

They work on the top-level ops of the main thread (ops not nested in another op): an op's span is its
C++ work (dispatch and kernel), the gap before it the Python that called it. Each model edits a
`whatif.Plan` and returns its assumptions; "low" is the pessimistic variant, "high" the optimistic."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ....trace.model import CPU_OP
from ... import intervals as iv
from ...perfsleuth_spans import own_ns
from ..plan import Plan, act_device, act_host, drop_waits, remove_host
from ..registry import Inputs, NoForecast, model
from ..timeline import CALL

FILL_OPS = ("aten::zero_", "aten::fill_")
SET_TO_NONE_NS = {"central": 1_000.0, "low": 2_000.0, "high": 500.0}  # Python per parameter: `p.grad = None`
# Ops with a multi-tensor (torch._foreach_*) counterpart: what a foreach optimizer batches.
_FOREACH_ABLE = re.compile(r"^aten::(add|sub|mul|div|addcmul|addcdiv|lerp|sqrt|rsqrt|maximum|minimum|neg|exp|"
                           r"log|pow|abs|sign|reciprocal|sigmoid|clamp|clamp_min|clamp_max|copy|zero|norm)_?$")
ALLOC_CALLS = frozenset({"cudaMalloc", "cudaFree", "cudaMallocHost", "cudaFreeHost", "cudaHostAlloc",
                         "hipMalloc", "hipFree", "hipHostMalloc", "hipHostFree", "hipExtMallocWithFlags",
                         "cuMemAlloc", "cuMemAlloc_v2", "cuMemFree", "cuMemFree_v2"})


def top_ops(x: Inputs) -> pd.DataFrame:
    """Outermost cpu ops of the main thread (the thread of the step annotations) in the window, each
    with the Python gap before it (`gap`, since the previous top-level op ended)."""
    def make():
        mine = x.main_ops
        mine = mine[mine["kind"].to_numpy() == CPU_OP].sort_values(["ts", "end"], ascending=[True, False])
        if mine.empty:
            return mine.assign(dur=0.0, gap=0.0)
        e = mine["end"].to_numpy()
        prev = np.r_[-np.inf, np.maximum.accumulate(e)[:-1]]
        top = mine[mine["ts"].to_numpy() >= prev].reset_index(drop=True)
        prev_end = np.r_[0.0, top["end"].to_numpy()[:-1]]  # the window starts at 0
        return top.assign(dur=top["end"] - top["ts"], gap=np.maximum(top["ts"].to_numpy() - prev_end, 0.0))
    return x.cached("top_ops", make)


def _inside(df: pd.DataFrame, ivs: iv.Intervals) -> np.ndarray:
    return iv.covers(ivs, df["ts"].to_numpy(np.int64))


def _add_back(p: Plan, at: np.ndarray, ns: np.ndarray) -> None:
    """Give host work back at times `at` (to the item whose work covers each time)."""
    tl = p.tl
    i = np.clip(np.searchsorted(tl.e, at, side="left"), 0, tl.n_items - 1)
    np.add.at(p.a, i, ns)
    p.removed_ns -= float(np.sum(ns))


def _collapse_device(p: Plan, regions: iv.Intervals, kept: np.ndarray) -> int:
    """Device work launched inside each region becomes `kept[r]` launches: every node keeps its time
    above the region's shortest node, and the fixed cost of all but kept[r] nodes goes."""
    tl = p.tl
    if tl.n_nodes == 0:
        return 0
    r = np.searchsorted(regions[0], tl.d_call, side="right") - 1
    inside = (r >= 0) & (tl.d_call < regions[1][np.clip(r, 0, None)])
    if not inside.any():
        return 0
    rr = r[inside]
    n = np.bincount(rr, minlength=regions[0].size)
    floor = np.full(regions[0].size, np.inf)
    np.minimum.at(floor, rr, p.dur[inside])
    share = 1.0 - np.minimum(kept[rr], n[rr]) / n[rr]
    act_device(p, inside)
    p.dur[inside] = np.maximum(p.dur[inside] - floor[rr] * share, 0.0)
    return int(inside.sum())


@model("zero-grad-none")
def zero_grad_none(x: Inputs, p: Plan, variant: str) -> dict:
    zg = x.spans("Optimizer.zero_grad#")
    if zg[0].size == 0:
        raise NoForecast("no Optimizer.zero_grad in the replayed steps")
    top = top_ops(x)
    fills = top[_inside(top, zg) & top["name"].isin(FILL_OPS).to_numpy()]
    if fills.empty:
        raise NoForecast("zero_grad fills nothing in the replayed steps (set_to_none already)")
    region = np.searchsorted(zg[0], fills["ts"].to_numpy(np.int64), side="right") - 1
    per_region = np.bincount(region, minlength=zg[0].size).astype(np.float64)
    removed = remove_host(p, zg)
    _add_back(p, zg[1].astype(np.float64), per_region * SET_TO_NONE_NS[variant])
    tl = p.tl
    if tl.n_nodes:
        launched = iv.covers(zg, tl.d_call.astype(np.int64))
        act_device(p, launched)
        p.dur[launched] = 0.0
    n = len(tl.steps)
    return {"zero_grad": f"{len(fills) // max(n, 1)} fill ops per step and the Python around them "
                         f"({removed / n / 1000:.0f} µs per step) become `p.grad = None`, "
                         f"{SET_TO_NONE_NS[variant] / 1000:g} µs per parameter",
            "device": "fill kernels and memsets launched by zero_grad disappear"}


@model("foreach-optimizer")
def foreach_optimizer(x: Inputs, p: Plan, variant: str) -> dict:
    opt = x.spans("Optimizer.step#")
    if opt[0].size == 0:
        raise NoForecast("no Optimizer.step in the replayed steps")
    top = top_ops(x)
    inside = top[_inside(top, opt)].copy()
    if inside["name"].str.contains("_foreach_|_fused_").any():
        raise NoForecast("the optimizer already runs foreach or fused ops")
    batchable = inside["name"].str.match(_FOREACH_ABLE.pattern).to_numpy()
    if batchable.sum() < 2:
        raise NoForecast("the optimizer step has no per-parameter tensor math to batch")
    ops = inside[batchable]
    region = np.searchsorted(opt[0], ops["ts"].to_numpy(np.int64), side="right") - 1
    kinds = ops.assign(region=region).groupby("region")["name"].nunique()
    kept = np.zeros(opt[0].size)
    kept[kinds.index.to_numpy()] = kinds.to_numpy()
    # The Python call before each batchable op goes (one call per op kind stays).
    gaps = iv.intersect(iv.merge((ops["ts"] - ops["gap"]).to_numpy(np.int64), ops["ts"].to_numpy(np.int64)), opt)
    share = {"low": 0.5, "central": 1.0, "high": 1.0}[variant]
    removed = remove_host(p, gaps, keep=1.0 - share)
    median_gap = float(ops["gap"].median())
    _add_back(p, opt[1].astype(np.float64), kept * median_gap)
    out = {"python": f"the Python call before each of {len(ops) // max(len(p.tl.steps), 1)} per-parameter ops per step "
                     f"goes ({removed / len(p.tl.steps) / 1000:.0f} µs per step); one call per op kind stays",
           "ops": "each op's own work stays (a foreach op still runs it for every tensor)"}
    if p.tl.n_nodes:
        ivs = iv.merge(ops["ts"].to_numpy(np.int64), ops["end"].to_numpy(np.int64))
        launched = _collapse_device(p, opt, kept)
        med_op = float(ops["dur"].median())
        cut = remove_host(p, ivs)
        _add_back(p, opt[1].astype(np.float64), kept * med_op)
        out["device"] = (f"{launched} kernels become one multi-tensor kernel per op kind (same bytes; the fixed "
                         f"cost per kernel goes), and their launches ({cut / len(p.tl.steps) / 1000:.0f} µs per step) too")
    return out


# Why `fewer-threads` gives no number (issue 37, item 4). What one intra-op thread does to a step is the
# parallel speed-up each op got from the others, less what waiting for descheduled siblings cost it; the
# trace holds neither. Measured on the 2-core machine (benchmarks/unseen.py, docs/accuracy.md): DCGAN's
# 2-3 ms convolutions ran 1.37x faster with one thread (quiet), ImageNet's ResNet-18 convolutions of the
# same size 0.59x (slower) on the quiet machine and 3.3x faster with another core's worth of load; the
# recorded CPU split the same way in both (main thread 0.85-0.94 of a core, the pool 0.76-0.98: spinning
# and useful work look alike). The model it replaces took each op's fast quantile among ops of the same
# name and dtypes (shapes unrecorded: small and large convolutions mixed) and never charged the parallel
# work the pool did to the one thread left: 1.5-2.6x forecast for fixes that measured 0.59-1.15x.
THREADS_NOT_FORECAST = ("what one thread does to each op -- the parallel speed-up it loses against the waits "
                        "for descheduled threads it saves -- is not in the trace: the same change measured "
                        "0.59x and 1.37x on two programs with convolutions of the same size (docs/forecast.md); "
                        "`perfsleuth run --verify` measures it")


@model("fewer-threads")
def fewer_threads(x: Inputs, p: Plan, variant: str) -> dict:
    """No number (THREADS_NOT_FORECAST): the reasons say when there is nothing to remove at all."""
    m = x.machine
    threads = m.torch_threads
    if threads == 1:
        raise NoForecast("torch already runs one intra-op thread")
    free = m.free_cores if m.others_cores is not None else None
    wanted = (threads or 0) + sum(int(ld.get("num_workers") or 0) for ld in m.loaders if isinstance(ld, dict))
    if free is not None and threads and wanted <= free:
        raise NoForecast(f"torch's {threads} threads and the loader's workers fit the {free:.1f} cores other "
                         f"processes left free: no oversubscription to remove")
    raise NoForecast(THREADS_NOT_FORECAST)


@model("caching-allocator")
def caching_allocator(x: Inputs, p: Plan, variant: str) -> dict:
    tl = x.tl
    alloc = (tl.kind == CALL) & np.isin(tl.name, list(ALLOC_CALLS))
    if not alloc.any():
        raise NoForecast("no device malloc/free calls in the replayed steps")
    keep = 0.1 if variant == "low" else 0.0
    cut = tl.own[alloc] * (1.0 - keep)
    act_host(p, alloc, tl.own[alloc])
    p.a[alloc] -= cut
    p.removed_ns += float(cut.sum())
    dropped = drop_waits(p, alloc)
    n = len(tl.steps)
    return {"allocator": f"{int(alloc.sum()) // max(n, 1)} malloc/free calls per step are served from the cache "
                         f"({cut.sum() / n / 1000:.0f} µs per step, {dropped} device waits gone)",
            "pessimistic": "10% of their time stays"}


@model("no-outliers")
def no_outliers(x: Inputs, p: Plan, variant: str) -> dict:
    if x.machine_busy:  # the slow steps are the machine's (issue 37): no fix of the program's
        raise NoForecast(f"the run found the machine busy ({x.machine_busy}): the slow steps are "
                         "the machine's, not the program's")
    steps = x.all_steps
    dur = (steps["end"] - steps["start"]).to_numpy(np.float64) - own_ns(x.trace, steps["start"], steps["end"])
    mean, median = float(dur.mean()), float(np.median(dur))
    if len(dur) < 2 or mean <= median:
        raise NoForecast("no step is slower than the median")
    target = {"low": (mean + median) / 2, "central": median, "high": median}[variant]
    p.scale *= target / mean
    rs, re = p.tl.steps["start"] + p.tl.w0, p.tl.steps["end"] + p.tl.w0
    replayed = (re - rs).to_numpy(np.float64) - own_ns(x.trace, rs, re)
    p.acted_scale = np.clip(replayed - median, 0, None)  # what it acts on: the replayed steps' excess
    return {"steps": f"every step takes the median step time ({median / 1e6:.2f} ms; mean {mean / 1e6:.2f} ms; "
                     "perfsleuth's own ranges left out)",
            "pessimistic": "half of the excess stays"}
