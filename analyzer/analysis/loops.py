"""Loops of short ops in a step, and whether their iterations are independent (what batching needs).

Shared by the `batched-ops` forecast model (analysis/forecast/models/batched.py) and the `tiny_ops_*` facts (facts/ops.py),
so that a finding and its forecast speak of the same loops.

A run is a stretch of one step's top-level ops (one thread, time order) made only of ops whose kind is
short (median under SMALL_OP_NS, or under LIGHT_NS for a kind whose arithmetic is light: `light_kinds`)
-- or of a kind that scatters one slice into a whole-size gradient
(`SelectBackward0`, ...: each iteration pays for the whole tensor, which is why such a loop is slow,
and why batching it does that work once); at least MIN_RUN ops, MIN_REPEAT of each kind on average.
The loop is the kinds the run repeats MIN_REPEAT times or more.

Batching applies only where the iterations are independent. A trace cannot show data flow, so a step's
loops count as independent only on evidence (`evidence`):
- "gather": a `torch.cat` / `torch.stack` right after a loop op (the loop's outputs are collected);
- "slices": the loop takes slices of a tensor (`x[i]`, `x[:, g]`, `x[i:i+1]`: select, slice, index,
  narrow, or their backward nodes): one slice per iteration;
- "comprehension": the loop's ops run inside a list/generator comprehension frame of the Python stacks.
A stack of small sequential layers (`x = block(x)` 48 times) shows none of them: it is fused
(`torch.compile`, CUDA graphs), not batched. Loops inside Optimizer.step / zero_grad are per-parameter
loops: never evidence on their own (the foreach optimizer is their fix).

Ops under a DataLoader `__next__` (an in-process `__getitem__`, an IterableDataset's loop) and under
perfsleuth's own range are the DataLoader's and perfsleuth's (`not_the_steps`): never a loop's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.names import DATALOADER_PREFIXES, OWN_SPAN, name_mask
from . import intervals as iv
from .efficiency.shapes import decode_signature, modelled_names, op_models

SMALL_OP_NS = 50_000.0  # ops of a kind whose median is this short are dispatch-bound in a long run of their like
# A kind whose arithmetic would take under SMALL_OP_NS at the machine's measured ceilings counts as short up to
# this: a fixed 50 µs decided on the machine's speed. Issue 39, seventh round: a per-head attention loop's
# `aten::linear` ([512, 128] x [128, 8]: 1 MFLOP, 12 µs at the machine's 86 GFLOP/s) had a median of 49.2 µs in
# one recording and 80.5 µs in another of the same program on a slower machine; the second found no loop.
LIGHT_NS = 200_000.0
MIN_RUN = 16
MIN_REPEAT = 8  # a run is a loop: at least this many ops per distinct op
GATHER = ("aten::cat", "aten::stack")
BACKWARD = "autograd::engine::evaluate_function: "
GATHER_BACKWARD = tuple(f"{BACKWARD}{n}" for n in ("CatBackward0", "StackBackward0"))
# Backward nodes of a slice: each writes its slice's gradient into a zero tensor of the whole input's
# size (and the engine adds it to the input's gradient), so a loop over G slices does G whole-size
# writes; batched, one. Part of the loop whatever their duration. So are those of an indexed assignment
# (`y[idx == i] = expert(...)`: IndexPutBackward0 clones the whole gradient and zeroes the assigned rows) and
# of the other gathers by index (index_select, gather, masked_select: a zero tensor of the whole input's size
# each). Issue 39, ninth round: an unseen DeepSeekMoE's 96 IndexPutBackward0 a step, 240 µs each, cut its
# backward's loop into stretches that were none, and its forecasts came out at 0.47 of the measured.
SCATTER_BACKWARD = tuple(f"{BACKWARD}{n}" for n in ("SelectBackward0", "SliceBackward0", "IndexBackward0",
                                                     "NarrowBackward0", "AsStridedBackward0", "IndexPutBackward0",
                                                     "IndexSelectBackward0", "GatherBackward0",
                                                     "MaskedSelectBackward0"))
SLICE_OPS = ("aten::select", "aten::slice", "aten::index", "aten::narrow", "aten::unbind", "aten::split",
             "aten::chunk") + SCATTER_BACKWARD
COMPREHENSIONS = ("<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>")
PER_PARAMETER = ("Optimizer.step#", "Optimizer.zero_grad#")
OPTIMIZER = "optimizer"  # a step whose only loops are the optimizer's per-parameter updates (foreach is their fix)
# a recurrent cell's op: a loop that runs one needs each iteration's hidden state in the next, whatever stacks its
# outputs or slices its input per time step (issue 39: a GRUCell loop over 40 time steps, `h = cell(x[:, t], h)`,
# stacked, read "independent" and forecast 2.77x where nn.GRU, the fused form, ran 1.05x)
RECURRENT_CELLS = ("aten::gru_cell", "aten::lstm_cell", "aten::rnn_tanh_cell", "aten::rnn_relu_cell")
# ... and a multi-step module called on one time step at a time, its hidden state passed on (a seq2seq decoder's
# `output, hidden = self.gru(output, hidden)` per target token, as PyTorch's translation tutorial writes it: a
# GRU over a [32, 1, 64] input 20 times a step read "independent" and was forecast 2.86x); with shapes recorded
# only where its input holds one time step (a 1 in its first two dimensions), without them wherever a loop runs it
RECURRENT_STEPS = ("aten::gru", "aten::lstm", "aten::rnn_tanh", "aten::rnn_relu")
RECURRENT = "recurrent"  # a step that runs a recurrence over time steps (`recurrent_steps`)


def not_the_steps(spans: pd.DataFrame) -> iv.Intervals:
    """The DataLoader `__next__` spans and perfsleuth's own ranges among `spans` (annotations and ops
    with ts, end, name): what happens inside them is the DataLoader's, or perfsleuth's."""
    theirs = spans[name_mask(spans["name"], lambda n: n.startswith(DATALOADER_PREFIXES) or n == OWN_SPAN)]
    return iv.merge(theirs["ts"].to_numpy(np.int64), theirs["end"].to_numpy(np.int64))


def loop_ops(top: pd.DataFrame, step_ends: np.ndarray, exclude: iv.Intervals = None, also=(),
             light=()) -> pd.DataFrame:
    """The ops of the loops in `top` (one thread's top-level ops in time order: ts, end, dur, name, gap,
    default index), each with its run number, its step, and whether the Python before it joins the run.
    Ops that start inside `exclude` (`not_the_steps`) are never loop ops, and end a run. Ops named in
    `also` may be loop ops whatever their duration (`loop_backward`); kinds named in `light` (`light_kinds`)
    are short up to LIGHT_NS where a step calls them MIN_REPEAT times or more."""
    name, short, _, _, step = _kinds(top, step_ends, light)
    small = (short | name.isin(SCATTER_BACKWARD + tuple(also))).to_numpy().copy()
    if exclude is not None:
        small &= ~iv.covers(exclude, top["ts"].to_numpy(np.int64))
    joins = small & np.r_[False, small[:-1]] & np.r_[False, step[1:] == step[:-1]]
    run = np.where(small, np.cumsum(small & ~joins) - 1, -1)
    df = top.assign(run=run, joined=joins, step=step)[small]
    g = df.groupby("run")["name"]
    size, kinds = g.transform("size").to_numpy(), g.transform("nunique").to_numpy()
    df = df[(size >= MIN_RUN) & (size >= MIN_REPEAT * kinds)]
    # The loop is the kinds the run repeats; a short op that appears a few times in the stretch (the
    # model's own layers, the loss, the optimizer of a tiny model) is not part of it and keeps its cost.
    return df[df.groupby(["run", "name"])["name"].transform("size").to_numpy() >= MIN_REPEAT]


def _kinds(top: pd.DataFrame, step_ends: np.ndarray, light=()) -> tuple:
    """Per op of `top`: (its kind's name, whether the kind is short (`loop_ops`), the kind's median, whether a step
    repeats the kind MIN_REPEAT times or more, the op's step)."""
    name = top["name"].astype(str)
    median = top.groupby(name)["dur"].transform("median")
    step = np.searchsorted(np.asarray(step_ends, np.float64), top["ts"].to_numpy(np.float64))
    # light, and repeated as a loop's kinds are: one called a few times a step would only lengthen a run
    # without being its loop's (and a run needs MIN_REPEAT ops per kind)
    calls = pd.Series(step < len(step_ends), index=top.index).groupby(name).transform("sum")
    repeated = calls.to_numpy() >= MIN_REPEAT * max(len(step_ends), 1)
    short = (median <= SMALL_OP_NS) | (name.isin(tuple(light)) & (median <= LIGHT_NS) & repeated)
    return name, short, median, repeated, step


def long_kinds(top: pd.DataFrame, step_ends: np.ndarray, exclude: iv.Intervals = None, light=(),
               most: int = 3) -> str:
    """The kinds a step repeats MIN_REPEAT times or more (ops outside `exclude`) that are too long to be a loop's
    short ops and end its runs, the most time first, at most `most`: 'aten::addmm (36 a step, median 180 µs),
    ...'; '' without. What a reason for no loop names (issue 39, ninth round: an unseen Switch MoE's experts'
    matmuls ran 100-400 µs, and the reason spoke only of the optimizer)."""
    name, short, median, repeated, step = _kinds(top, step_ends, light)
    mine = (repeated & ~short.to_numpy() & ~name.isin(SCATTER_BACKWARD).to_numpy() & (step < len(step_ends)))
    if exclude is not None:
        mine &= ~iv.covers(exclude, top["ts"].to_numpy(np.int64))
    if not mine.any():
        return ""
    k = pd.DataFrame({"name": name[mine], "dur": top["dur"].to_numpy()[mine], "median": median.to_numpy()[mine]})
    g = k.groupby("name").agg(calls=("dur", "size"), total=("dur", "sum"), median=("median", "first"))
    g = g[g["calls"] >= MIN_REPEAT * max(len(step_ends), 1)].sort_values("total", ascending=False).head(most)
    n = max(len(step_ends), 1)
    return ", ".join(f"{kind} ({calls / n:.0f} a step, median {med / 1000:.0f} µs)"
                     for kind, calls, med in zip(g.index, g["calls"], g["median"]))


def measured_ceilings(meta) -> tuple:
    """The machine's measured ceilings (`perfsleuth run`'s probe: fp32 matmul, a copy), per ns: (FLOPs, bytes);
    0 where unknown."""
    peak = meta.get("peak") if isinstance(meta, dict) else None
    if not isinstance(peak, dict) or peak.get("kind") != "measured":
        return 0.0, 0.0
    tflops = (peak.get("max_achievable_tflops") or {}).get("matrix_fp32")
    bw = peak.get("mem_bw_gbps")
    ok = (lambda v: isinstance(v, (int, float)) and v > 0)
    return (float(tflops) * 1000.0 if ok(tflops) else 0.0), (float(bw) if ok(bw) else 0.0)


def outermost(ops: pd.DataFrame) -> pd.DataFrame:
    """The ops no other op of `ops` encloses (one thread, time order)."""
    ops = ops.sort_values(["ts", "end"], ascending=[True, False])
    if ops.empty:
        return ops
    e = ops["end"].to_numpy(np.float64)
    prev = np.r_[-np.inf, np.maximum.accumulate(e)[:-1]]
    return ops[ops["ts"].to_numpy(np.float64) >= prev]


def outermost_modelled(ops: pd.DataFrame) -> pd.DataFrame:
    """The ops with a FLOPs/bytes model that no other modelled op encloses (one thread, time order)."""
    return outermost(ops[modelled_names(ops["name"])])


def light_kinds(ops: pd.DataFrame, meta) -> tuple:
    """The kinds of outermost op among `ops` (one thread's cpu ops: ts, end, and the categoricals name, in_type,
    in_shape) whose median call's arithmetic -- its outermost ops with a FLOPs/bytes model, from the recorded
    shapes, each at the slower of its FLOPs at the measured matmul ceiling and its bytes at the copy ceiling --
    takes under SMALL_OP_NS, and more than nothing; () without shapes or measured ceilings (`meta`: the run's
    metadata). Such an op is short on this machine whatever its time: what it spends beyond its arithmetic is what
    batching removes."""
    flop_rate, byte_rate = measured_ceilings(meta)
    if ops is None or ops.empty or "in_shape" not in ops or flop_rate <= 0 or byte_rate <= 0:
        return ()
    top = outermost(ops)
    mod = outermost_modelled(ops)
    if mod.empty:
        return ()
    m = op_models(mod)
    ns = np.maximum(m.flops / flop_rate, m.nbytes / byte_rate)
    starts, ends = top["ts"].to_numpy(np.float64), top["end"].to_numpy(np.float64)
    at = mod["ts"].to_numpy(np.float64)
    which = np.searchsorted(starts, at, side="right") - 1
    hit = (which >= 0) & (at < ends[np.maximum(which, 0)])
    work = np.bincount(which[hit], weights=ns[hit], minlength=len(top))
    med = pd.Series(work).groupby(top["name"].astype(str).to_numpy()).median()
    # a kind without modelled arithmetic (a copy, an allocation, an autograd node's bookkeeping) is not shown light
    return tuple(str(n) for n in med.index[(med.to_numpy() > 0) & (med.to_numpy() <= SMALL_OP_NS)])


# slicing whose per-iteration arguments the trace does not show (tensor indices) or that hands each iteration its
# own piece by definition: a loop with one takes a different slice per iteration
DISTINCT_SLICES = ("aten::index", "aten::index_select", "aten::gather", "aten::split", "aten::split_with_sizes",
                   "aten::chunk", "aten::unbind", "aten::unsafe_split")
SLICING = ("aten::select", "aten::slice", "aten::narrow", "aten::select_backward", "aten::slice_backward")


def shared_steps(ops: pd.DataFrame, spans: iv.Intervals, step_ends: np.ndarray) -> np.ndarray:
    """Per step (of `step_ends`), whether its loops' iterations share their operands: no op in `spans` (the
    loops' ops) slices a tensor differently from one call to the next -- a select, slice or narrow (or its
    backward) whose arguments (Input Dims and Concrete Inputs, `in_shape`) vary, or one of DISTINCT_SLICES.
    `ops`: one thread's cpu ops with `in_shape`. A slice with the same arguments each time (a causal mask's
    `tril[:T, :T]`) is the same tensor for all. A slice whose Concrete Inputs were not recorded counts as
    varying. Then the rewrite's matmuls are one wide matmul, not a batched one (issue 39, seventh round)."""
    out = np.zeros(len(step_ends), bool)
    if ops is None or ops.empty or "in_shape" not in ops or not len(step_ends):
        return out
    ts = ops["ts"].to_numpy(np.float64)
    step = np.searchsorted(np.asarray(step_ends, np.float64), ts)
    inside = iv.covers(spans, ts.astype(np.int64)) & (step < len(step_ends))
    out[np.unique(step[inside])] = True
    name = ops["name"].astype(str).to_numpy()
    slices = inside & np.isin(name, SLICING + DISTINCT_SLICES)
    if not slices.any():
        return out
    args = ops["in_shape"].astype(str).to_numpy()[slices]
    df = pd.DataFrame({"step": step[slices], "name": name[slices], "args": args})
    unrecorded = ~df["args"].str.contains("\x1f[", regex=False) | df["args"].str.endswith("\x1f[]")
    varying = df.groupby(["step", "name"])["args"].transform("nunique").to_numpy() > 1
    out[df["step"].to_numpy()[varying | unrecorded.to_numpy() | df["name"].isin(DISTINCT_SLICES).to_numpy()]] = False
    return out


def segments(loop: pd.DataFrame) -> np.ndarray:
    """Per loop op (rows of `loop`, indexed by their position among the step's outermost ops, with a `run`
    column), its segment: a number shared by the loop ops with nothing else between them."""
    pos = loop.index.to_numpy()
    return np.cumsum(~np.r_[False, (np.diff(pos) == 1) & (np.diff(loop["run"].to_numpy()) == 0)])


def _divisor(counts: np.ndarray) -> int:
    """A segment's iterations from its kinds' counts: their greatest common divisor, over the kinds it repeats
    MIN_REPEAT times or more where it has any; where that is 1, the largest divisor from MIN_REPEAT up to the
    smallest count that every count lies within one of a multiple of (the cat gathering the loop's outputs, or a
    view of the model's own, in the loop's segment: an unseen neural decision forest's 32 trees, `cat` 33 and
    `view` 193 times beside 32, 64 and 160, read 48.5 iterations by the median and "100 parameters per step become
    2" where the rewrite has 7); 1 when there is none."""
    c = counts[counts >= MIN_REPEAT] if (counts >= MIN_REPEAT).any() else counts
    g = int(np.gcd.reduce(c))
    if g > 1 or c.min() < MIN_REPEAT:
        return g
    d = np.arange(int(c.min()), MIN_REPEAT - 1, -1)[:, None]
    r = c[None, :] % d
    near = ((r <= 1) | (r >= d - 1)).all(axis=1)
    return int(d[near.argmax(), 0]) if near.any() else 1


def iterations(loop: pd.DataFrame, exact: bool = False) -> pd.Series:
    """How many iterations each forward loop runs, per (step, segment): a segment is a loop's ops with nothing
    else between them (those holding a backward node are left out, unless no other is left); its
    iterations, the median count of its kinds. `exact`: the greatest common divisor of its kinds' counts where
    that is above 1 (a kind called twice an iteration -- two Linear layers of a member -- counts twice its
    iterations: an unseen REDQ ensemble's 10 critics of three Linear and two ReLU each, 30 and 20 a segment, read
    25 iterations by the median), else the median (`_divisor`)."""
    df = loop.assign(segment=segments(loop))
    backward = df["name"].str.startswith(BACKWARD).groupby(df["segment"]).any()
    counts = df.groupby(["step", "segment", "name"]).size().groupby(level=["step", "segment"])
    per = counts.median()
    if exact:
        g = counts.agg(lambda c: _divisor(c.to_numpy()))
        per = per.where(g.to_numpy() <= 1, g.astype(per.dtype))
    forward = ~backward.reindex(per.index.get_level_values("segment")).to_numpy()
    return per[forward] if forward.any() else per  # a loop seen only in its backward: its segments


def loop_backward(top: pd.DataFrame, loop: pd.DataFrame, step_ends: np.ndarray) -> tuple:
    """The backward nodes that belong to the loops whatever their duration: the kinds the steps' backward
    repeats at least once per iteration of their forward loops (an `AddmmBackward0` per `Linear` of the loop,
    a `TanhBackward0` per `tanh`). A long node of such a kind would otherwise cut the loop's backward into
    short stretches that are no loop. A kind that runs fewer times than the loops iterate (the rest of the
    model's layers) is not the loop's."""
    it = iterations(loop)
    # a segment of one iteration (a loop op split off from its loop by another op) is no loop of its own:
    # counted, it raised the need above the MoE loop's 32 ReluBackward0 / MulBackward0 per step (issue 39)
    it = it[it.to_numpy() > 1] if (it.to_numpy() > 1).any() else it
    per_step = it.groupby(level="step").sum()
    if per_step.empty:
        return ()
    need = max(float(per_step.median()), MIN_REPEAT)
    bwd = top[top["name"].astype(str).str.startswith(BACKWARD).to_numpy()]
    steps = per_step.index.to_numpy()
    step = np.searchsorted(np.asarray(step_ends, np.float64), bwd["ts"].to_numpy(np.float64))
    counts = bwd[np.isin(step, steps)].groupby("name").size() / len(steps)
    return tuple(str(n) for n in counts.index[counts.to_numpy() >= need])


def gathers(top: pd.DataFrame, loop: pd.DataFrame) -> pd.DataFrame:
    """The cat/stack ops that directly follow an op of a loop (by position in `top`): they collect the
    loop's outputs."""
    follows = np.isin(np.arange(len(top)) - 1, loop.index.to_numpy())
    return top[follows & top["name"].isin(GATHER).to_numpy()]


def evidence(top: pd.DataFrame, loop: pd.DataFrame, step_ends: np.ndarray, per_parameter: iv.Intervals,
             frames: pd.DataFrame = None) -> dict:
    """Per step that has loops: why its loops' iterations are independent ("gather", "slices",
    "comprehension"), None when nothing shows it, RECURRENT when the step runs a recurrent cell over time steps
    (`recurrent_steps`: none of its loops is evidence then), OPTIMIZER when its only loops are the optimizer's
    per-parameter updates. `per_parameter`: the optimizer's spans (loops there are no evidence);
    `frames`: Python frames (ts, end, name) of the same thread, if recorded."""
    own = loop[~iv.covers(per_parameter, loop["ts"].to_numpy(np.int64))]
    recurrent = recurrent_steps(top, step_ends)
    out: dict = {int(s): OPTIMIZER for s in pd.unique(loop["step"])}
    out.update({int(s): RECURRENT if int(s) in recurrent else None for s in pd.unique(own["step"])})
    # a recurrence's stack and slices are no evidence, nor its backward's nodes (a time step's SelectBackward0
    # where the input requires its gradient), nor the loops of short ops between its long ops (a decoder's
    # embedding and relu per token, its Linear over the vocabulary too long to be a loop's)
    own = own[~np.isin(own["step"].to_numpy(), list(recurrent))]
    found = []
    g = gathers(top, own)
    if len(g):
        found.append(("gather", np.searchsorted(np.asarray(step_ends, np.float64), g["ts"].to_numpy(np.float64))))
    found.append(("slices", own.loc[own["name"].isin(SLICE_OPS).to_numpy(), "step"].to_numpy()))
    if frames is not None and len(frames):
        comp = frames[_any_of(frames["name"], COMPREHENSIONS)]
        spans = iv.merge(comp["ts"].to_numpy(np.int64), comp["end"].to_numpy(np.int64))
        found.append(("comprehension", own.loc[iv.covers(spans, own["ts"].to_numpy(np.int64)), "step"].to_numpy()))
    for why, steps in found:
        for s in pd.unique(steps):
            if int(s) in out and out[int(s)] is None:
                out[int(s)] = why
    return out


def recurrent_steps(top: pd.DataFrame, step_ends: np.ndarray) -> set:
    """The steps (indices into `step_ends`) whose outermost ops (`top`: one thread's, with `in_shape` where shapes
    were recorded) run a recurrent cell (RECURRENT_CELLS), or a multi-step module on one time step
    (RECURRENT_STEPS), MIN_REPEAT times or more: a recurrence over time steps, whatever loops the ops form (an
    unseen seq2seq decoder's GRU ran between a Linear over its vocabulary too long to be a loop's op)."""
    if top.empty:
        return set()
    name = top["name"].astype(str)
    hit = name.isin(RECURRENT_CELLS).to_numpy()
    steps = name.isin(RECURRENT_STEPS).to_numpy().copy()
    if steps.any() and "in_shape" in top:
        steps[steps] = [_one_time_step(text) for text in top.loc[steps, "in_shape"].astype(str)]
    at = np.searchsorted(np.asarray(step_ends, np.float64), top["ts"].to_numpy(np.float64)[hit | steps])
    at = at[at < len(step_ends)]
    counts = np.bincount(at, minlength=len(step_ends)) if at.size else np.zeros(0, np.int64)
    return {int(s) for s in np.flatnonzero(counts >= MIN_REPEAT)}


def _one_time_step(shape_text: str) -> bool:
    """Whether a multi-step RNN op's input (its first tensor) holds one time step; True where shapes are unknown."""
    dims, _ = decode_signature(shape_text)
    first = dims[0] if dims else None
    if not (isinstance(first, list) and first and all(isinstance(d, int) for d in first)):
        return True
    return len(first) == 3 and 1 in first[:2]


def _any_of(names: pd.Series, parts: tuple) -> np.ndarray:
    text = names.astype(str)
    hit = np.zeros(len(text), bool)
    for p in parts:
        hit |= text.str.contains(p, regex=False).to_numpy()
    return hit


def describe(reasons: dict) -> str:
    """What the evidence was, in words (for assumptions and facts)."""
    said = {"gather": "a cat/stack collects the loop's outputs", "slices": "each iteration takes a slice of a tensor",
            "comprehension": "the loop is a list or generator comprehension in the Python stacks"}
    seen = [r for r in ("gather", "slices", "comprehension") if r in reasons.values()]
    return "; ".join(said[r] for r in seen) if seen else "none"


ONLY_OPTIMIZER = (f"the only loops of short ops found are the optimizer's per-parameter updates: a foreach optimizer "
                  f"is their fix (foreach-optimizer forecasts it). A loop is {MIN_RUN} or more ops in a row of kinds "
                  f"whose median call is under {SMALL_OP_NS / 1000:g} µs ({LIGHT_NS / 1000:g} µs where its "
                  f"arithmetic would take under {SMALL_OP_NS / 1000:g} at the machine's measured ceilings); a slower "
                  "kind ends it, so a loop of ops near that time can go unfound in a slower recording")
RECURRENT_LOOP = ("the loops run a recurrent cell over time steps (aten::gru_cell, lstm_cell or rnn_*_cell, or a GRU, "
                  "LSTM or RNN on one time step at a time): each iteration needs the previous one's hidden state, so "
                  "they cannot be batched, whatever stacks their outputs or slices their input; the fused multi-step "
                  "module (nn.GRU, nn.LSTM, nn.RNN) runs the loop in one op, torch.compile fuses it, and perfsleuth "
                  "has no forecast for either")
SEQUENTIAL = ("no sign that the loop's iterations are independent (no cat/stack of their outputs, no slice of a "
              "tensor per iteration, no comprehension in the Python stacks): the trace cannot tell them from a "
              "chain of small sequential layers, each needing the previous one's output, which cannot be "
              "batched; fusing it (torch.compile, CUDA graphs on a GPU) is the fix for that, and perfsleuth has "
              "no forecast for it")
