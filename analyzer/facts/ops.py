"""Facts about op dispatch: how many ops the step runs, how small they are, and how much of the step
goes to small ops and the Python between them.

An op called from Python (an "outermost" op: no other op of the same thread encloses it) pays a fixed
cost -- Python, argument parsing, the dispatcher, allocation -- of several microseconds whatever it
computes. A step made of hundreds of them spends its time on that cost (`tiny-ops`). The ops an
outermost op calls in turn (`aten::linear` -> `aten::addmm`) are counted in `ops_per_step` only.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from ..analysis import intervals as iv
from ..analysis.loops import (OPTIMIZER, PER_PARAMETER, RECURRENT, describe, evidence, light_kinds, loop_ops,
                              not_the_steps)
from ..analysis.steps import OPTIMIZER_PREFIX
from ..trace.model import ANNOTATION, CPU_OP, PYTHON
from ..trace.names import name_mask
from ..trace.selection import rows
from .common import Context, span, thread_key
from .locations import optimizer_sites, sites

SMALL_OP_NS = 100_000  # an outermost op under 100 µs is "small": its fixed cost is a large part of it
SMALL_GAP_NS = 100_000  # Python between two small ops shorter than this belongs to the loop that runs them

OP_FACTS = {
    "ops_per_step": ("count/step", "cpu ops dispatched (every op, those called by other ops included)"),
    "ops_top_per_step": ("count/step", "outermost cpu ops: ops called from Python, not from inside another op"),
    "op_top_median_us": ("us", "median duration of an outermost op"),
    "op_top_mean_us": ("us", "mean duration of an outermost op (a few slow ops pull it far above the median)"),
    "ops_small_per_step": ("count/step", "outermost ops shorter than 100 µs"),
    "tiny_ops_us_per_step": ("us/step", "time in outermost ops shorter than 100 µs plus the Python gaps (< 100 µs) "
                             "between two of them on the same thread; not inside DataLoader fetches (an in-process "
                             "__getitem__, an IterableDataset's loop: the DataLoader's time) or perfsleuth's own ranges"),
    "tiny_ops_share": ("share", "tiny_ops_us_per_step / step time"),
    "tiny_ops_loops_per_step": ("count/step", "loops of short ops on the main thread (analysis/loops.py: 16+ ops, 8+ "
                                "of each kind), outside DataLoader fetches"),
    "tiny_ops_independent": ("bool", "a loop of short ops shows that its iterations are independent (a cat/stack "
                             "of their outputs, a slice of a tensor per iteration, a comprehension in the stacks): "
                             "batching applies; false for a chain of small sequential layers (fuse it instead)"),
    "tiny_ops_sequential": ("bool", "there are loops of short ops outside the optimizer and none shows independent "
                            "iterations: a chain of small sequential layers, which fusing (torch.compile, CUDA "
                            "graphs) speeds up and batching cannot"),
    "tiny_ops_evidence": ("text", "what shows the loops' iterations independent, in words ('none' when nothing)"),
    "tiny_ops_recurrent": ("bool", "no loop of short ops shows independent iterations and a step runs a recurrence "
                           "over time steps (aten::gru_cell, lstm_cell, rnn_*_cell, or a GRU, LSTM or RNN on one "
                           "time step, 8+ times a step): each iteration needs the previous one's hidden state; the "
                           "fused multi-step module or torch.compile is the fix"),
    "tiny_ops_optimizer_only": ("bool", "the only loops of short ops are the optimizer's per-parameter updates (inside "
                                "Optimizer.step / zero_grad): a foreach optimizer is their fix (fused-optimizer), "
                                "batching the model's layers is not"),
    "tiny_ops_outside_optimizer_share": ("share", "the part of tiny_ops_share outside Optimizer.step / zero_grad "
                                         "(their per-parameter updates are fused-optimizer's)"),
    "optimizer_ops_per_step": ("count/step", "outermost cpu ops inside Optimizer.step (one or more per parameter "
                               "tensor without foreach/fused)"),
}


def outermost(ops: pd.DataFrame, keep: Optional[np.ndarray] = None) -> pd.DataFrame:
    """The ops (the rows of `ops` where `keep` is set, all without it) no other op of the same thread
    encloses, sorted by (thread, start); one copy, of the rows that are outermost."""
    if ops.empty:
        return ops
    at = np.flatnonzero(keep) if keep is not None else np.arange(len(ops))
    if at.size == 0:
        return ops.iloc[at]
    key = thread_key(ops)[at]
    order = np.lexsort((ops["ts"].to_numpy(np.int64)[at], key))
    k, ts, end = key[order], ops["ts"].to_numpy(np.int64)[at][order], ops["end"].to_numpy(np.int64)[at][order]
    first_of_thread = np.r_[True, k[1:] != k[:-1]]
    run_max = _cummax_by_run(end, first_of_thread)  # latest end so far within each thread
    prev = np.empty_like(run_max)
    prev[0] = np.iinfo(np.int64).min
    prev[1:] = run_max[:-1]
    return ops.iloc[at[order[first_of_thread | (ts >= prev)]]]


def _cummax_by_run(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running maximum of int64 `values`, restarted where `starts` is set (runs of one thread): one
    accumulate over the values lifted by run (run r by r x the span), exact in int64."""
    run = np.cumsum(starts) - 1
    low = int(values.min())
    span = int(values.max()) - low + 1
    if int(run[-1]) >= (1 << 62) // span:  # would overflow: the groupby (never on real traces)
        return pd.Series(values).groupby(run).cummax().to_numpy()
    lift = run * np.int64(span)
    return np.maximum.accumulate(values - low + lift) - lift + low


def dispatched_mask(ctx: Context) -> np.ndarray:
    """Per cpu op in the steps (`ctx.kind(CPU_OP)`): it is an op (`aten::add`, `autograd::engine::…`,
    `c10d::…`), not a record_function label that old traces store as an op (`ProfilerStep#3`,
    `Optimizer.step#SGD.step`)."""
    return ctx.cached("dispatched_mask", lambda: name_mask(ctx.kind(CPU_OP)["name"], lambda n: "::" in n))


def dispatched(ctx: Context) -> pd.DataFrame:
    """The dispatched ops themselves (a copy of most cpu ops: only where a frame of them is needed)."""
    return ctx.cached("dispatched_ops", lambda: rows(ctx.kind(CPU_OP), dispatched_mask(ctx)))


def top_ops(ctx: Context) -> pd.DataFrame:
    """The outermost dispatched ops (`outermost`), made once per analysis."""
    return ctx.cached("outermost_ops", lambda: outermost(ctx.kind(CPU_OP), dispatched_mask(ctx)))


def op_facts(ctx: Context) -> tuple[dict, dict]:
    n_ops = int(dispatched_mask(ctx).sum())
    top = top_ops(ctx)
    dur = top["dur"].to_numpy(np.int64)
    ann = ctx.kind(ANNOTATION, CPU_OP)
    theirs = not_the_steps(ann)  # a Dataset's loop is the DataLoader's time, perfsleuth's own range nobody's
    small = (dur < SMALL_OP_NS) & ~iv.covers(theirs, top["ts"].to_numpy(np.int64))
    key = thread_key(top)
    ts, end = top["ts"].to_numpy(np.int64), top["end"].to_numpy(np.int64)
    gap = np.r_[ts[1:] - end[:-1], 0] if len(ts) else ts
    loop = np.r_[(key[1:] == key[:-1]) & small[1:], False] & small & (gap > 0) & (gap < SMALL_GAP_NS)

    def small_ns(keep: np.ndarray) -> int:  # the small ops in `keep` and the Python gaps between two of them
        return int(dur[small & keep].sum()) + int(gap[loop & keep & np.r_[keep[1:], True]].sum())
    tiny_ns = small_ns(np.ones(len(ts), bool))
    opt = ann[name_mask(ann["name"], lambda n: n.startswith(OPTIMIZER_PREFIX))]
    opt_win = span(opt)
    in_opt = iv.covers(opt_win, ts)
    per_parameter = span(ann[name_mask(ann["name"], lambda n: n.startswith(PER_PARAMETER))])
    values = {
        "ops_per_step": ctx.per_step(n_ops),
        "ops_top_per_step": ctx.per_step(len(top)),
        "op_top_median_us": round(float(np.median(dur)) / 1000.0, 3) if len(dur) else 0.0,
        "op_top_mean_us": round(float(dur.mean()) / 1000.0, 3) if len(dur) else 0.0,
        "ops_small_per_step": ctx.per_step(int(small.sum())),
        "tiny_ops_us_per_step": ctx.per_step_us(tiny_ns),
        "tiny_ops_share": ctx.share(tiny_ns),
        "tiny_ops_outside_optimizer_share": ctx.share(small_ns(~iv.covers(per_parameter, ts))),
        "optimizer_ops_per_step": ctx.per_step(int(in_opt.sum())),
        **_loops(ctx, top, theirs, per_parameter),
    }
    small_ops = top[small]
    weights = small_ops["dur"].to_numpy(np.float64)
    return values, {"small_op_sites": sites(ctx.trace, small_ops, ctx.n_steps, weights=weights),
                    "optimizer_sites": optimizer_sites(ctx.trace, opt, ctx.n_steps)}


def _loops(ctx: Context, top: pd.DataFrame, theirs: iv.Intervals, per_parameter: iv.Intervals) -> dict:
    """The loops of short ops on the main thread (the thread with the most outermost ops) and whether they
    show independent iterations: the same loops the batched-ops forecast batches (analysis/loops.py)."""
    none = {"tiny_ops_loops_per_step": 0.0, "tiny_ops_independent": False, "tiny_ops_sequential": False,
            "tiny_ops_evidence": "none", "tiny_ops_optimizer_only": False, "tiny_ops_recurrent": False}
    if top.empty:
        return none
    key = thread_key(top)
    keys, counts = np.unique(key, return_counts=True)
    main = keys[np.argmax(counts)]
    t = top[key == main].sort_values("ts").reset_index(drop=True)
    ts, end = t["ts"].to_numpy(np.float64), t["end"].to_numpy(np.float64)
    prev = np.r_[ts[0], np.maximum.accumulate(end)[:-1]] if len(t) else ts
    t = t.assign(ts=ts, end=end, dur=end - ts, gap=np.maximum(ts - prev, 0.0))
    step_ends = ctx.windows[1].astype(np.float64)
    cpu = ctx.kind(CPU_OP)
    light = ctx.cached("light_kinds", lambda: light_kinds(cpu[thread_key(cpu) == main], ctx.trace.run_metadata))
    df = loop_ops(t, step_ends, theirs, light=light)
    if df.empty:
        return none
    py = ctx.kind(PYTHON)
    frames = py[thread_key(py) == main] if len(py) else None
    reasons = evidence(t, df, step_ends, per_parameter, frames)
    shown = {s: why for s, why in reasons.items() if why not in (None, OPTIMIZER, RECURRENT)}
    return {"tiny_ops_loops_per_step": ctx.per_step(df["run"].nunique()), "tiny_ops_independent": bool(shown),
            "tiny_ops_sequential": not shown and None in reasons.values(), "tiny_ops_evidence": describe(shown),
            "tiny_ops_optimizer_only": bool(reasons) and set(reasons.values()) == {OPTIMIZER},
            "tiny_ops_recurrent": not shown and RECURRENT in reasons.values()}
