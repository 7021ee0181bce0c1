"""What fills a span of Python (issue 37: the loader's real cause): each python frame's own time
goes to a class -- tensor ops, sleeping or waiting, I/O, decoding or Python -- by its name, or, for
Python code, by the nearest enclosing frame that is not Python (a helper inside PIL decodes). The
classes (`classify`) serve the source locations' "inside it" (facts/inside.py) and the DataLoader's
own work (`loader_work`: the facts' `loader_cause` and the forecast model
`dataloader-in-process-work`, which must split the same time the same way). Vectorised over frames;
loops over stack depth only."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..trace.names import PY_FRAME, name_mask
from . import intervals as iv

MAX_DEPTH = 512
CLASSES = ("tensor ops", "sleeping or waiting", "I/O", "decoding", "Python")
TENSOR, WAITING, IO, DECODING, PYTHON = range(len(CLASSES))
_CALL = r"built-in (?:function|method) "
_RULES = (  # first match wins
    ("sleeping or waiting", re.compile(_CALL + r"(?:sleep|wait|acquire|select|poll)\b")),
    ("I/O", re.compile(_CALL + r"(?:read|readinto|readline|open|recv\w*|load|fromfile)\b"
                       r"|\bio\.|(?:^|/)(?:pickle|gzip|zipfile|tarfile|h5py|lmdb)\b")),
    ("decoding", re.compile(r"decode|imread|(?:^|/)PIL/|Image|cv2|jpeg|png|frombuffer|tobytes"
                            r"|torchvision/io", re.IGNORECASE)),
    ("tensor ops", re.compile(r"built-in method \w+ of (?:type object|Tensor object|PyCapsule)"
                              r"|^aten::|torch/_ops")),
)
# Not the Dataset's work unless the Dataset calls it: torch's own Python (the DataLoader's fetch and
# default collate, the profiler's hooks), perfsleuth's, and built-ins (`<built-in ...>`,
# `<perfsleuth>`).
MACHINERY = re.compile(r"(?:^|/)(?:torch|perfsleuth)/|(?:^|/)analyzer/record/|^<")
# A frame this can read: `file(N): func` (trace.names.PY_FRAME) or a built-in (`<...>`). Another name
# (an `nn.Module: ...` range, a garbled name: issue 38) is no Dataset code of its own: never a top, only
# work where a readable top calls it.


def classify(name: str) -> str:
    """The class of a frame's own time, from its name."""
    return next((what for what, rx in _RULES if rx.search(name)), "Python")


def own_classes(names: pd.Series) -> np.ndarray:
    """The class index (CLASSES) of each frame's own time, by its name (each name tested once)."""
    out = np.full(len(names), PYTHON, dtype=np.int64)
    for i, what in enumerate(CLASSES[:-1]):
        out[name_mask(names, lambda s, w=what: classify(s) == w)] = i
    return out


def climb_classes(own_cls: np.ndarray, parent_row: np.ndarray, is_top: np.ndarray,
                  pending: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the `pending` frames: the nearest class that is not Python at or above each (climbing up
    to and including its top frame, whose own class counts), and the top frame it lies under (-1:
    none). Returns (cls, owner): cls is PYTHON where nothing above is classed; tops own themselves.
    """
    n = own_cls.size
    owner = np.where(is_top, np.arange(n), -1)
    cls = np.where(own_cls != PYTHON, own_cls, -1)
    cur = parent_row.copy()
    pending = pending & ~is_top
    for _ in range(MAX_DEPTH):
        c = np.clip(cur, 0, None)
        up = pending & (cur >= 0)
        take = up & (cls < 0) & (own_cls[c] != PYTHON)
        cls[take] = own_cls[c[take]]
        found = up & is_top[c]
        owner[found] = c[found]
        pending = up & ~found
        if not pending.any():
            break
        cur = np.where(pending, parent_row[c], -1)
    cls[cls < 0] = PYTHON
    return cls, owner


def own_ns(dur: np.ndarray, parent_row: np.ndarray) -> np.ndarray:
    """Each frame's duration less its children's."""
    has = parent_row >= 0
    children = np.bincount(parent_row[has], weights=dur[has], minlength=dur.size)
    return np.clip(dur - children, 0, None)


def parent_rows(py_id: np.ndarray, py_parent: np.ndarray) -> np.ndarray:
    """The row of each frame's parent among these frames (-1 when it is not among them)."""
    if not py_id.size:
        return np.zeros(0, np.int64)
    order = np.argsort(py_id, kind="stable")
    pos = np.clip(np.searchsorted(py_id[order], py_parent), 0, py_id.size - 1)
    return np.where(py_id[order][pos] == py_parent, order[pos], -1).astype(np.int64)


def _under(mask: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Frames with an ancestor (among these frames) in `mask`."""
    out = np.zeros(mask.size, bool)
    cur = parent.copy()
    for _ in range(MAX_DEPTH):
        up = cur >= 0
        if not up.any():
            break
        c = np.clip(cur, 0, None)
        out |= up & mask[c]
        cur = np.where(up & ~out, parent[c], -1)
    return out


def class_spans(s: np.ndarray, e: np.ndarray, parent: np.ndarray, this: np.ndarray) -> iv.Intervals:
    """Where the frames `this` (a mask: frames of one class) spend their own time: their spans less
    those of their children that are not among them."""
    child = (parent >= 0) & this[np.clip(parent, 0, None)] & ~this
    return iv.subtract(iv.merge(s[this], e[this]), iv.merge(s[child], e[child]))


def ops_in_python(python: iv.Intervals, ops: iv.Intervals, most: float) -> float:
    """The torch ops' time inside Python's own time (`x * 2` has no frame of its own: the stacks
    alone would call it Python), at most `most`: what moves from Python to tensor ops."""
    if not ops[0].size or not python[0].size:
        return 0.0
    return min(float(iv.total(iv.intersect(python, ops))), most)


@dataclass
class Work:
    """The Dataset's work inside a loader's windows: per class, its own time (ns) and where it
    ran."""

    class_ns: np.ndarray  # per CLASSES (torch ops run from Python lines moved to tensor ops)
    work_ns: int  # the outermost work frames' time inside the windows (merged)
    spans: dict  # class index -> iv.Intervals of its own time (absolute ns)

    @property
    def cause(self) -> int:
        """The class that fills most of the work (-1 when there is none)."""
        return int(np.argmax(self.class_ns)) if self.class_ns.sum() > 0 else -1


def loader_work(frames: pd.DataFrame, windows: iv.Intervals,
                ops: iv.Intervals = iv.EMPTY) -> Work:
    """The work inside a DataLoader's `__next__` windows (merged, absolute ns) on its own thread.
    `frames`: that thread's python frames (ts, end, name, py_id, py_parent); `ops`: its torch ops'
    spans. The work: the outermost frames inside the windows that are not torch's, perfsleuth's or a
    built-in (`MACHINERY`: the DataLoader's fetch and default collate, the collate's own
    `torch.stack`, once per batch with nothing to batch, the profiler's hooks) -- the tops: a
    Dataset's `__getitem__`, a custom collate -- and everything they call, torch's code included. A
    top's own time is Python (a user function named `decode` is Python until it calls something that
    decodes). A torch op run from a Python line (`x * 2` has no frame of its own) is tensor ops, not
    Python: the ops' time inside Python's own time moves to tensor ops."""
    ts = frames["ts"].to_numpy(np.int64)
    inside = iv.covers(windows, ts) if len(frames) else np.zeros(0, bool)
    f = frames[inside]
    n = len(f)
    empty = Work(np.zeros(len(CLASSES)), 0, {})
    if not n:
        return empty
    names = f["name"].astype(str)
    parent = parent_rows(f["py_id"].to_numpy(np.int64), f["py_parent"].to_numpy(np.int64))
    # the Dataset's own code (or a collate's)
    dataset = ~name_mask(names, lambda s: bool(MACHINERY.search(s))
                         or not (s.startswith("<") or PY_FRAME.match(s)))
    called = _under(dataset, parent)  # called by it, torch's code included
    top, mach = dataset & ~called, ~dataset & ~called
    if not top.any():
        return empty
    own_cls = own_classes(names)
    own_cls[top] = PYTHON
    cls, owner = climb_classes(own_cls, parent, top, ~mach)
    work = (owner >= 0) & ~mach
    s, e = ts[inside], f["end"].to_numpy(np.int64)
    mine = own_ns(np.maximum(e - s, 0).astype(np.float64), parent)
    class_ns = np.bincount(cls[work], weights=mine[work], minlength=len(CLASSES)).astype(np.float64)
    spans = {int(k): class_spans(s, e, parent, work & (cls == k)) for k in np.unique(cls[work])}
    if PYTHON in spans:
        moved = ops_in_python(spans[PYTHON], ops, float(class_ns[PYTHON]))
        class_ns[TENSOR] += moved
        class_ns[PYTHON] -= moved
    work_ns = iv.total(iv.intersect(iv.merge(s[top], e[top]), windows))
    return Work(class_ns, int(work_ns), spans)
