"""Forecast model of batching a loop of tiny ops: a Python loop over scalars, slices or small modules
becomes a few whole-tensor ops.

A run is a stretch of one step made only of ops whose kind is short (median under 50 µs), at least 16
ops and 8 of each kind on average; the loop is the kinds the run repeats. What goes with the loop:
- its ops and the Python between them;
- the Python right before and after each loop (its setup, the autograd engine's walk over its nodes
  before a backward, their freeing after it), at most EDGE_PER_OP_NS per loop op;
- the gathering of its outputs (a `torch.cat` / `torch.stack` right after a loop op) and as many
  cat/stack backward nodes: batched code has one output already;
- when the loop's backward accumulates gradients into many parameters (small modules in a loop), the
  per-parameter work of `zero_grad` and `optimizer.step`, in proportion: batched modules have a few
  stacked parameters instead.
What comes in: per loop, OPS_PER_KIND whole-tensor ops per distinct op, each costing the step's median
other op with the Python before it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import intervals as iv
from .host import _add_back, _collapse_device, top_ops
from ..registry import Inputs, NoForecast, model
from ...loops import GATHER_BACKWARD, MIN_REPEAT, MIN_RUN, ONLY_OPTIMIZER, OPTIMIZER, PER_PARAMETER, SEQUENTIAL, \
    describe, evidence, gathers, loop_ops, not_the_steps
from ..plan import Plan, remove_host

ACCUMULATE = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
# The gaps right before and after a loop (its setup, the autograd engine's walk over its nodes before
# a backward, freeing them after) go, up to this much per op of the loop: 0.2-0.4 µs per op measured
# in the fixtures' tiny_ops and module_loop traces (docs/forecast.md).
EDGE_PER_OP_NS = 1_000.0
OPS_PER_KIND = 2  # whole-tensor ops per distinct op of the loop: the op, and the indexing or reshaping that batches it


def _gathering(top: pd.DataFrame, loop: pd.DataFrame, steps: pd.DataFrame) -> iv.Intervals:
    """The cat/stack that directly follows an op of a loop (it gathers the loop's outputs), and as many
    cat/stack backward nodes (the longest) of the same step."""
    fwd = gathers(top, loop)
    ends = steps["host_end"].to_numpy(np.float64)
    want = pd.Series(np.searchsorted(ends, fwd["ts"].to_numpy())).value_counts()
    bwd = top[top["name"].isin(GATHER_BACKWARD).to_numpy()]
    bwd = bwd.assign(step=np.searchsorted(ends, bwd["ts"].to_numpy())).sort_values("dur", ascending=False)
    bwd = bwd[bwd.groupby("step").cumcount().to_numpy() < bwd["step"].map(want).fillna(0).to_numpy()]
    both = pd.concat([fwd, bwd])
    return iv.merge(both["ts"].to_numpy(np.int64), both["end"].to_numpy(np.int64))


def _fewer_parameters(x: Inputs, p: Plan, df: pd.DataFrame, loops: iv.Intervals, variant: str):
    """zero_grad and optimizer.step shrink with the parameters that the loop's modules give way to:
    before, one AccumulateGrad per parameter; after, the loop keeps one per run."""
    total = int((x.ops["name"] == ACCUMULATE).sum())
    looped = (df["name"] == ACCUMULATE).to_numpy()
    if not total or not looped.any():
        return None
    after = total - int(looped.sum()) + int(df.loc[looped, "run"].nunique())
    ratio = after / total
    keep = {"low": min(1.0, 2 * ratio), "central": ratio, "high": ratio}[variant]
    spans = iv.union(*(x.spans(name) for name in PER_PARAMETER))
    removed = remove_host(p, iv.subtract(spans, loops), keep=keep)  # the loops' own ops are gone already
    if p.tl.n_nodes:
        r = np.searchsorted(spans[0], p.tl.d_call, side="right") - 1
        n = np.bincount(r[r >= 0], minlength=spans[0].size).astype(np.float64)
        _collapse_device(p, spans, np.ceil(n * keep))
    n = len(p.tl.steps)
    return (f"{total // max(n, 1)} parameters per step become {after // max(n, 1)}: zero_grad and optimizer.step "
            f"keep {keep:.0%} of their work ({removed / n / 1000:.0f} µs per step less)")


def _segments(df: pd.DataFrame) -> pd.DataFrame:
    """Loop ops with nothing else between them (a forward loop, its backward, an optimizer's loop): per
    segment its end, distinct ops, op count, and its first and last op (positions in the top-level ops)."""
    pos = df.index.to_numpy()
    same = np.r_[False, (np.diff(pos) == 1) & (np.diff(df["run"].to_numpy()) == 0)]
    return df.assign(segment=np.cumsum(~same)).groupby("segment").agg(
        end=("end", "max"), kinds=("name", "nunique"), ops=("name", "size"), first=("ts", "idxmin"),
        last=("end", "idxmax"))  # idxmin/idxmax: positions, as `top` has a default index


def _edges(top: pd.DataFrame, seg: pd.DataFrame, loop_pos: np.ndarray) -> iv.Intervals:
    """The Python right before each segment and right after it (up to the next op that is not the
    loop's), at most EDGE_PER_OP_NS per op of the segment: next to its first op, next to its last."""
    cap = (seg["ops"] * EDGE_PER_OP_NS).to_numpy()
    first = top.loc[seg["first"].to_numpy()]
    f_ts = first["ts"].to_numpy()
    before = iv.merge(np.maximum(f_ts - first["gap"].to_numpy(), f_ts - cap).astype(np.int64), f_ts.astype(np.int64))
    nxt = seg["last"].to_numpy() + 1
    tail = (nxt < len(top)) & ~np.isin(nxt, loop_pos)
    after = top.iloc[nxt[tail]]
    a_start = (after["ts"] - after["gap"]).to_numpy()
    return iv.union(before, iv.merge(a_start.astype(np.int64),
                                     np.minimum(after["ts"].to_numpy(), a_start + cap[tail]).astype(np.int64)))


def _independent(x: Inputs, top: pd.DataFrame, df: pd.DataFrame, steps: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The loops of the steps whose loops show independent iterations (loops.evidence), and the reasons."""
    per_parameter = iv.union(*(x.spans(name) for name in PER_PARAMETER))
    ends = steps["host_end"].to_numpy(np.float64)
    reasons = evidence(top, df, ends, per_parameter, x.frames)
    ok = [s for s, why in reasons.items() if why not in (None, OPTIMIZER)]
    return df[df["step"].isin(ok).to_numpy()], reasons


@model("batched-ops")
def batched_ops(x: Inputs, p: Plan, variant: str) -> dict:
    top = top_ops(x)
    if top.empty:
        raise NoForecast("no host ops in the replayed steps")
    steps = p.tl.steps
    theirs = not_the_steps(x.ops)  # DataLoader fetches and perfsleuth's own ranges: never the loop's, never removed
    df = loop_ops(top, steps["host_end"].to_numpy(np.float64), theirs)
    if df.empty:
        raise NoForecast(f"no loop of {MIN_RUN} or more short ops ({MIN_REPEAT}+ of each kind) in the replayed "
                         "steps, outside DataLoader fetches")
    df, reasons = _independent(x, top, df, steps)
    if df.empty:
        raise NoForecast(ONLY_OPTIMIZER if set(reasons.values()) == {OPTIMIZER} else SEQUENTIAL)
    joined_gap = np.where(df["joined"], df["gap"], 0.0)
    unit = float((df["dur"] + joined_gap).groupby(df["run"]).median().min())
    seg = _segments(df)
    # Each loop op with the Python before it (when that followed another short op): the ops between
    # them that the loop does not repeat stay.
    ivs = iv.subtract(iv.merge((df["ts"] - joined_gap).to_numpy(np.int64), df["end"].to_numpy(np.int64)), theirs)
    removed = remove_host(p, ivs)
    optimistic = variant != "low"
    edged = remove_host(p, iv.subtract(_edges(top, seg, df.index.to_numpy()), theirs)) if optimistic else 0.0
    gather = iv.subtract(_gathering(top, df, steps), theirs)
    gathered = remove_host(p, gather) if optimistic else 0.0
    ts = top["ts"].to_numpy(np.int64)
    rest = top[~iv.covers(iv.union(ivs, gather), ts)]
    # before the whole-tensor ops: a loop may end in the optimizer
    params = _fewer_parameters(x, p, df, iv.union(ivs, theirs), variant)
    # A whole-tensor op is no tiny op: it costs what the step's other ops cost, the Python before them included.
    whole = max(float((rest["dur"] + rest["gap"]).median()) if len(rest) else 0.0, unit)
    per = {"low": 2 * OPS_PER_KIND * seg["kinds"] * whole, "central": OPS_PER_KIND * seg["kinds"] * whole,
           "high": seg["kinds"] * unit}[variant].to_numpy()
    _add_back(p, seg["end"].to_numpy(np.float64), per)
    launched = 0
    if p.tl.n_nodes:  # each loop's kernels become the whole-tensor ops' kernels
        spans = (top.loc[seg["first"].to_numpy(), "ts"].to_numpy(np.int64), seg["end"].to_numpy(np.int64))
        launched = _collapse_device(p, spans, (per / whole).round())
    n = len(steps)
    out = {"loops": f"{len(seg) / n:.1f} loops per step of {int(seg['ops'].median())} short ops (median): their ops "
                    f"and the Python between them go ({removed / n / 1000:.0f} µs per step)",
           "whole_tensor_ops": f"{OPS_PER_KIND} whole-tensor ops per distinct op of each loop (the op, and the "
                               f"indexing or reshaping that batches it), each costing this step's median other op "
                               f"with the Python before it ({whole / 1000:.1f} µs): "
                               f"{per.sum() / n / 1000:.0f} µs per step",
           "edges": f"the Python right before and after each loop (its setup, the autograd engine's walk over its "
                    f"nodes and their freeing), at most {EDGE_PER_OP_NS / 1000:g} µs per op of the loop, goes "
                    f"({edged / n / 1000:.0f} µs per step)",
           "pessimistic": f"{2 * OPS_PER_KIND} whole-tensor ops per distinct op; the Python around the loops and the "
                          "gathering of their outputs stay; zero_grad and optimizer.step keep twice the parameters",
           "optimistic": f"one whole-tensor op per distinct op, as cheap as a loop op ({unit / 1000:.1f} µs)",
           "independent": f"the loops' iterations are independent: {describe(reasons)}",
           "not_the_loop": "ops inside DataLoader fetches (__getitem__, an IterableDataset's loop) are the "
                           "DataLoader's, and stay"}
    skipped = sum(1 for why in reasons.values() if why in (None, OPTIMIZER))
    if skipped:
        out["sequential"] = (f"the loops of {skipped} of {len(reasons)} step(s) show no sign of independent "
                             "iterations and stay")
    if gather[0].size:
        out["gather"] = (f"the cat/stack of the loops' outputs and its backward go "
                         f"({gathered / n / 1000:.0f} µs per step)")
    if params:
        out["parameters"] = params
    if launched:
        out["device"] = f"their {launched} kernels become the whole-tensor ops' (same work, fewer fixed costs)"
    return out
