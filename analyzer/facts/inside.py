"""What fills a user frame's time (issue 37: the loader's real cause): under it, each frame the
python stacks hold adds its own time to a class -- tensor ops, sleeping or waiting, I/O, decoding or
Python -- by its name, or, for Python code, by the nearest enclosing frame that is not Python.
Vectorised over frames; loops over stack depth only."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..trace.names import name_mask

MAX_DEPTH = 512
CLASSES = ("tensor ops", "sleeping or waiting", "I/O", "decoding", "Python")
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


def classify(name: str) -> str:
    """The class of a frame's own time, from its name."""
    return next((what for what, rx in _RULES if rx.search(name)), "Python")


def inside_of(py: pd.DataFrame, parent_row: np.ndarray, top: np.ndarray, within=None) -> dict:
    """{frame name: "sleeping or waiting 50%, decoding 20%, Python 20%, tensor ops 10%"}: for the
    top frames (rows of `py`, the python_function events) by name, the share of their time each
    class takes, largest first, shares under 1 % left out. Each frame under a top frame adds its own
    time (less its children's) to its class: its name's (`classify`), or, for a Python frame, the
    nearest enclosing frame's that is not Python (a helper inside PIL decodes); the top frames' own
    time is Python. `within`: the frames that may lie under a top frame (inside the windows the top
    frames were found in), so that the climb walks only those."""
    n = len(py)
    if not len(top) or not n:
        return {}
    own_cls = np.full(n, len(CLASSES) - 1, dtype=np.int64)
    for i, what in enumerate(CLASSES[:-1]):
        own_cls[name_mask(py["name"], lambda s, w=what: classify(s) == w)] = i
    python = len(CLASSES) - 1
    is_top = np.zeros(n, dtype=bool)
    is_top[top] = True
    own_cls[is_top] = python
    owner = np.where(is_top, np.arange(n), -1)  # the top frame each frame lies under (or itself)
    cls = np.where(own_cls != python, own_cls, -1)  # the nearest class not Python, at or above it
    cur = parent_row.copy()
    pending = ~is_top if within is None else (~is_top & within)
    for _ in range(MAX_DEPTH):
        c = np.clip(cur, 0, None)
        up = pending & (cur >= 0)
        take = up & (cls < 0) & (own_cls[c] != python) & ~is_top[c]
        cls[take] = own_cls[c[take]]
        found = up & is_top[c]
        owner[found] = c[found]
        pending = up & ~found
        if not pending.any():
            break
        cur = np.where(pending, parent_row[c], -1)
    cls[cls < 0] = python
    dur = py["dur"].to_numpy(np.float64)
    has_parent = parent_row >= 0
    children_ns = np.bincount(parent_row[has_parent], weights=dur[has_parent], minlength=n)
    own_ns = np.clip(dur - children_ns, 0, None)
    under = owner >= 0
    names = py["name"].astype(str).to_numpy()
    totals = pd.Series(dur[top]).groupby(names[top]).sum()
    parts = pd.Series(own_ns[under]).groupby([names[owner[under]], cls[under]]).sum()
    out = {}
    for name, total in totals.items():  # one per distinct site (a few)
        if total <= 0 or name not in parts.index.get_level_values(0):
            continue
        got = parts.xs(name, level=0)
        shown = sorted((-v / total, int(k)) for k, v in got.items() if v / total >= 0.01)
        out[name] = ", ".join(f"{CLASSES[k]} {-share:.0%}" for share, k in shown)
    return out
