"""What the batched rewrite of a loop adds, from the work the loop does (issue 39): the loop's arithmetic
(FLOPs of its matrix ops, bytes of its elementwise, softmax, normalisation and reduction ops), from the
recorded input shapes (analysis/efficiency: one model per op), at the rate the step's big ops run at,
plus one dispatch per distinct op of the loop.

- The loop's work is what its iterations compute, added up: a batched op does the same arithmetic over
  all iterations at once. Copies (zero_, fill_, copy_, cat, index_select, ...) are left out: they are
  how a loop scatters and gathers its slices (a slice's backward zero-fills a whole-size gradient per
  iteration), which the batched op does not repeat; so are the autograd engine's in-place sums of the
  gradients the iterations give one input (`add_`): batched, the input is read once.
- The rate is measured, not assumed: per kind of work (matrix FLOPs, other ops' bytes) the FLOPs or
  bytes per ns of the step's ops outside the loops that do the most of it -- those with at least
  BIG_SHARE of the largest one's work, their work over their time. A rate needs an op of the batched
  op's size: the largest must do at least SIZE_SHARE of an average batched op's work (the loops' work
  over their distinct ops); a rate measured on ops as small as the loop's is their dispatch's. An
  embedding lookup sets no byte rate: its time goes on the indices, not on the bytes.
- Without such an op, the bytes go at the loop's own rate less its dispatch (issue 39, third round): the
  loop's elementwise ops' bytes over their time less a dispatch each, a dispatch being the median time of
  the loop's ops that do no arithmetic (select, view, t: outermost ops without a FLOPs/bytes model). A
  batched op does the same work per element (a `tanh` is as dear per byte at 2 KiB as at 200 KiB, less
  its fixed cost); the machine's measured ceiling (`perfsleuth run`'s probe: a 64 MiB copy) caps it. The
  matrix ops' FLOPs, whose rate grows with the matrices' size, go at the probe's fp32 matmul ceiling.
  Else the work is taken as free -- the assumption says which. A loop matmul that ran at half that rate or more
  is large enough that batching does not raise its rate: it keeps its own time less a dispatch (`Work.kept`). Per
  loop, the work at these rates costs at most what the loop's own calls of those ops took (`Work.capped`): a
  batched op does their work with fewer fixed costs.
- Measured where `perfsleuth run` could (issue 39, fourth round): its probe (record/batched_probe.py, the
  trace's `batched_probe` metadata) timed each repeated small op of the window batched over its recorded
  shapes on this machine. A loop op whose name, shapes and dtype (fp32) the probe timed costs that time per
  call (the batched call's time over its batch, at the batch nearest its kind's calls in its loop stretch: the
  rewrite's op holds one loop's calls) instead of its work at a rate, and its work is left out of the rates'
  sums; where a step's loops share their operands (loops.shared_steps: no slice that differs per iteration), a
  matmul of theirs costs what the probe timed for the one wide matmul that batch folds into (issue 39, seventh
  round). Calls whose shapes differ in one size from call to call (an MoE's experts, each fed the tokens routed
  to it) cost the probe's time for their median size scaled by the work of the largest call of their loop
  stretch: batched, they are padded to it (models/probed.py; issue 39, ninth round). The assumption counts the
  ops so measured.
- Without recorded shapes there is no work to count: None (the model falls back to its fitted cost
  and says so).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ....trace.model import CPU_OP
from ....trace.selection import of_kind
from ... import intervals as iv
from ...loops import light_kinds, measured_ceilings, outermost, outermost_modelled, shared_steps
from ...efficiency import flops as fl
from ...efficiency.shapes import FAMILIES, modelled_names, op_models
from ..registry import Inputs
from .probed import batch_keys, copies, factors, measured_ns, per_signature, probed, varying

SIZE_SHARE = 0.1  # ... and when the largest does at least this share of an average batched op's work
BIG_SHARE = 0.5  # an op outside the loops sets the rate when it does at least this share of the largest one's work
SATURATED = 0.5  # a loop matmul at this share of its rate or more keeps its own time: batching does not raise it
# the autograd engine sums the gradients the iterations give one input (each a whole-size tensor when the
# iterations read slices of it): batched, one op reads the input once and nothing is summed
ACCUMULATE_INTO = "aten::add_"
MATRIX = tuple(FAMILIES.index(f) for f in fl.MATRIX_FAMILIES)
VECTOR = tuple(FAMILIES.index(f) for f in (fl.ELEMENTWISE, fl.NORM, fl.SOFTMAX, fl.REDUCE, fl.EMBEDDING))
# the ops whose bytes per ns are a rate for the loop's bytes: an embedding lookup (or its backward) spends its
# time on the indices, row by row (issue 39: `heads`' embedding ran at 1.3 GB/s where the rewrite's softmax and
# masked_fill over the loop's bytes ran at 3-4 GB/s)
STREAMING = tuple(FAMILIES.index(f) for f in (fl.ELEMENTWISE, fl.NORM, fl.SOFTMAX, fl.REDUCE))


@dataclass
class Work:
    """Per loop segment its matrix FLOPs and other ops' bytes; the rates (per ns; 0: unknown) and where
    each comes from: "step" (the step's big ops), "loop" (the loop's own ops less a dispatch each), "peak"
    (the machine's measured ceiling), "none"."""

    flops: np.ndarray
    nbytes: np.ndarray
    flop_rate: float
    flop_from: str
    byte_rate: float
    byte_from: str
    measured: np.ndarray  # per segment, the time of its ops perfsleuth run's probe timed batched (ns)
    measured_calls: int  # how many loop op calls that is
    calls: int  # of the loop's modelled op calls
    wide_calls: int = 0  # of the measured, the matmuls timed as one wide matmul (the iterations share an operand)
    varying_calls: int = 0  # of the measured, the calls of shapes that vary per call (padded to their loop's largest)
    own: np.ndarray | None = None  # per segment, the time the loop's own calls of the ops priced at a rate took (ns)
    kept: np.ndarray | None = None  # per segment, the own time less a dispatch of its matmuls already at the rate
    kept_calls: int = 0  # how many calls that is

    def derived(self) -> np.ndarray:
        """Per segment, the time of its work at the rates (work at an unknown rate: none) and of its matmuls that
        ran at the rate already (`kept`), uncapped."""
        f = self.flops / self.flop_rate if self.flop_rate > 0 else np.zeros_like(self.flops)
        b = self.nbytes / self.byte_rate if self.byte_rate > 0 else np.zeros_like(self.nbytes)
        return f + b + (self.kept if self.kept is not None else 0.0)

    def capped(self) -> np.ndarray:
        """Per segment, what the cap took off the work at the rates: a batched op does the work of the loop's calls
        it replaces with fewer fixed costs, so never takes longer than they took (issue 39: an unseen MoE's Adam
        updates of its 32 experts' parameters, in-place elementwise ops on tensors that stay in cache, went at the
        step's 4.1 GB/s for 5.6 ms a step where the loop's own calls of them took 2.5; an unseen HF Switch's
        AdamW 15.8 ms where they took 4.7)."""
        d = self.derived()
        return np.maximum(d - self.own, 0.0) if self.own is not None else np.zeros_like(d)

    def ns(self) -> np.ndarray:
        """Per segment, the time of its arithmetic: measured by the probe, else at the rates, at most what the
        loop's own calls of those ops took (`capped`)."""
        return self.derived() - self.capped() + self.measured


def _dispatch_ns(ops: pd.DataFrame, loop: iv.Intervals) -> float:
    """An op's fixed cost in the loop: the median time of its outermost ops that do no arithmetic (neither
    they nor an op inside them has a FLOPs/bytes model: select, view, t, TBackward0, ...); 0 without one."""
    top = outermost(ops)
    top = top[iv.covers(loop, top["ts"].to_numpy(np.int64)) & ~modelled_names(top["name"])]
    modelled = ops[modelled_names(ops["name"])]
    if top.empty:
        return 0.0
    inner = iv.merge(top["ts"].to_numpy(np.int64), top["end"].to_numpy(np.int64))
    hit = np.searchsorted(inner[0], modelled["ts"].to_numpy(np.int64), side="right") - 1
    hit = np.unique(hit[(hit >= 0) & iv.covers(inner, modelled["ts"].to_numpy(np.int64))])
    span = np.searchsorted(inner[0], top["ts"].to_numpy(np.int64), side="right") - 1
    plain = top[~np.isin(span, hit)]
    return float(np.median((plain["end"] - plain["ts"]).to_numpy(np.float64))) if len(plain) else 0.0


def _own_rate(work: np.ndarray, dur: np.ndarray, dispatch: float) -> float:
    """The loop's own ops' work per ns of their time less a dispatch each (0 where none is left)."""
    left = np.maximum(dur - dispatch, 0.0).sum()
    return float(work.sum() / left) if work.sum() > 0 and left > 0 else 0.0


def light(x: Inputs) -> tuple:
    """The kinds of the main thread's outermost ops whose arithmetic is light on this machine (loops.light_kinds),
    once per analysis."""
    return x.cached("light_kinds", lambda: light_kinds(shaped_ops(x), x.trace.run_metadata))


def shaped_ops(x: Inputs) -> pd.DataFrame | None:
    """The main thread's cpu ops in the window (times relative to it, as `x.ops`), with their
    categorical name, in_type and in_shape columns; None without recorded shapes."""
    ev = x.trace.events
    main = x.main_ops
    if not x.trace.has_shapes or "in_shape" not in ev or main.empty:
        return None
    ev = of_kind(ev, CPU_OP)
    w0, w1 = x.tl.w0, x.tl.w0 + int(x.tl.steps["host_end"].iloc[-1]) + 1
    t = ev["ts"].to_numpy()
    sel = ev[(t >= w0) & (t < w1) & (ev["pid"].to_numpy() == main["pid"].iloc[0])
             & (ev["tid"].to_numpy() == main["tid"].iloc[0])]
    return pd.DataFrame({"ts": sel["ts"].to_numpy() - w0, "end": sel["end"].to_numpy() - w0,
                         "name": sel["name"].values, "in_type": sel["in_type"].values,
                         "in_shape": sel["in_shape"].values})


def _rate(work: np.ndarray, dur: np.ndarray, least: float) -> float:
    """Work per ns (the median of their rates) of the ops doing at least BIG_SHARE of the largest
    one's work, if the largest one does at least `least` per call; else 0 (the step shows no rate at
    the batched op's size: a rate measured on ops far smaller is their dispatch's)."""
    if not work.size or work.max() <= 0 or work.max() < least:
        return 0.0
    big = work >= BIG_SHARE * work.max()
    # the median op's rate: one op preempted on a busy machine (a 20x longer add) does not set it
    return float(np.median(work[big] / np.maximum(dur[big], 1.0)))


def _peak(x: Inputs) -> tuple:
    """The machine's measured ceilings (perfsleuth run's probe: fp32 matmul, a copy), per ns: (FLOPs,
    bytes); 0 where unknown."""
    return measured_ceilings(x.trace.run_metadata)


def loop_work(x: Inputs, segments: iv.Intervals, segment_kinds: np.ndarray, loop: iv.Intervals,
              other: iv.Intervals, hot: bool = False) -> Work | None:
    """The work of each loop segment (`segments`: sorted, disjoint spans) done by ops that start in
    `loop` (the loop ops' spans), and the rates of the step's ops outside `loop` and `other` (the
    gathering, DataLoader fetches, the optimizer); `hot`: the probe's batched ops as it timed them back to back,
    their tensors in the cache (the optimistic variant's). None without recorded shapes, or when no op of the
    loops has a FLOPs/bytes model."""
    ops = shaped = shaped_ops(x)
    if ops is None:
        return None
    dispatch = _dispatch_ns(ops, loop)
    ops = outermost_modelled(ops)
    if ops.empty:
        return None
    m = op_models(ops)
    ts = ops["ts"].to_numpy(np.int64)
    dur = (ops["end"] - ops["ts"]).to_numpy(np.float64)
    matrix = np.isin(m.family, MATRIX)
    vector = np.isin(m.family, VECTOR) & (ops["name"].to_numpy() != ACCUMULATE_INTO)
    inside = iv.covers(loop, ts)
    seg = np.searchsorted(segments[0], ts, side="right") - 1
    inside &= seg >= 0
    n = segments[0].size
    meta = x.trace.run_metadata
    sizes = "hot" if hot else "ladder"
    timed_as = per_signature(m, probed(meta, sizes), varying(meta, sizes))
    # each loop op at the probe's batch nearest its kind's calls in its stretch: the rewrite's op holds those
    keys = batch_keys(m, timed_as)
    kind = np.where(keys >= 0, keys, -2 - m.signature)
    per_stretch = pd.DataFrame({"seg": seg, "kind": kind, "f": factors(m, timed_as)}).groupby(["seg", "kind"])
    counts = per_stretch["seg"].transform("size").to_numpy(np.float64)
    # calls of varying shapes batched together are padded to the largest of their stretch (an MoE's experts to
    # the busiest one's tokens: as a rewrite of one batched matmul must)
    busiest = per_stretch["f"].transform("max").to_numpy(np.float64)
    probe_ns = measured_ns(m, inside & (matrix | vector), timed_as, counts, busiest)
    # where a step's loops share their operands, a matmul of theirs is one wide matmul (loops.shared_steps)
    ends = x.tl.steps["host_end"].to_numpy(np.float64)
    shared = shared_steps(shaped, loop, ends)[np.minimum(np.searchsorted(ends, ts), len(ends) - 1)]
    wide_ns = measured_ns(m, inside & matrix & shared, per_signature(m, probed(meta, "wide")), counts)
    wide = ~np.isnan(wide_ns)
    probe_ns[wide] = wide_ns[wide]
    timed = ~np.isnan(probe_ns)
    rated = inside & ~timed  # the loop ops whose time comes from their work at a rate
    flops = np.bincount(seg[rated & matrix], weights=m.flops[rated & matrix], minlength=n).astype(np.float64)
    nbytes = np.bincount(seg[rated & vector], weights=m.nbytes[rated & vector], minlength=n).astype(np.float64)
    measured = np.bincount(seg[timed], weights=probe_ns[timed], minlength=n).astype(np.float64)
    if not (flops.sum() + nbytes.sum() + measured.sum()):
        return None
    outside = ~inside & ~iv.covers(other, ts)
    kinds = max(int(np.sum(segment_kinds)), 1)
    peak = _peak(x)
    rates = []
    streaming = vector & np.isin(m.family, STREAMING)
    for kind, work, total, ceiling in ((matrix, m.flops, flops.sum(), peak[0]),
                                       (streaming, m.nbytes, nbytes.sum(), peak[1])):
        least = SIZE_SHARE * total / kinds
        r = _rate(work[outside & kind].astype(np.float64), dur[outside & kind], least)
        if r > 0 and ceiling > 0:
            r = min(r, ceiling)  # faster than the machine's ceiling: the op's time is not its work
        if r > 0:
            rates.append((r, "step"))
            continue
        own = _own_rate(work[inside & kind].astype(np.float64), dur[inside & kind], dispatch) \
            if kind is streaming else 0.0
        if own > 0:
            rates.append((min(own, ceiling) if ceiling > 0 else own, "loop"))
        else:
            rates.append((ceiling, "peak") if ceiling > 0 else (0.0, "none"))
    calls = int((inside & (matrix | vector)).sum())
    uneven = [s for s, (key, _, _) in timed_as.items() if "*" in key[1]]  # probed.per_signature's families
    varying_calls = int((timed & ~wide & np.isin(m.signature, uneven)).sum())
    priced = rated & (matrix | vector)
    own = np.bincount(seg[priced], weights=dur[priced], minlength=n).astype(np.float64)
    # a loop matmul that already ran at SATURATED of the rate it would go at or more is large enough that batching
    # does not raise its rate: it keeps its own time less a dispatch (issue 39, tenth round: an unseen REDQ
    # ensemble's [256, 256] x [256, 256] matmuls ran at 100-123 GFLOP/s and went at the machine's 172)
    # (one whose time is mostly arithmetic: more than twice a dispatch; a tiny matmul's rate says nothing)
    left = np.maximum(dur - dispatch, 1.0)
    full = (rated & matrix & (dur > 2 * dispatch) & (m.flops / left >= SATURATED * rates[0][0])) \
        if rates[0][0] > 0 else np.zeros_like(rated)
    flops -= np.bincount(seg[full], weights=m.flops[full], minlength=n)
    kept = np.bincount(seg[full], weights=left[full], minlength=n).astype(np.float64)
    return Work(flops, nbytes, *rates[0], *rates[1], measured, int(timed.sum()), calls, int(wide.sum()),
                varying_calls, own, kept, int(full.sum()))


def probed_copies(x: Inputs) -> dict:
    """{ts of an outermost elementwise op of the window: ns per call of copying its output with the batch's
    dimension moved second, as perfsleuth run's probe timed it batched (`copy_ns`)} (`x.ops`' times); empty
    without shapes or such a probe. A rewrite whose loop's outputs are gathered by a cat along a later dimension
    copies them so (`batched_around.copies_ns`)."""
    timed = copies(x.trace.run_metadata)
    ops = shaped_ops(x)
    if ops is None or not timed:
        return {}
    ops = outermost_modelled(ops)
    if ops.empty:
        return {}
    m = op_models(ops)
    ns = measured_ns(m, m.family == FAMILIES.index(fl.ELEMENTWISE), per_signature(m, timed))
    hit = ~np.isnan(ns)
    return dict(zip(ops["ts"].to_numpy(np.int64)[hit].tolist(), ns[hit].tolist()))
