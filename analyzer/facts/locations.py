"""Source lines from python stacks: where in the user's code a cause lies.

With `with_stack=True` the trace holds `python_function` events named `file.py(57): func` (and
`<built-in method item of Tensor object at 0x…>` for C calls) linked by `Python parent id`. For each
event of interest we take the innermost python frame on the same thread that encloses it in time,
then walk `py_parent` up to the first frame in the user's own code (`train.py:57 in train_step`): not
torch's, perfsleuth's or the standard library's, and not a library's. The profiler writes a library's
frames relative to the site-packages folder it lies in (`lightning/pytorch/loops/fit_loop.py(…)`), which
looks like a relative path of the user's, so a frame whose top folder (or module) is a library's is not
the user's: the libraries `perfsleuth run` saw loaded (run metadata `code.library_roots`, which leaves out
the script's own folder), else the top-level names in this machine's site-packages folders. Walks are
vectorised over events; loops run over stack depth only.

Which line a frame names: the profiler names a frame by its function's first line (`def`, or its
first decorator), except frames that were already running when tracing started: those carry the line
they were executing at that moment (in a training loop, usually the `prof.step()` or
`optimizer.step()` line that started the profiler). Every location says which (`line_kind`:
"function" or "running"). The optimizer findings' locations come from the run instead, when it recorded
them (record/code_sites.py): where the optimizer was constructed ("construction") and where the user's
code calls its `zero_grad` ("call").
"""

from __future__ import annotations

import functools
import os
import re
import site
import sys
from typing import Optional

import numpy as np
import pandas as pd

from ..analysis import intervals as iv
from ..trace.model import CPU_OP, PYTHON, Trace
from ..trace.names import PY_FRAME, is_dataloader, name_mask
from ..trace.selection import derived, of_kind
from .common import last_started, thread_key
from .inside import inside_of

_LIBRARY_ROOTS = frozenset({"torch", "perfsleuth"})
# perfsleuth's own frames (`perfsleuth run` records the machine facts inside the step) are not the user's,
# wherever the package lives (an editable checkout is not named perfsleuth).
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))).replace("\\", "/") + "/"
# The frame the profiler starts tracing from: everything running above it was already running.
# (`record_function.__enter__` lives in the same file and must not match.)
_PROFILER_START = re.compile(r"(?:^|/)torch/autograd/profiler\.py\(\d+\): (?:_start_trace|_prepare_trace)$")
MAX_DEPTH = 512
MAX_SITES = 10
LINE_KINDS = {"function": "the function's first line", "running": "the line running when tracing started",
              "construction": "where the optimizer is constructed", "call": "the call"}
_LIBRARY_DIRS = frozenset({"site-packages", "dist-packages"})
_OPTIMIZER_CLASS = re.compile(r"#(\w+)\.")


def parse_frame(name: str):
    """'train.py(57): train_step' -> ('train.py', 57, 'train_step'); None for built-ins."""
    m = PY_FRAME.match(name)
    return (m.group("file"), int(m.group("line")), m.group("func")) if m else None


_FORMER_COMMANDS = "commands/"  # perfsleuth's run and verify lived in analyzer/commands/ until issue 34


def _own_relative(path: str) -> bool:
    """A path the profiler shortened to the folder perfsleuth's package sits in (`analyzer/record/session.py`
    from an editable checkout: the stacks window records perfsleuth's own step hooks)."""
    own = _OWN_DIR.rstrip("/")
    top = os.path.basename(own) + "/"
    if path.startswith(top + _FORMER_COMMANDS):  # traces recorded before issue 34 moved commands/ apart
        return True
    return path.startswith(top) and os.path.isfile(os.path.join(os.path.dirname(own), path))


def is_user_frame(name: str, library: frozenset = frozenset()) -> bool:
    """A frame in the user's code: not a built-in, not torch, not the standard library, not in site-packages,
    and its top folder or module not one of the `library` roots (`library_roots(trace)`)."""
    frame = parse_frame(name)
    if frame is None or frame[0].startswith("<"):
        return False
    path = frame[0].replace("\\", "/")
    if path.startswith(_OWN_DIR) or _own_relative(path):
        return False
    parts = path.split("/")
    if any(p in _LIBRARY_ROOTS or p in _LIBRARY_DIRS for p in parts[:-1]):
        return False
    if any(p.startswith("python3") for p in parts[:-1]):
        return False  # /usr/lib/python3.11/threading.py
    top = parts[0][:-3] if len(parts) == 1 and parts[0].endswith(".py") else parts[0]
    # `perfsleuth(8): <module>`: the console script, which sits in the folder `perfsleuth run` puts first on sys.path
    return top not in sys.stdlib_module_names and top not in library and top not in _LIBRARY_ROOTS


def library_roots(trace: Trace) -> frozenset:
    """The top-level names whose frames are library code: what the run recorded, else this machine's."""
    code = trace.run_metadata.get("code") if isinstance(trace.run_metadata, dict) else None
    roots = code.get("library_roots") if isinstance(code, dict) else None
    if isinstance(roots, list):
        return frozenset(r for r in roots if isinstance(r, str))
    return installed_roots()


@functools.lru_cache(maxsize=1)
def installed_roots() -> frozenset:
    """Top-level packages and modules in this interpreter's site-packages folders, less those that are also
    in the working directory (most often the script's own folder: its code is the user's)."""
    names: set = set()
    for folder in [*site.getsitepackages(), site.getusersitepackages()]:
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for e in entries:
            stem = e[:-3] if e.endswith(".py") else e
            if stem.isidentifier() and not stem.startswith("_"):
                names.add(stem)
    try:
        here = {e[:-3] if e.endswith(".py") else e for e in os.listdir(".")}
    except OSError:
        here = set()
    return frozenset(names - here)


def _python(trace: Trace) -> pd.DataFrame:
    return derived(trace.events, ("python",), lambda: of_kind(trace.events, PYTHON).reset_index(drop=True))


def _tree(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """For the frames of `_python(trace)`: the row of each frame's parent (-1 for none), and which
    frames are user code; once per analysis (several tables of source locations need them)."""
    def make() -> tuple[np.ndarray, np.ndarray]:
        py = _python(trace)
        ids, parent = py["py_id"].to_numpy(np.int64), py["py_parent"].to_numpy(np.int64)
        order = np.argsort(ids, kind="stable")
        pos = np.clip(np.searchsorted(ids[order], parent), 0, len(ids) - 1)
        rows = np.where(ids[order][pos] == parent, order[pos], -1) if len(ids) else parent
        library = library_roots(trace)
        return rows, name_mask(py["name"], lambda n: is_user_frame(n, library))

    return derived(trace.events, ("python_tree",), make)


def startup_names(trace: Trace) -> frozenset:
    """Names of the python frames that were already running when tracing started (their line is the
    line they were on then, not their function's first line): the frames that enclose the profiler's own
    start frame (`torch/autograd/profiler.py: _start_trace`). A trace without that frame (older torch,
    edited traces) gives none: its lines are taken as function lines."""
    return derived(trace.events, ("startup_names",), lambda: _startup_names(trace))


def _startup_names(trace: Trace) -> frozenset:
    py = _python(trace)
    if py.empty:
        return frozenset()
    start = py[name_mask(py["name"], lambda n: bool(_PROFILER_START.search(n)))]
    if start.empty:
        return frozenset()
    t0 = int(start["ts"].min())
    hit = (py["ts"].to_numpy() <= t0) & (py["end"].to_numpy() >= t0)
    return frozenset(py.loc[hit, "name"].astype(str))


def user_frames(trace: Trace, points: pd.DataFrame) -> pd.Series:
    """For each row of `points` (ts, pid, tid): the name of the first user frame enclosing it ('' if none)."""
    py = _python(trace)
    if py.empty or points.empty:
        return pd.Series([""] * len(points), dtype=object)
    parent_row, user = _tree(trace)
    end = py["end"].to_numpy(np.int64)
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


def location_rows(by_name: pd.DataFrame, n_steps: int, startup: frozenset) -> list:
    """Location rows from a frame-name-indexed frame with `count` and optionally `ns` columns."""
    out = []
    for name, r in by_name.head(MAX_SITES).iterrows():
        file, line, func = parse_frame(name)
        row = {"file": file, "line": line, "function": func, "count": int(r["count"]),
               "count_per_step": round(float(r["count"]) / n_steps, 3) if n_steps else float(r["count"]),
               "line_kind": "running" if name in startup else "function"}
        if "ns" in r:
            row["us_per_step"] = round(float(r["ns"]) / 1000.0 / n_steps, 3) if n_steps else float(r["ns"]) / 1000.0
        out.append(row)
    return out


def sites(trace: Trace, points: pd.DataFrame, n_steps: int, weights: Optional[np.ndarray] = None) -> list:
    """Call sites of `points`, most frequent (or, with `weights` in ns, most time) first:
    [{file, line, function, count, count_per_step, line_kind[, us_per_step]}]."""
    if not trace.has_stacks or points.empty:
        return []
    frames = user_frames(trace, points).to_numpy()
    keep = frames != ""
    df = pd.DataFrame({"name": frames[keep], "count": 1})
    if weights is not None:
        df["ns"] = np.asarray(weights, dtype=np.float64)[keep]
    agg = df.groupby("name").sum().sort_values("ns" if weights is not None else "count", ascending=False)
    return location_rows(agg, n_steps, startup_names(trace))


def sync_sites(trace: Trace, reads: pd.DataFrame, n_steps: int) -> list:
    """Where the scalar reads (aten::item / _local_scalar_dense) come from in the user's code."""
    return sites(trace, reads, n_steps)


def sites_under(trace: Trace, windows: pd.DataFrame, n_steps: int) -> list:
    """The user code that runs inside `windows` (host events such as the DataLoader's `__next__`): the
    outermost user frames inside them (a Dataset's `__getitem__` / `__iter__`, a custom `collate_fn`),
    by time: [{file, line, function, count, count_per_step, us_per_step, line_kind}]."""
    py = _python(trace)
    if not trace.has_stacks or py.empty or windows.empty:
        return []
    same = np.isin(thread_key(py), np.unique(thread_key(windows)))
    win = iv.merge(windows["ts"].to_numpy(np.int64), windows["end"].to_numpy(np.int64))
    ts = py["ts"].to_numpy(np.int64)
    inside = same & iv.covers(win, ts)
    parent_row, user = _tree(trace)
    cand = np.flatnonzero(inside & user)
    cur, nested = parent_row[cand], np.zeros(len(cand), dtype=bool)
    for _ in range(MAX_DEPTH):  # climb while still inside the window: a user frame above means nested
        c = np.clip(cur, 0, None)
        up = (cur >= 0) & inside[c]
        if not up.any():
            break
        nested |= up & user[c]
        cur = np.where(up & ~nested, parent_row[c], -1)
    top = cand[~nested]
    if not len(top):
        return []
    df = pd.DataFrame({"name": py["name"].astype(str).to_numpy()[top], "count": 1,
                       "ns": py["dur"].to_numpy(np.float64)[top]})
    agg = df.groupby("name").sum().sort_values("ns", ascending=False)
    rows = location_rows(agg, n_steps, startup_names(trace))
    ops = _ops_in(trace, windows, win)
    said = inside_of(py, parent_row, top, inside, ops)  # what fills each frame's time (issue 37)
    for row, name in zip(rows, agg.index[:len(rows)]):
        row["inside"] = said.get(name, "")
    return rows


def _ops_in(trace: Trace, windows: pd.DataFrame, win: iv.Intervals) -> iv.Intervals:
    """The torch ops' spans inside `win` on the threads of `windows` (not the windows
    themselves)."""
    cpu = of_kind(trace.events, CPU_OP)
    cpu = cpu[np.isin(thread_key(cpu), np.unique(thread_key(windows)))]
    cpu = cpu[iv.covers(win, cpu["ts"].to_numpy(np.int64)) & ~name_mask(cpu["name"], is_dataloader)]
    return iv.intersect(iv.merge(cpu["ts"].to_numpy(np.int64), cpu["end"].to_numpy(np.int64)), win)


def optimizer_sites(trace: Trace, windows: pd.DataFrame, n_steps: int, calls: bool = False) -> list:
    """Where the user's code constructs the optimizers of `windows` (`Optimizer.step#Adam.step`,
    `Optimizer.zero_grad#Adam.zero_grad`): the fix of an optimizer finding goes there (`fused=True`), not
    where the step runs. With `calls`, first where it calls their `zero_grad` (`set_to_none=`). From the run
    metadata (`perfsleuth.optimizers`); without it (a trace from elsewhere, an optimizer constructed before
    `profile()` began), the call sites from the stacks (`sites`)."""
    if windows.empty:
        return []
    classes = {m.group(1) for m in map(_OPTIMIZER_CLASS.search, windows["name"].astype(str).unique()) if m}
    recorded = trace.run_metadata.get("optimizers") if isinstance(trace.run_metadata, dict) else None
    rows: list = []
    for o in recorded if isinstance(recorded, list) else []:
        if not isinstance(o, dict) or o.get("class") not in classes:
            continue
        for c in (o.get("zero_grad") or []) if calls else []:
            rows.append({"file": c["file"], "line": c["line"], "function": c["function"], "count": 1,
                         "line_kind": "call"})
        rows.append({"file": o["file"], "line": o["line"], "function": o["function"], "count": int(o.get("count", 1)),
                     "line_kind": "construction", "class": o["class"], "foreach": o.get("foreach"),
                     "fused": o.get("fused")})
    unique = [r for i, r in enumerate(rows) if r not in rows[:i]]
    return unique[:MAX_SITES] or sites(trace, windows, n_steps)
