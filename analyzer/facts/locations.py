"""Source lines from python stacks: where in the user's code a sync (or any host event) happened.

With `with_stack=True` the trace holds `python_function` events named `file.py(57): func` (and
`<built-in method item of Tensor object at 0x…>` for C calls) linked by `Python parent id`. For each
event of interest we take the innermost python frame on the same thread that encloses it in time,
then walk `py_parent` up to the first frame whose file is neither torch's nor the standard library's
(`train.py:57 in train_step`). Walks are vectorised over events; loops run over stack depth only.
"""

from __future__ import annotations

import re
import sys

import numpy as np
import pandas as pd

from ..trace.model import PYTHON, Trace
from ..trace.names import name_mask
from ..trace.selection import of_kind
from .common import last_started

_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.+)$")
_LIBRARY_ROOTS = frozenset({"torch"})
MAX_DEPTH = 512
MAX_SITES = 10


def parse_frame(name: str):
    """'train.py(57): train_step' -> ('train.py', 57, 'train_step'); None for built-ins."""
    m = _FRAME.match(name)
    return (m.group("file"), int(m.group("line")), m.group("func")) if m else None


def is_user_frame(name: str) -> bool:
    """A frame in the user's code: not a built-in, not torch, not the standard library."""
    frame = parse_frame(name)
    if frame is None or frame[0].startswith("<"):
        return False
    parts = frame[0].replace("\\", "/").split("/")
    if any(p in _LIBRARY_ROOTS for p in parts[:-1]):
        return False
    if "site-packages" not in parts and any(p.startswith("python3") for p in parts[:-1]):
        return False  # /usr/lib/python3.11/threading.py
    top = parts[0][:-3] if len(parts) == 1 and parts[0].endswith(".py") else parts[0]
    return top not in sys.stdlib_module_names


def user_frames(trace: Trace, points: pd.DataFrame) -> pd.Series:
    """For each row of `points` (ts, pid, tid): the name of the first user frame enclosing it ('' if none)."""
    py = of_kind(trace.events, PYTHON).reset_index(drop=True)
    if py.empty or points.empty:
        return pd.Series([""] * len(points), dtype=object)
    ids, parent = py["py_id"].to_numpy(np.int64), py["py_parent"].to_numpy(np.int64)
    order = np.argsort(ids, kind="stable")
    pos = np.clip(np.searchsorted(ids[order], parent), 0, len(ids) - 1)
    parent_row = np.where(ids[order][pos] == parent, order[pos], -1)
    end, user = py["end"].to_numpy(np.int64), name_mask(py["name"], is_user_frame)
    t = points["ts"].to_numpy(np.int64)
    cur = last_started(points, py)
    for need_user in (False, True):  # first up to a frame that encloses the point, then up to user code
        for _ in range(MAX_DEPTH):
            c = np.clip(cur, 0, None)
            climb = (cur >= 0) & (~user[c] if need_user else end[c] < t)
            if not climb.any():
                break
            cur = np.where(climb, parent_row[c], cur)
    names = py["name"].astype(str).to_numpy()
    return pd.Series(np.where(cur >= 0, names[np.clip(cur, 0, None)], ""), dtype=object)


def sites(trace: Trace, points: pd.DataFrame, n_steps: int) -> list:
    """Call sites of `points`, most frequent first: [{file, line, function, count, count_per_step}]."""
    if not trace.has_stacks or points.empty:
        return []
    frames = user_frames(trace, points)
    counts = frames[frames != ""].value_counts()
    out = []
    for name, count in counts.head(MAX_SITES).items():
        file, line, func = parse_frame(name)
        out.append({"file": file, "line": line, "function": func, "count": int(count),
                    "count_per_step": round(count / n_steps, 3) if n_steps else float(count)})
    return out


def sync_sites(trace: Trace, reads: pd.DataFrame, n_steps: int) -> list:
    """Where the scalar reads (aten::item / _local_scalar_dense) come from in the user's code."""
    return sites(trace, reads, n_steps)
