"""What goes with a batched loop besides its own ops, and what the rewrite costs around it (issue 39): the
gathering of its outputs (and the copy a cat along a later dimension costs the rewrite), the optimizer's and
zero_grad's per-parameter work for the parameters batching merges (the ops on those it leaves stay), and the
Python before each backward's first node, which keeps the share of the backward's nodes that stay. Used by
batched.py's `batched_ops`; each function removes from or adds to the plan, or says what to."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import intervals as iv
from ...efficiency.shapes import decode_signature
from ...loops import BACKWARD, GATHER_BACKWARD, MIN_REPEAT, PER_PARAMETER, gathers, iterations, segments
from ..plan import Plan, remove_host
from ..registry import Inputs
from .batched_work import shaped_ops
from .host import _collapse_device

ACCUMULATE = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"


def not_optimizer(x: Inputs, df: pd.DataFrame) -> pd.DataFrame:
    """The loop ops outside Optimizer.step and zero_grad (their loops are over parameters, not iterations)."""
    per_parameter = iv.union(*(x.spans(name) for name in PER_PARAMETER))
    return df[~iv.covers(per_parameter, df["ts"].to_numpy(np.int64))]


def gathering(top: pd.DataFrame, loop: pd.DataFrame, steps: pd.DataFrame) -> iv.Intervals:
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


LAYOUT_OPS = 3  # per permuted cat: the transpose before its copy, and the backward nodes of both
COPIES = 2  # ... and its copy, forward and back


def fastest(fwd: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Per gathering op, the fastest time (ns) of the ops at its place in the step (the k-th gathering of each
    step): a cat whose output lands on fresh memory runs several times slower (`cat_loop`'s: 13-17 µs, and
    73-95 µs in steps that page-faulted), and the rewrite's copy into the same layout needs none of that."""
    step = np.searchsorted(steps["host_end"].to_numpy(np.float64), fwd["ts"].to_numpy(np.float64))
    k = pd.Series(step).groupby(step).cumcount().to_numpy()
    dur = pd.Series(fwd["dur"].to_numpy(np.float64))
    return dur.groupby(k).transform("min").to_numpy()


def copies_ns(fwd: pd.DataFrame, df: pd.DataFrame, steps: pd.DataFrame, probed: dict) -> np.ndarray:
    """Per gathering op, what the rewrite's copy of the gathered output costs (ns): where the loop op right
    before it is elementwise and perfsleuth run's probe timed its batched output copied with the batch's
    dimension moved second (`probed`: ts -> ns per call), that time over the loop's iterations (the op's calls in
    its segment); else the gathering's `fastest` time. A cat in the loop's program runs on the memory its steps
    leave: with two threads every replayed `cat_loop` cat took 90-173 µs, where its rewrite's copy, timed alone,
    takes 9."""
    out = fastest(fwd, steps).copy()
    if not probed or df.empty:
        return out
    before = fwd.index.to_numpy() - 1
    for i, pos in enumerate(before):
        if pos not in df.index:
            continue
        row = df.loc[pos]
        per = probed.get(int(row["ts"]))
        if per is None:
            continue
        calls = int(((df["segment"] == row["segment"]) & (df["name"] == row["name"])).sum())
        out[i] = per * calls
    return out


def permuted(x: Inputs, fwd: pd.DataFrame) -> np.ndarray:
    """Per gathering op (`gathers`' rows), whether it is a `torch.cat` along a dimension other than the first
    (its Concrete Inputs: recorded shapes): batched, the loops' dimension leads, and the rewrite copies its output
    into the cat's layout -- `out.transpose(0, 1).reshape(b, -1)`, and the gradient back (issue 39: `cat_loop`'s
    rewrite spent 28 of its forward layer's 64 µs around its baddbmm and relu). A stack needs no copy (the
    batched output, permuted, is the stacked tensor: an einsum's `bgo`), nor does a cat along the first
    dimension (a view). False without shapes."""
    out = np.zeros(len(fwd), dtype=bool)
    cats = (fwd["name"].astype(str) == "aten::cat").to_numpy()
    ops = shaped_ops(x) if cats.any() else None
    if ops is None:
        return out
    ops = ops[(ops["name"].astype(str) == "aten::cat").to_numpy()]
    dims = {}
    for t, text in zip(ops["ts"].to_numpy(np.int64), ops["in_shape"].astype(str)):
        _, concrete = decode_signature(text)
        dims[int(t)] = concrete[1] if len(concrete) > 1 else None
    for i, (t, cat) in enumerate(zip(fwd["ts"].to_numpy(np.int64), cats)):
        dim = dims.get(int(t)) if cat else None
        out[i] = isinstance(dim, str) and dim.lstrip("-").isdigit() and int(dim) != 0
    return out


def fewer_parameters(x: Inputs, p: Plan, df: pd.DataFrame, loops: iv.Intervals, variant: str):
    """zero_grad and optimizer.step shrink with the parameters that the loop's modules give way to:
    before, one AccumulateGrad per parameter; after, each loop's parameters per iteration (the
    AccumulateGrads of its backward over its iterations) are one stacked parameter each."""
    total = int((x.ops["name"] == ACCUMULATE).sum())
    looped = (df["name"] == ACCUMULATE).to_numpy()
    if not total or not looped.any():
        return None
    per_loop = iterations(not_optimizer(x, df), exact=True)  # a loop's iterations: the median over its segments
    # a segment of one iteration (a loop op split off from its loop by another op) is no loop of its own, as in
    # loops.loop_backward: an unseen MoE's 35 such segments a window beside its 20 of 16 experts made the median
    # 1, and its 192 expert weights a step stayed 192 parameters (issue 39, eighth round)
    per_loop = per_loop[per_loop.to_numpy() > 1] if (per_loop.to_numpy() > 1).any() else per_loop
    # the parameters of a backward segment with MIN_REPEAT AccumulateGrads or more merge; those of a shorter one,
    # the backward of a layer of the model's own that the loop's backward kinds took in, stay (an unseen neural
    # decision forest's feature extractor: its 2 Linear layers' 4 parameters)
    in_long = looped & (pd.Series(looped).groupby(segments(df)).transform("sum").to_numpy() >= MIN_REPEAT)
    merging = in_long if in_long.any() else looped
    merged = max(1, round(merging.sum() / max(float(per_loop.median()) if len(per_loop) else 1.0, 1.0)))
    after = total - int(merging.sum()) + merged
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


ACCUMULATE_NODE = "torch::autograd::AccumulateGrad"  # inside ACCUMULATE, with the parameter's shape


def _first_shapes(shapes: pd.Series) -> pd.Series:
    """Per op (a categorical `in_shape` column), its first input's shape as a tuple; None for a scalar or none."""
    def first(text) -> tuple | None:
        dims, _ = decode_signature(str(text))
        d = dims[0] if dims else None
        return tuple(d) if isinstance(d, list) and d and all(isinstance(v, int) for v in d) else None
    cats = shapes.cat.categories
    table = pd.Series([first(c) for c in cats] + [None], dtype=object)
    return pd.Series(table.to_numpy()[shapes.cat.codes.to_numpy()], index=shapes.index)  # code -1: the None


def unmerged(x: Inputs, df: pd.DataFrame) -> np.ndarray:
    """Per loop op, whether it is the optimizer's or zero_grad's work on a parameter the loops' backward does not
    accumulate into: the rewrite leaves that parameter, so its per-parameter ops stay as they ran (issue 39,
    unseen: Adam's loop over 100 parameters took the ops of an nn.Linear(768, 128) beside 48 nn.Linear(1, 16)
    away as the loop's and gave their bytes back at the step's rate, 1.03 ms a step where the rewrite's whole
    Adam ran in 0.69). A parameter is the loops' when its shape is that of an AccumulateGrad inside them (from
    the recorded shapes; an op with no tensor shape of its own, Adam's step count, goes with the next op's
    parameter). Without shapes (or shapes of the parameters): all of them when the loops accumulate into
    no parameter, else none."""
    per_parameter = iv.union(*(x.spans(name) for name in PER_PARAMETER))
    optimizer = iv.covers(per_parameter, df["ts"].to_numpy(np.int64))
    looped = (df["name"] == ACCUMULATE).to_numpy() & ~optimizer
    if not optimizer.any() or not looped.any():
        return optimizer
    ops = shaped_ops(x)
    if ops is None:
        return np.zeros(len(df), dtype=bool)
    shape = _first_shapes(ops["in_shape"])
    acc = df[looped]
    in_loop = iv.covers(iv.merge(acc["ts"].to_numpy(np.int64), acc["end"].to_numpy(np.int64)),
                        ops["ts"].to_numpy(np.int64))
    merged = set(shape[in_loop & (ops["name"].astype(str) == ACCUMULATE_NODE).to_numpy()].dropna())
    if not merged:  # the AccumulateGrads carry no parameter's shape: no telling which are the loops'
        return np.zeros(len(df), dtype=bool)
    mine = df[optimizer]
    key = pd.DataFrame({"ts": ops["ts"].to_numpy(np.int64), "end": ops["end"].to_numpy(np.int64),
                        "name": ops["name"].astype(str).to_numpy(), "shape": shape.to_numpy()})
    got = pd.DataFrame({"ts": mine["ts"].to_numpy(np.int64), "end": mine["end"].to_numpy(np.int64),
                        "name": mine["name"].astype(str).to_numpy()}).merge(
        key.drop_duplicates(["ts", "end", "name"]), on=["ts", "end", "name"], how="left")
    shapes = got["shape"].bfill().ffill()
    out = np.zeros(len(df), dtype=bool)
    out[np.flatnonzero(optimizer)] = ~shapes.isin(merged).to_numpy()
    return out


SEED = "aten::ones_like"  # backward() of a scalar loss makes its seed gradient first


def graph_prelude(p: Plan, top: pd.DataFrame, df: pd.DataFrame, seg: pd.DataFrame, gone: iv.Intervals,
                   steps: pd.DataFrame) -> tuple[float, int, int]:
    """The Python from the call into a backward to its first node -- the engine's walk over the whole graph
    before it runs a node, and, where the step rebinds its loss, the freeing of the previous step's graph --
    costs per node of the graph: per step, the gap before each backward's first node (and before the seed
    gradient's `ones_like` right before it) keeps the share of the step's backward nodes that stay (those
    outside `gone`, and one per distinct kind of each backward segment of the loops that comes in), in the
    steps whose loops have a backward. Returns the ns removed and the backward nodes per step before and after
    (0, 0 when no loop has a backward)."""
    name = top["name"].astype(str)
    bw = name.str.startswith(BACKWARD).to_numpy()
    if not bw.any():
        return 0.0, 0, 0
    first = bw & ~np.r_[False, bw[:-1]]
    seed = np.r_[first[1:], False] & (name == SEED).to_numpy()
    ends = steps["host_end"].to_numpy(np.float64)
    step = np.searchsorted(ends, top["ts"].to_numpy())
    n = len(steps)
    nodes = np.bincount(step[bw], minlength=n + 1)[:n].astype(np.float64)
    stays = bw & ~iv.covers(gone, top["ts"].to_numpy(np.int64))
    left = np.bincount(step[stays], minlength=n + 1)[:n].astype(np.float64)
    backward_seg = df["name"].astype(str).str.startswith(BACKWARD).groupby(df["segment"]).all()
    seg_step = np.searchsorted(ends, seg["end"].to_numpy())
    kinds = seg["kinds"].to_numpy(np.float64) * backward_seg.reindex(seg.index).to_numpy()
    added = np.bincount(seg_step, weights=kinds, minlength=n + 1)[:n]
    if not added.any():
        return 0.0, 0, 0
    ts, gap = top["ts"].to_numpy(np.int64), top["gap"].to_numpy()
    starts = (first | seed) & (gap > 0)
    removed = 0.0
    for s in np.flatnonzero(nodes * added):  # a step whose loops have a backward
        at = starts & (step == s)
        keep = min(1.0, (left[s] + added[s]) / nodes[s])
        removed += remove_host(p, iv.merge((ts[at] - gap[at]).astype(np.int64), ts[at]), keep=keep)
    return removed, int(nodes.sum() // n), int((left + added).sum() // n)
