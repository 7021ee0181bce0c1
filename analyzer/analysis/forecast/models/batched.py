"""Forecast model of batching a loop of tiny ops: a Python loop over scalars, slices or small modules
becomes a few whole-tensor ops.

A run is a stretch of one step made only of ops whose kind is short (median under 50 µs), at least 16
ops and 8 of each kind on average; the loop is the kinds the run repeats. What goes with the loop:
- its ops and the Python between them;
- the Python right before and after each loop (its setup, the autograd engine's walk over its nodes
  before a backward, their freeing after it), at most EDGE_PER_OP_NS per loop op;
- the gathering of its outputs (a `torch.cat` / `torch.stack` right after a loop op) and as many
  cat/stack backward nodes: batched code has one output already -- but a cat along a later dimension costs
  the rewrite a copy each way and its layout ops (`permuted`);
- the loop's backward nodes, however long: a backward kind the step runs at least once per iteration of
  its forward loops is the loop's (`loops.loop_backward`);
- when the loop's backward accumulates gradients into many parameters (small modules in a loop), the
  per-parameter work of `zero_grad` and `optimizer.step`, in proportion: batched, each loop keeps its
  parameters per iteration, stacked; their ops on the parameters the loops leave stay as they ran (`unmerged`);
- in traces `perfsleuth run` recorded, the profiler's share of a step's CPU time, spread over the ops a step
  records, with the ops that go (`_without_profiler`).
What comes in, per loop segment: one whole-tensor op per distinct op, each a dispatch of the loop's own op
with the Python before it, and the loop's arithmetic from the recorded shapes (FLOPs of its matrix ops,
bytes of the others) at the rate the step's big ops run at (batched_work.py). Without shapes (or on a
device, whose host op times are launches): OPS_PER_KIND whole-tensor ops per distinct op, each costing the
step's median other op with the Python before it (fitted to the fixtures, docs/forecast.md), and the
assumption says so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ....trace.model import CPU_OP
from ... import intervals as iv
from ...loops import (
    MIN_REPEAT,
    MIN_RUN,
    ONLY_OPTIMIZER,
    OPTIMIZER,
    PER_PARAMETER,
    RECURRENT,
    RECURRENT_LOOP,
    SEQUENTIAL,
    describe,
    evidence,
    gathers,
    loop_backward,
    long_kinds,
    loop_ops,
    not_the_steps,
    segments,
)
from ..plan import Plan, remove_host, step_ns
from ..profiler_share import profiler_share
from ..registry import Inputs, NoForecast, model
from .batched_around import (
    COPIES,
    LAYOUT_OPS,
    copies_ns,
    fewer_parameters,
    gathering,
    graph_prelude,
    not_optimizer,
    permuted,
    unmerged,
)
from .batched_work import Work, light, loop_work, probed_copies, shaped_ops
from .host import _add_back, _collapse_device, top_ops

# The gaps right before and after a loop (its setup, the autograd engine's walk over its nodes before
# a backward, freeing them after) go, up to this much per op of the loop: 0.2-0.4 µs per op measured
# in the fixtures' tiny_ops and module_loop traces (docs/forecast.md).
EDGE_PER_OP_NS = 1_000.0
# The profiler's cost taken out must leave at least this share of the replayed step after the rewrite
# (else the per-op estimate is no estimate: no correction).
MIN_LEFT = 0.1
TIMED_PESSIMISTIC = 1.5  # the pessimistic variant's factor on what perfsleuth run's probe timed batched
OPS_PER_KIND = 2  # whole-tensor ops per distinct op of the loop: the op, and the indexing or reshaping that batches it


def _segments(df: pd.DataFrame) -> pd.DataFrame:
    """Loop ops with nothing else between them (a forward loop, its backward, an optimizer's loop): per
    segment its end, distinct ops, op count, and its first and last op (positions in the top-level ops)."""
    return df.groupby("segment").agg(
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
    # a GRU's input shape tells one time step (a recurrence) from a whole sequence
    reasons = evidence(x.cached("top_ops_shaped", lambda: _with_shapes(x, top)), df, ends, per_parameter, x.frames)
    ok = [s for s, why in reasons.items() if why not in (None, OPTIMIZER, RECURRENT)]
    return df[df["step"].isin(ok).to_numpy()], reasons


def _with_shapes(x: Inputs, df: pd.DataFrame) -> pd.DataFrame:
    """`df` (ops) with each op's recorded input shapes (`in_shape`, matched by start and name), where recorded."""
    ops = shaped_ops(x)
    if ops is None or df.empty or "in_shape" in df:
        return df
    keys = [ops["ts"].to_numpy(np.int64), ops["name"].astype(str).to_numpy()]
    table = pd.Series(ops["in_shape"].astype(str).to_numpy(), index=pd.MultiIndex.from_arrays(keys))
    table = table[~table.index.duplicated()]
    at = pd.MultiIndex.from_arrays([df["ts"].to_numpy(np.int64), df["name"].astype(str).to_numpy()])
    return df.assign(in_shape=table.reindex(at).fillna("").to_numpy())


def _without_profiler(x: Inputs, p: Plan, before_ns: float, start_cut: iv.Intervals, added_ops: float) -> str:
    """The profiler's cost goes with the ops: it took `share` of the recorded steps' CPU time, spread evenly
    over the ops a step records, so the step before the rewrite is `before - c * N` and after it
    `after - c * M` (N ops before, M after: those outside the removed host time and the batched ops that come
    in). Sets the plan's scale so that the replayed ratio is that of the two; returns the assumption."""
    share = profiler_share(x, p.tl.steps["name"])
    if share is None:
        return ""
    f, prof, unprof, whose = share
    ops = x.main_ops[x.main_ops["kind"].to_numpy() == CPU_OP]
    ts = ops["ts"].to_numpy(np.int64)
    n = len(p.tl.steps)
    before_ops = float((~iv.covers(start_cut, ts)).sum()) / n
    after_ops = float((~iv.covers(p.cut, ts)).sum() + added_ops) / n
    per_op = f * before_ns / max(before_ops, 1.0)
    after_ns, _ = step_ns(p)
    b, a = before_ns - per_op * before_ops, after_ns - per_op * after_ops
    if b <= 0 or a <= MIN_LEFT * after_ns:
        return ""
    p.scale = before_ns * a / (after_ns * b)
    p.notes["unprofiled_step_ns"] = b  # the forecaster states the saving and the step after on this scale
    return (f"the profiler took {f:.0%} of a recorded step's CPU time ({prof / 1000:.1f} ms of CPU time profiled, "
            f"{unprof / 1000:.1f} ms without, {whose}, perfsleuth run's clock): {per_op / 1000:.1f} µs per "
            f"recorded op, it goes with the ops: {before_ops:.0f} ops per step before ({b / 1e6:.2f} ms without it), "
            f"{after_ops:.0f} after ({a / 1e6:.2f} ms); the saving and the step after the fix are without it")


_FROM = {"step": "the step's largest ops outside the loops",
         "loop": "the loop's own elementwise ops less a dispatch each (no op in the step does a tenth of a batched "
                 "op's work)",
         "peak": "the machine's measured ceiling (perfsleuth run's probe; no op in the step does a tenth of a "
                 "batched op's work)",
         "none": "taken as free: no op in the step does a tenth of a batched op's work, no measured ceiling"}


def _derived(work: Work, unit: float, kinds: np.ndarray, busy: np.ndarray, n: int) -> str:
    def kept(rate: str) -> str:
        return (f"{work.kept_calls / n:.0f} matmul calls per step that ran at half {rate} or more at their own time "
                f"less a dispatch ({work.kept.sum() / n / 1000:.0f} µs per step: batching does not raise their rate)")

    # a kind of work the loops do none of at a rate is not named (an unseen R-GCN's "0.00 MFLOP of matrix ops per
    # step at 62.38 GFLOP/s", every matmul of its loops timed by the probe)
    rated = []
    if work.flops.sum() > 0:
        rated.append(f"{work.flops.sum() / n / 1e6:.2f} MFLOP of matrix ops per step at {work.flop_rate:.2f} GFLOP/s, "
                     f"{_FROM[work.flop_from]}" + (f", and {kept('that rate')}" if work.kept_calls else ""))
    elif work.kept_calls:
        rated.append(kept(f"the rate of {work.flop_rate:.2f} GFLOP/s ({_FROM[work.flop_from]})"))
    if work.nbytes.sum() > 0:
        rated.append(f"{work.nbytes.sum() / n / 2**20:.2f} MiB of the other ops' bytes at "
                     f"{work.byte_rate * 1e9 / 2**30:.2f} GiB/s, {_FROM[work.byte_from]}")
    rest = "; ".join(rated) + " (copies and gradient sums left out)" if rated else \
        "nothing else (copies and gradient sums left out)"
    timed = ""
    if work.measured_calls:
        timed = (f"{work.measured_calls / n:.0f} of the loops' {work.calls / n:.0f} op calls per step measured: "
                 f"perfsleuth run's probe timed each batched over its recorded shapes on this machine"
                 + (f", {work.wide_calls / n:.0f} of them as one wide matmul (the loops' iterations share an "
                    "operand: no slice of a tensor that differs from one iteration to the next)"
                    if work.wide_calls else "")
                 + (f", {work.varying_calls / n:.0f} of them of shapes that vary from call to call (an expert's "
                    "tokens), timed at their median size and padded to the largest of each loop"
                    if work.varying_calls else "")
                 + f" ({work.measured.sum() / n / 1000:.0f} µs per step); the others' ")
    cut = work.capped().sum()
    capped = (f", the work at these rates at most what the loop's own calls of those ops took, per loop (a batched op "
              f"does their work with fewer fixed costs: {cut / n / 1000:.0f} µs per step less)" if cut > 0 else "")
    return (f"one whole-tensor op per distinct op of each loop ({kinds.sum() / n:.0f} per step), each a dispatch "
            f"of the loop's own op with the Python before it ({unit / 1000:.1f} µs), and the loops' arithmetic "
            f"from the recorded shapes: {timed}{rest}{capped}: "
            f"{(kinds * unit + busy).sum() / n / 1000:.0f} µs per step")


NO_SHAPES = ("the trace has no input shapes; record them (perfsleuth run --record-shapes) to derive it from the "
             "loops' work")
ON_DEVICE = "on a device the host's op times are launches, no measure of the loops' work"
NO_MODEL = "no op of the loops has a FLOPs or bytes model (analysis/efficiency/flops.py)"


def _fitted(whole: float, per: np.ndarray, n: int, why: str) -> str:
    return (f"{OPS_PER_KIND} whole-tensor ops per distinct op of each loop (the op, and the indexing or reshaping "
            f"that batches it), each costing this step's median other op with the Python before it "
            f"({whole / 1000:.1f} µs): {per.sum() / n / 1000:.0f} µs per step -- assumed (fitted to two fixtures): "
            f"{why}")


@model("batched-ops")
def batched_ops(x: Inputs, p: Plan, variant: str) -> dict:
    top = top_ops(x)
    if top.empty:
        raise NoForecast("no host ops in the replayed steps")
    steps = p.tl.steps
    before_ns, start_cut = step_ns(p)[0], p.cut  # the step as the replay has it before the rewrite
    theirs = not_the_steps(x.ops)  # DataLoader fetches and perfsleuth's own ranges: never the loop's, never removed
    df = loop_ops(top, steps["host_end"].to_numpy(np.float64), theirs, light=light(x))
    per_parameter = iv.union(*(x.spans(name) for name in PER_PARAMETER))

    def slower() -> str:  # for a reason without a loop: the kinds that ended the runs
        kinds = long_kinds(top, steps["host_end"].to_numpy(np.float64), iv.union(theirs, per_parameter), light(x))
        return f"; the kinds the steps repeat that run too long for a loop's short op: {kinds}" if kinds else ""
    if df.empty:
        raise NoForecast(f"no loop of {MIN_RUN} or more short ops ({MIN_REPEAT}+ of each kind) in the replayed "
                         f"steps, outside DataLoader fetches{slower()}")
    df, reasons = _independent(x, top, df, steps)
    if df.empty:
        raise NoForecast(ONLY_OPTIMIZER + slower() if set(reasons.values()) == {OPTIMIZER} else
                         RECURRENT_LOOP if RECURRENT in reasons.values() else SEQUENTIAL)
    ends = steps["host_end"].to_numpy(np.float64)
    long_backward = loop_backward(top, not_optimizer(x, df), ends)  # the loop's backward nodes, however long
    if long_backward:
        df, reasons = _independent(x, top, loop_ops(top, ends, theirs, also=long_backward, light=light(x)), steps)
    left = unmerged(x, df)
    stays = df[left]  # the optimizer's ops on parameters the rewrite leaves: as they ran
    df = df[~left]
    if df.empty:
        raise NoForecast(ONLY_OPTIMIZER + slower())
    joined_gap = np.where(df["joined"], df["gap"], 0.0)
    unit = float((df["dur"] + joined_gap).groupby(df["run"]).median().min())
    df = df.assign(segment=segments(df))
    seg = _segments(df)
    # Each loop op with the Python before it (when that followed another short op): the ops between
    # them that the loop does not repeat stay.
    ivs = iv.subtract(iv.merge((df["ts"] - joined_gap).to_numpy(np.int64), df["end"].to_numpy(np.int64)), theirs)
    removed = remove_host(p, ivs)
    optimistic = variant != "low"
    edged = remove_host(p, iv.subtract(_edges(top, seg, df.index.to_numpy()), theirs)) if optimistic else 0.0
    fwd_gathers = gathers(top, df)
    along = permuted(x, fwd_gathers)
    gather = iv.subtract(gathering(top, df, steps), theirs)
    gathered = remove_host(p, gather)  # batched, the output is whole already: no gathering, no backward of it
    walked, nodes_before, nodes_after = graph_prelude(p, top, df, seg, iv.union(ivs, gather), steps)
    ts = top["ts"].to_numpy(np.int64)
    rest = top[~iv.covers(iv.union(ivs, gather), ts)]
    # before the whole-tensor ops: a loop may end in the optimizer
    kept = iv.merge((stays["ts"] - np.where(stays["joined"], stays["gap"], 0.0)).to_numpy(np.int64),
                    stays["end"].to_numpy(np.int64))  # with the Python before each, as the loop's ops go
    params = fewer_parameters(x, p, df, iv.union(ivs, theirs, kept), variant)
    spans = (top.loc[seg["first"].to_numpy(), "ts"].to_numpy(np.int64), seg["end"].to_numpy(np.int64))
    kinds = seg["kinds"].to_numpy(np.float64)
    # on a device the host's op times are launches, no measure of the work: the fitted cost there
    work = None if p.tl.n_nodes else loop_work(x, spans, kinds, ivs, iv.union(gather, theirs, per_parameter),
                                               hot=variant == "high")
    if work is not None:  # one dispatch per kind, and the loop's arithmetic at the step's measured rate
        busy = work.ns()
        timed = work.measured
        # optimistic: the derived arithmetic twice as fast; what the probe timed as it ran back to back (`hot`)
        # pessimistic: the derived cost twice; what the probe timed half again (the rewrite's own reshapes and
        # permutes around it: grouped_mlp's einsum ran 110 µs where the probe's bmm of the same work ran 67)
        per = {"low": 2 * (kinds * unit + busy - timed) + TIMED_PESSIMISTIC * timed, "central": kinds * unit + busy,
               "high": kinds * unit + (busy - timed) / 2 + timed}[variant]
        added = kinds
        adds = _derived(work, unit, kinds, busy, len(steps))
    else:  # no shapes: each kind's ops at the step's median other op with the Python before it (fitted)
        whole = max(float((rest["dur"] + rest["gap"]).median()) if len(rest) else 0.0, unit)
        added = {"low": 2 * OPS_PER_KIND, "central": OPS_PER_KIND, "high": 1}[variant] * kinds
        per = added * whole
        why = ON_DEVICE if p.tl.n_nodes else NO_MODEL if x.trace.has_shapes else NO_SHAPES
        adds = _fitted(whole, per, len(steps), why)
    _add_back(p, seg["end"].to_numpy(np.float64), per)
    copies = copies_ns(fwd_gathers, df, steps, probed_copies(x))[along]  # forward and back, and layout ops
    copied = COPIES * copies + (LAYOUT_OPS * unit if variant != "high" else 0.0)
    _add_back(p, fwd_gathers["end"].to_numpy(np.float64)[along], copied)
    launched = 0
    if p.tl.n_nodes:  # each loop's kernels become the whole-tensor ops' kernels
        launched = _collapse_device(p, spans, added)
    unprofiled = _without_profiler(x, p, before_ns, start_cut,
                                   float(added.sum()) + (COPIES + LAYOUT_OPS) * len(copies))
    n = len(steps)
    # the parts' µs are the recorded step's, the profiler's cost in them: said where the forecast takes it out (an
    # unseen helper read "their ops ... go (64279 µs per step)" above a 46 ms unprofiled step, issue 39)
    recorded = " of the recorded step, the profiler's cost in it" if unprofiled else ""
    out = {"loops": f"{len(df) / n:.0f} short ops per step in the loops ({len(seg) / n:.1f} unbroken stretches of "
                    f"them): their ops and the Python between them go ({removed / n / 1000:.0f} µs per "
                    f"step{recorded})",
           "whole_tensor_ops": adds,
           "edges": f"the Python right before and after each loop (its setup, the autograd engine's walk over its "
                    f"nodes and their freeing), at most {EDGE_PER_OP_NS / 1000:g} µs per op of the loop, goes "
                    f"({edged / n / 1000:.0f} µs per step)",
           "pessimistic": ((("the whole-tensor ops derived from the shapes cost twice, those perfsleuth run's probe "
                             f"timed {TIMED_PESSIMISTIC:g}x what it timed (the rewrite's own reshapes and permutes "
                             "around the batched op)") if work.measured_calls else "the whole-tensor ops cost twice")
                           if work is not None else
                           f"{2 * OPS_PER_KIND} whole-tensor ops per distinct op")
                          + "; the Python around the loops stays; zero_grad and optimizer.step keep twice the "
                            "parameters",
           "optimistic": ((("the arithmetic derived from the shapes runs twice as fast, what perfsleuth run's probe "
                            "timed as it ran back to back, its tensors in the core's cache")
                           if work.measured_calls else "their arithmetic runs twice as fast")
                          if work is not None else
                          "one whole-tensor op per distinct op (one batched op per loop, forward and backward)"),
           "independent": f"the loops' iterations are independent: {describe(reasons)}",
           "not_the_loop": "ops inside DataLoader fetches (__getitem__, an IterableDataset's loop) are the "
                           "DataLoader's, and stay"}
    skipped = sum(1 for why in reasons.values() if why in (None, OPTIMIZER, RECURRENT))
    if skipped:
        out["sequential"] = (f"the loops of {skipped} of {len(reasons)} step(s) show no sign of independent "
                             "iterations and stay")
    if gather[0].size:
        out["gather"] = (f"the cat/stack of the loops' outputs and its backward go "
                         f"({gathered / n / 1000:.0f} µs per step)")
    if len(copies):
        out["gather"] = out.get("gather", "the cat's backward goes") + (
            f"; for the {len(copies) / n:.0f} cat(s) per step along a dimension other than the first, the rewrite "
            f"copies its output into the cat's layout (batched, the loops' dimension leads: a transpose and a "
            f"reshape) and the gradient back: two copies (as perfsleuth run's probe timed the loop's last elementwise "
            f"op's output copied so, else that cat's fastest in the window), and a dispatch "
            f"for the transpose and each backward node ({copied.sum() / n / 1000:.0f} µs per step)")
    if nodes_before:
        out["graph"] = (f"the Python from the call into each backward to its first node (the engine's walk over "
                        f"the graph; where the loss is rebound, the freeing of the previous step's graph) keeps "
                        f"the share of the backward's nodes that stay: {nodes_before} per step become "
                        f"{nodes_after} ({walked / n / 1000:.0f} µs per step less)")
    if params:
        out["parameters"] = params
    if unprofiled:
        out["profiler_cost"] = unprofiled
    if launched:
        out["device"] = f"their {launched} kernels become the whole-tensor ops' (same work, fewer fixed costs)"
    return out
