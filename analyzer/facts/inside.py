"""What fills a user frame's time (issue 37: the loader's real cause): under it, each frame the
python stacks hold adds its own time to a class -- tensor ops, sleeping or waiting, I/O, decoding or
Python -- by its name, or, for Python code, by the nearest enclosing frame that is not Python.
Vectorised over frames; loops over stack depth only."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis import intervals as iv
from ..analysis.frame_work import (CLASSES, PYTHON, TENSOR, class_spans, climb_classes,
                                   ops_in_python, own_classes, own_ns)


def inside_of(py: pd.DataFrame, parent_row: np.ndarray, top: np.ndarray, within=None,
              ops: iv.Intervals = iv.EMPTY) -> dict:
    """{frame name: "sleeping or waiting 50%, decoding 20%, Python 20%, tensor ops 10%"}: for the
    top frames (rows of `py`, the python_function events) by name, the share of their time each
    class takes, largest first, shares under 1 % left out. Each frame under a top frame adds its own
    time (less its children's) to its class: its name's (`classify`), or, for a Python frame, the
    nearest enclosing frame's that is not Python (a helper inside PIL decodes); the top frames' own
    time is Python. `within`: the frames that may lie under a top frame (inside the windows the top
    frames were found in), so that the climb walks only those. `ops`: the torch ops' spans on those
    frames' thread: their time inside Python's own time is tensor ops (`x * 2` has no frame)."""
    n = len(py)
    if not len(top) or not n:
        return {}
    own_cls = own_classes(py["name"])
    is_top = np.zeros(n, dtype=bool)
    is_top[top] = True
    own_cls[is_top] = len(CLASSES) - 1  # the top frames' own time is Python
    pending = np.ones(n, bool) if within is None else within
    cls, owner = climb_classes(own_cls, parent_row, is_top, pending)
    own = own_ns(py["dur"].to_numpy(np.float64), parent_row)
    dur = py["dur"].to_numpy(np.float64)
    under = owner >= 0
    names = py["name"].astype(str).to_numpy()
    totals = pd.Series(dur[top]).groupby(names[top]).sum()
    parts = pd.Series(own[under]).groupby([names[owner[under]], cls[under]]).sum()
    out = {}
    for name, total in totals.items():  # one per distinct site (a few)
        if total <= 0 or name not in parts.index.get_level_values(0):
            continue
        got = parts.xs(name, level=0).copy()
        if ops[0].size and PYTHON in got.index:
            mine = under & (names[np.clip(owner, 0, None)] == name) & (cls == PYTHON)
            py_ivs = class_spans(py["ts"].to_numpy(np.int64), py["end"].to_numpy(np.int64),
                                 parent_row, mine)
            moved = ops_in_python(py_ivs, ops, float(got[PYTHON]))
            got[PYTHON] -= moved
            got[TENSOR] = got.get(TENSOR, 0.0) + moved
        shown = sorted((-v / total, int(k)) for k, v in got.items() if v / total >= 0.01)
        out[name] = ", ".join(f"{CLASSES[k]} {-share:.0%}" for share, k in shown)
    return out
