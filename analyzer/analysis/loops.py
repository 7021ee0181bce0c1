"""Loops of short ops in a step, and whether their iterations are independent (what batching needs).

Shared by the `batched-ops` forecast model (analysis/forecast/models/batched.py) and the `tiny_ops_*` facts (facts/ops.py),
so that a finding and its forecast speak of the same loops.

A run is a stretch of one step's top-level ops (one thread, time order) made only of ops whose kind is
short (median under SMALL_OP_NS) -- or of a kind that scatters one slice into a whole-size gradient
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

SMALL_OP_NS = 50_000.0  # ops of a kind whose median is this short are dispatch-bound in a long run of their like
MIN_RUN = 16
MIN_REPEAT = 8  # a run is a loop: at least this many ops per distinct op
GATHER = ("aten::cat", "aten::stack")
BACKWARD = "autograd::engine::evaluate_function: "
GATHER_BACKWARD = tuple(f"{BACKWARD}{n}" for n in ("CatBackward0", "StackBackward0"))
# Backward nodes of a slice: each writes its slice's gradient into a zero tensor of the whole input's
# size (and the engine adds it to the input's gradient), so a loop over G slices does G whole-size
# writes; batched, one. Part of the loop whatever their duration.
SCATTER_BACKWARD = tuple(f"{BACKWARD}{n}" for n in ("SelectBackward0", "SliceBackward0", "IndexBackward0",
                                                     "NarrowBackward0", "AsStridedBackward0"))
SLICE_OPS = ("aten::select", "aten::slice", "aten::index", "aten::narrow", "aten::unbind", "aten::split",
             "aten::chunk") + SCATTER_BACKWARD
COMPREHENSIONS = ("<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>")
PER_PARAMETER = ("Optimizer.step#", "Optimizer.zero_grad#")
OPTIMIZER = "optimizer"  # a step whose only loops are the optimizer's per-parameter updates (foreach is their fix)


def not_the_steps(spans: pd.DataFrame) -> iv.Intervals:
    """The DataLoader `__next__` spans and perfsleuth's own ranges among `spans` (annotations and ops
    with ts, end, name): what happens inside them is the DataLoader's, or perfsleuth's."""
    theirs = spans[name_mask(spans["name"], lambda n: n.startswith(DATALOADER_PREFIXES) or n == OWN_SPAN)]
    return iv.merge(theirs["ts"].to_numpy(np.int64), theirs["end"].to_numpy(np.int64))


def loop_ops(top: pd.DataFrame, step_ends: np.ndarray, exclude: iv.Intervals = None, also=()) -> pd.DataFrame:
    """The ops of the loops in `top` (one thread's top-level ops in time order: ts, end, dur, name, gap,
    default index), each with its run number, its step, and whether the Python before it joins the run.
    Ops that start inside `exclude` (`not_the_steps`) are never loop ops, and end a run. Ops named in
    `also` may be loop ops whatever their duration (`loop_backward`)."""
    name = top["name"].astype(str)
    short = top.groupby(name)["dur"].transform("median") <= SMALL_OP_NS
    small = (short | name.isin(SCATTER_BACKWARD + tuple(also))).to_numpy().copy()
    if exclude is not None:
        small &= ~iv.covers(exclude, top["ts"].to_numpy(np.int64))
    step = np.searchsorted(np.asarray(step_ends, np.float64), top["ts"].to_numpy(np.float64))
    joins = small & np.r_[False, small[:-1]] & np.r_[False, step[1:] == step[:-1]]
    run = np.where(small, np.cumsum(small & ~joins) - 1, -1)
    df = top.assign(run=run, joined=joins, step=step)[small]
    g = df.groupby("run")["name"]
    size, kinds = g.transform("size").to_numpy(), g.transform("nunique").to_numpy()
    df = df[(size >= MIN_RUN) & (size >= MIN_REPEAT * kinds)]
    # The loop is the kinds the run repeats; a short op that appears a few times in the stretch (the
    # model's own layers, the loss, the optimizer of a tiny model) is not part of it and keeps its cost.
    return df[df.groupby(["run", "name"])["name"].transform("size").to_numpy() >= MIN_REPEAT]


def iterations(loop: pd.DataFrame) -> pd.Series:
    """How many iterations each forward loop runs, per (step, segment): a segment is a loop's ops with nothing
    else between them (those holding a backward node are left out, unless no other is left); its
    iterations, the median count of its kinds."""
    pos = loop.index.to_numpy()
    seg = np.cumsum(~np.r_[False, (np.diff(pos) == 1) & (np.diff(loop["run"].to_numpy()) == 0)])
    df = loop.assign(segment=seg)
    backward = df["name"].str.startswith(BACKWARD).groupby(df["segment"]).any()
    per = df.groupby(["step", "segment", "name"]).size().groupby(level=["step", "segment"]).median()
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
    "comprehension"), None when nothing shows it, OPTIMIZER when its only loops are the optimizer's
    per-parameter updates. `per_parameter`: the optimizer's spans (loops there are no evidence);
    `frames`: Python frames (ts, end, name) of the same thread, if recorded."""
    own = loop[~iv.covers(per_parameter, loop["ts"].to_numpy(np.int64))]
    out: dict = {int(s): OPTIMIZER for s in pd.unique(loop["step"])}
    out.update({int(s): None for s in pd.unique(own["step"])})
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
                  f"whose median call is under {SMALL_OP_NS / 1000:g} µs; a slower kind ends it, so a loop of ops "
                  "near that time can go unfound in a slower recording")
SEQUENTIAL = ("no sign that the loop's iterations are independent (no cat/stack of their outputs, no slice of a "
              "tensor per iteration, no comprehension in the Python stacks): the trace cannot tell them from a "
              "chain of small sequential layers, each needing the previous one's output, which cannot be "
              "batched; fusing it (torch.compile, CUDA graphs on a GPU) is the fix for that, and perfsleuth has "
              "no forecast for it")
