"""Forecast models of host-side fixes: zero_grad(set_to_none=True), a foreach optimizer, batched or
vectorised tiny ops, fewer threads under oversubscription, the caching allocator, outlier steps.

They work on the top-level ops of the main thread (ops not nested in another op): an op's span is its
C++ work (dispatch and kernel), the gap before it the Python that called it. Each model edits a
`whatif.Plan` and returns its assumptions; "low" is the pessimistic variant, "high" the optimistic."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..trace.model import CPU_OP
from . import intervals as iv
from .forecast import Inputs, NoForecast, model
from .timeline import CALL
from .whatif import Plan, drop_waits, remove_host

FILL_OPS = ("aten::zero_", "aten::fill_")
SET_TO_NONE_NS = {"central": 1_000.0, "low": 2_000.0, "high": 500.0}  # Python per parameter: `p.grad = None`
# Ops with a multi-tensor (torch._foreach_*) counterpart: what a foreach optimizer batches.
_FOREACH_ABLE = re.compile(r"^aten::(add|sub|mul|div|addcmul|addcdiv|lerp|sqrt|rsqrt|maximum|minimum|neg|exp|"
                           r"log|pow|abs|sign|reciprocal|sigmoid|clamp|clamp_min|clamp_max|copy|zero|norm)_?$")
SMALL_OP_NS = 50_000.0  # ops of a kind whose median is this short are dispatch-bound in a long run of their like
MIN_RUN = 16
MIN_REPEAT = 8  # a run is a loop: at least this many ops per distinct op
SPIKE = 20  # an op this many times slower than its kind's median was preempted (a time slice, not its work)
ALLOC_CALLS = frozenset({"cudaMalloc", "cudaFree", "cudaMallocHost", "cudaFreeHost", "cudaHostAlloc",
                         "hipMalloc", "hipFree", "hipHostMalloc", "hipHostFree", "hipExtMallocWithFlags",
                         "cuMemAlloc", "cuMemAlloc_v2", "cuMemFree", "cuMemFree_v2"})


def top_ops(x: Inputs) -> pd.DataFrame:
    """Outermost cpu ops of the main thread (the thread of the step annotations) in the window, each
    with the Python gap before it (`gap`, since the previous top-level op ended)."""
    def make():
        ops = x.ops
        steps = ops[ops["name"].str.startswith("ProfilerStep#")]
        cpu = ops[ops["kind"].to_numpy() == CPU_OP]
        if len(steps):
            main = (steps["pid"].iloc[0], steps["tid"].iloc[0])
        elif len(cpu):
            main = cpu.assign(d=cpu["end"] - cpu["ts"]).groupby(["pid", "tid"])["d"].sum().idxmax()
        else:
            return cpu.assign(dur=0.0, gap=0.0)
        mine = cpu[(cpu["pid"] == main[0]) & (cpu["tid"] == main[1])].sort_values(["ts", "end"], ascending=[True, False])
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


@model("batched-ops")
def batched_ops(x: Inputs, p: Plan, variant: str) -> dict:
    """Loops of short ops (a Python loop over scalars, slices or small modules) become a few
    whole-tensor ops: one per distinct op of the loop. A run is a stretch of one step made only of
    ops whose kind is short (median under 50 µs), at least 16 ops and 8 of each kind on average."""
    top = top_ops(x)
    if top.empty:
        raise NoForecast("no host ops in the replayed steps")
    small = (top.groupby("name")["dur"].transform("median") <= SMALL_OP_NS).to_numpy()
    step = np.searchsorted(p.tl.steps["host_end"].to_numpy(np.float64), top["ts"].to_numpy())
    joins = small & np.r_[False, small[:-1]] & np.r_[False, step[1:] == step[:-1]]
    run = np.where(small, np.cumsum(small & ~joins) - 1, -1)
    df = top.assign(run=run, joined=joins)[small]
    g = df.groupby("run")["name"]
    size, kinds = g.transform("size").to_numpy(), g.transform("nunique").to_numpy()
    df = df[(size >= MIN_RUN) & (size >= MIN_REPEAT * kinds)]
    # The loop is the kinds the run repeats; a short op that appears a few times in the stretch (the
    # model's own layers, the loss, the optimizer of a tiny model) is not part of it and keeps its cost.
    df = df[df.groupby(["run", "name"])["name"].transform("size").to_numpy() >= MIN_REPEAT]
    if df.empty:
        raise NoForecast(f"no loop of {MIN_RUN} or more short ops ({MIN_REPEAT}+ of each kind) in the replayed steps")
    df = df.assign(cost=df["dur"] + np.where(df["joined"], df["gap"], 0.0))
    g = df.groupby("run")
    runs = pd.DataFrame({"start": g["ts"].min(), "end": g["end"].max(), "kinds": g["name"].nunique(),
                         "ops": g.size(), "unit": g["cost"].median(), "least": g["cost"].min()})
    # Each loop op with the Python before it (when that followed another short op): the ops between
    # them that the loop does not repeat stay.
    ivs = iv.merge((df["ts"] - np.where(df["joined"], df["gap"], 0.0)).to_numpy(np.int64), df["end"].to_numpy(np.int64))
    removed = remove_host(p, ivs)
    # An op outside the loops that took over SPIKE times its kind's median was preempted on a busy
    # machine; a step that much shorter is preempted that much less: the excess goes too.
    rest = top[~iv.covers(ivs, top["ts"].to_numpy(np.int64))]
    med = rest.groupby("name")["dur"].transform("median").to_numpy()
    spike = rest["dur"].to_numpy() > SPIKE * med
    despiked = remove_host(p, iv.merge((rest["ts"].to_numpy() + med)[spike].astype(np.int64),
                                       rest["end"].to_numpy()[spike].astype(np.int64)))
    per = {"low": 2 * runs["kinds"] * runs["unit"], "central": runs["kinds"] * runs["unit"],
           "high": runs["kinds"] * runs["least"]}[variant].to_numpy()
    _add_back(p, runs["end"].to_numpy(np.float64), per)
    launched = _collapse_device(p, ivs, runs["kinds"].to_numpy(np.float64)) if p.tl.n_nodes else 0
    n = len(p.tl.steps)
    out = {"runs": f"{len(runs) / n:.1f} runs per step of {int(runs['ops'].median())} short ops (median) become one "
                   f"op per distinct op in the run ({removed / n / 1000:.0f} µs per step of host time replaced by "
                   f"{per.sum() / n / 1000:.0f} µs)",
           "pessimistic": "twice as many whole-tensor ops as distinct ops in the run",
           "independent": "the loop's iterations are independent (a stack of small sequential layers cannot be batched)"}
    if despiked:
        out["preemption"] = (f"{despiked / n / 1000:.0f} µs per step of ops outside the loops that took over "
                             f"{SPIKE}x their median (preempted) go with the shorter step")
    if launched:
        out["device"] = f"their {launched} kernels become one per distinct op (same work, fewer fixed costs)"
    return out


@model("fewer-threads")
def fewer_threads(x: Inputs, p: Plan, variant: str) -> dict:
    """Under oversubscription an op waits for threads that other processes keep off the cores. With
    one thread each op takes its fast time: the first quartile of the same op's recorded times (name
    and input types); the fastest tenth are the lucky runs the busy machine still preempts."""
    threads = x.machine.torch_threads
    if threads == 1:
        raise NoForecast("torch already runs one intra-op thread")
    top = top_ops(x)
    if top.empty:
        raise NoForecast("no host ops in the replayed steps")
    q = {"low": 0.5, "central": 0.25, "high": 0.1}[variant]
    key = top["name"] + "|" + top["in_type"]
    fast = top.groupby(key)["dur"].transform(lambda d: d.quantile(q) if len(d) >= 3 else d.max()).to_numpy()
    slow = top["dur"].to_numpy() > fast
    ivs = iv.merge((top["ts"].to_numpy() + fast)[slow].astype(np.int64), top["end"].to_numpy()[slow].astype(np.int64))
    removed = remove_host(p, ivs)
    n = len(p.tl.steps)
    return {"threads": f"torch intra-op threads {threads if threads else 'unknown (not recorded)'} -> 1",
            "ops": f"each op takes the {q:.0%} quantile of its own recorded times ({removed / n / 1000:.0f} µs per "
                   "step less); ops too large to gain from threads are assumed absent",
            "pessimistic": "each op takes its median time", "optimistic": "each op takes its 10% quantile"}


@model("caching-allocator")
def caching_allocator(x: Inputs, p: Plan, variant: str) -> dict:
    tl = x.tl
    alloc = (tl.kind == CALL) & np.isin(tl.name, list(ALLOC_CALLS))
    if not alloc.any():
        raise NoForecast("no device malloc/free calls in the replayed steps")
    keep = 0.1 if variant == "low" else 0.0
    cut = tl.own[alloc] * (1.0 - keep)
    p.a[alloc] -= cut
    p.removed_ns += float(cut.sum())
    dropped = drop_waits(p, alloc)
    n = len(tl.steps)
    return {"allocator": f"{int(alloc.sum()) // max(n, 1)} malloc/free calls per step are served from the cache "
                         f"({cut.sum() / n / 1000:.0f} µs per step, {dropped} device waits gone)",
            "pessimistic": "10% of their time stays"}


@model("no-outliers")
def no_outliers(x: Inputs, p: Plan, variant: str) -> dict:
    dur = (x.all_steps["end"] - x.all_steps["start"]).to_numpy(np.float64)
    mean, median = float(dur.mean()), float(np.median(dur))
    if len(dur) < 2 or mean <= median:
        raise NoForecast("no step is slower than the median")
    target = {"low": (mean + median) / 2, "central": median, "high": median}[variant]
    p.scale *= target / mean
    return {"steps": f"every step takes the median step time ({median / 1e6:.2f} ms; mean {mean / 1e6:.2f} ms)",
            "pessimistic": "half of the excess stays"}
