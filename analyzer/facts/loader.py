"""Facts about what a DataLoader does inside the training process (num_workers=0): its Dataset's
`__getitem__` and its collate run there, so the trace holds their torch ops inside `__next__`
(issue 37: the loader's real cause). The share of the loader's time those ops fill says what is
slow: per-sample tensor ops (batch them, move them to the device), or Python, decoding or I/O
outside any torch op (cache, pre-decode). With python stacks (this trace's, or `perfsleuth run`'s
stacks window: `join_split`), the Dataset's own work is split by class (analysis/frame_work.py):
`loader_cause` names the class that fills most of it, with its share of the loader's time."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis import intervals as iv
from ..analysis.frame_work import CLASSES, TENSOR, loader_work
from ..trace.model import ANNOTATION, CPU_OP, PYTHON
from ..trace.names import is_dataloader, name_mask
from ..trace.selection import of_kind
from .common import Context, span, thread_key

TENSOR_OPS = "per-sample tensor ops"
OUTSIDE_OPS = "Python, decoding or I/O outside torch ops"
OPS_DOMINATE = 0.5  # ops fill at least this share of the loader's time: they are what is slow
CAUSES = tuple(TENSOR_OPS if k == TENSOR else c for k, c in enumerate(CLASSES))

LOADER_FACTS = {
    "loader_op_us_per_step": ("us/step", "time the torch ops run inside DataLoader __next__ on its "
                                         "own thread (the Dataset's __getitem__ and the collate, "
                                         "num_workers=0), per step"),
    "loader_ops_per_step": ("count/step", "outermost torch ops inside DataLoader __next__ (nested "
                                          "ops not counted)"),
    "loader_op_share": ("share", "loader_op_us_per_step / dataloader_wait_us_per_step: the share "
                                 "of the loader's time in torch ops (0 without loader time)"),
    "loader_samples_per_step": ("count/step", "samples loaded per step: the batch size perfsleuth "
                                              "run recorded x the __next__ calls per step; 0 when "
                                              "the batch size is not recorded"),
    "loader_ops_per_sample": ("count", "loader_ops_per_step / loader_samples_per_step (0 without "
                                       "a recorded batch size)"),
    "loader_cost": ("text", f"what fills the loader's time in the training process: "
                            f"'{TENSOR_OPS}' (ops fill at least {OPS_DOMINATE:.0%} of it) or "
                            f"'{OUTSIDE_OPS}'; '' without loader time"),
    "loader_work_us_per_step": ("us/step", "time per step the Dataset's own work fills inside "
                                           "DataLoader __next__ (num_workers=0): its outermost "
                                           "python frames that are not torch/utils/data's (the "
                                           "__getitem__, a custom collate); without python stacks "
                                           "the loader's torch ops (loader_op_us_per_step)"),
    "loader_work_share": ("share", "loader_work_us_per_step / dataloader_wait_us_per_step"),
    "loader_cause": ("text", "the class of the Dataset's work that fills most of it: one of "
                             + ", ".join(f"'{c}'" for c in CAUSES) + " (each frame's own time "
                             "by its name or its nearest classed caller; a torch op run from a "
                             "Python line counts as tensor ops); without python stacks "
                             f"'{TENSOR_OPS}' when ops fill at least {OPS_DOMINATE:.0%} of the "
                             "loader's time; '' otherwise"),
    "loader_cause_us_per_step": ("us/step", "the time loader_cause fills per step"),
    "loader_sites_wait_us_per_step": ("us/step", "the loader's time per step in the trace the "
                                                 "dataloader_sites come from (this one's, or the "
                                                 "stacks window's): their shares of the loader's "
                                                 "time are of this"),
    "loader_cause_source": ("text", "where the split of the loader's time comes from: 'this trace' "
                                    "(its python stacks), 'the stacks window' (perfsleuth run's "
                                    "companion trace: its shares applied to this trace's loader "
                                    "time), 'torch ops' (no stacks), '' (no cause)"),
    "loader_cause_share": ("share", "loader_cause_us_per_step / dataloader_wait_us_per_step: the "
                                    "share of the loader's time the cause fills"),
}


def loader_facts(ctx: Context) -> tuple[dict, dict]:
    host = ctx.kind(ANNOTATION, CPU_OP)
    loader_mask = name_mask(host["name"], is_dataloader)
    dl = host[loader_mask]
    wait_ns = ctx.in_steps_ns(span(dl))
    ops = host[~loader_mask & (host["kind"].to_numpy() == CPU_OP)] if len(dl) else host.iloc[:0]
    ops = ops[np.isin(thread_key(ops), np.unique(thread_key(dl)))]  # the loader's own thread
    inside = iv.covers(span(dl), ops["ts"].to_numpy(np.int64)) if len(ops) else np.zeros(0, bool)
    ops = ops[inside]
    op_ns = iv.total(iv.intersect(span(ops), span(dl))) if len(ops) else 0
    calls = ctx.per_step(len(dl))
    batch = _batch_size(ctx.trace.run_metadata)
    samples = round(calls * batch, 3) if batch else 0.0
    per_step = ctx.per_step(_outermost(ops))
    share = round(op_ns / wait_ns, 4) if wait_ns else 0.0
    return {**_work(ctx, dl, ops, op_ns, wait_ns),
        "loader_op_us_per_step": ctx.per_step_us(op_ns),
        "loader_ops_per_step": per_step,
        "loader_op_share": share,
        "loader_samples_per_step": samples,
        "loader_ops_per_sample": round(per_step / samples, 3) if samples else 0.0,
        "loader_cost": "" if not wait_ns else TENSOR_OPS if share >= OPS_DOMINATE else OUTSIDE_OPS,
    }, {}


def _work(ctx: Context, dl: pd.DataFrame, ops: pd.DataFrame, op_ns: int, wait_ns: int) -> dict:
    """The Dataset's work inside the loader (analysis/frame_work.py): its cause and its time."""
    keys = np.unique(thread_key(dl))
    py = of_kind(ctx.trace.events, PYTHON) if ctx.trace.has_stacks and len(dl) else None
    work = None
    if py is not None and len(py):
        py = py[np.isin(thread_key(py), keys)]
        work = loader_work(py, span(dl), span(ops) if len(ops) else iv.EMPTY)
    if work is not None and work.work_ns:
        cause, work_ns = CAUSES[work.cause], work.work_ns
        cause_ns = float(work.class_ns[work.cause])
        source = "this trace"
    else:  # no stacks: the torch ops are all that can be seen
        cause = TENSOR_OPS if wait_ns and op_ns >= OPS_DOMINATE * wait_ns else ""
        cause_ns, work_ns = (op_ns if cause else 0), op_ns
        source = "torch ops" if cause else ""
    return {"loader_work_us_per_step": ctx.per_step_us(work_ns),
            "loader_work_share": round(work_ns / wait_ns, 4) if wait_ns else 0.0,
            "loader_cause": cause if wait_ns else "",
            "loader_cause_us_per_step": ctx.per_step_us(cause_ns),
            "loader_cause_share": round(cause_ns / wait_ns, 4) if wait_ns else 0.0,
            "loader_cause_source": source if wait_ns else "",
            "loader_sites_wait_us_per_step": ctx.per_step_us(wait_ns)}


def join_split(values: dict, theirs: dict) -> bool:
    """The split of the loader's time from the stacks window (`theirs`: its facts) onto a trace
    without stacks (`values`): the cause and the shares are the window's, the time is this trace's
    loader time times the cause's share there (one loader time: this trace's). Python stacks slow
    Python code more than the rest, so the window's Python share errs high. True when joined."""
    if theirs.get("dataloader_wait_us_per_step"):  # the source lines will come from there
        values["loader_sites_wait_us_per_step"] = theirs["dataloader_wait_us_per_step"]
    split = theirs.get("loader_cause_source") == "this trace"
    if not (values.get("dataloader_wait_us_per_step") and split):
        return False
    for k in ("loader_work_share", "loader_cause", "loader_cause_share"):
        values[k] = theirs[k]
    wait = float(values["dataloader_wait_us_per_step"])
    values["loader_work_us_per_step"] = round(wait * float(theirs["loader_work_share"]), 3)
    values["loader_cause_us_per_step"] = round(wait * float(theirs["loader_cause_share"]), 3)
    values["loader_cause_source"] = "the stacks window"
    return True


def _outermost(ops: pd.DataFrame) -> int:
    """Ops not nested inside an earlier op of their thread (by thread, then start, longest
    first)."""
    if not len(ops):
        return 0
    key, ts, end = thread_key(ops), ops["ts"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
    order = np.lexsort((-end, ts, key))
    key, ts, end = key[order], ts[order], end[order]
    first = np.ones(len(ts), bool)
    first[1:] = key[1:] != key[:-1]
    starts = np.flatnonzero(first)
    reach = np.concatenate([np.maximum.accumulate(end[a:b]) for a, b in  # per thread (a few)
                            zip(starts, np.append(starts[1:], len(end)))])
    nested = np.zeros(len(ts), bool)
    nested[1:] = (~first[1:]) & (ts[1:] < reach[:-1])
    return int((~nested).sum())


def _batch_size(meta) -> int:
    """The batch size of the single-process loader perfsleuth run recorded (0 when none was)."""
    loaders = meta.get("loaders") if isinstance(meta, dict) else None
    loaders = [x for x in loaders or [] if isinstance(x, dict)]
    main = [x for x in loaders if not x.get("num_workers")] or loaders
    size = main[0].get("batch_size") if main else None
    ok = isinstance(size, int) and not isinstance(size, bool) and size > 0
    return int(size) if ok else 0
