"""Where in the user's own code things happen, seen from inside the run (no stacks needed): where each
optimizer is constructed and where `zero_grad` is called, and which top-level packages are library code.

`perfsleuth run` and `profile()` record them into the trace's `perfsleuth` metadata (record/trace_metadata.py):

    "optimizers": [{"class": "Adam", "file": "train.py", "line": 36, "function": "<module>",
                    "foreach": null, "fused": null, "count": 1, "zero_grad": [{"file", "line", "function"}]}],
    "code": {"user_dir": "/abs/folder/of/the/script", "library_roots": ["lightning", "transformers", ...]}

A frame is the user's when its file is not perfsleuth's, not torch's, not the standard library's and not in a
library folder (`site-packages`, `dist-packages`, the interpreter's own); its file is written as the profiler
writes stack frames (torch/profiler/python_tracer.py `_prefix_regex`: relative to the longest `sys.path` or
site-packages entry it lies under), so these locations and those from Python stacks name the same files.
`library_roots` are the top-level modules loaded from library folders (not from the script's folder): the
profiler writes their frames as `lightning/pytorch/loops/fit_loop.py(…)`, which looks relative, and
facts/locations.py needs to know that such a path is not the user's. Nothing here imports torch.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from typing import Any, Optional

LIBRARY_DIRS = frozenset({"site-packages", "dist-packages"})
MAX_OPTIMIZERS = 16  # distinct construction sites recorded (a loop that builds optimizers must not grow the list)
MAX_CALL_SITES = 4  # distinct zero_grad call sites per optimizer
MAX_DEPTH = 64  # frames walked outwards to the user's code
MAX_ROOTS = 4000
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB = tuple(os.path.abspath(p) + os.sep for p in {sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")} if p)


def _torch_dir() -> Optional[str]:
    torch = sys.modules.get("torch")
    f = getattr(torch, "__file__", None)
    return os.path.dirname(os.path.abspath(f)) + os.sep if f else None


def is_library_file(path: str) -> bool:
    """A file that is not the user's code: built-ins, perfsleuth, torch, the standard library, site-packages."""
    if not path or path.startswith("<"):
        return True
    path = os.path.abspath(path)
    torch_dir = _torch_dir()
    if path.startswith(_OWN_DIR) or (torch_dir and path.startswith(torch_dir)):
        return True
    parts = path.split(os.sep)
    if LIBRARY_DIRS.intersection(parts):
        return True
    return path.startswith(_STDLIB)


def _prefixes() -> list:
    """As torch/profiler/python_tracer.py `_prefix_regex`: the folders a stack frame's file is written relative to."""
    raw = list(site.getsitepackages()) + list(sys.path) + [site.getuserbase(), site.getusersitepackages()]
    torch_dir = _torch_dir()
    if torch_dir:
        raw.append(os.path.dirname(os.path.dirname(torch_dir)))
    return [p + os.sep for p in sorted({os.path.abspath(p) for p in raw if isinstance(p, str)}, reverse=True)]


def short_path(path: str, prefixes: Optional[list] = None) -> str:
    """`/home/me/proj/train.py` -> `train.py` when the script's folder is on sys.path (as the profiler writes it)."""
    path = os.path.abspath(path)
    for prefix in prefixes if prefixes is not None else _prefixes():
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


def user_frame(frame: Any) -> Optional[Any]:
    """The nearest frame at or above `frame` in the user's own code (None when there is none)."""
    for _ in range(MAX_DEPTH):
        if frame is None:
            return None
        if not is_library_file(frame.f_code.co_filename):
            return frame
        frame = frame.f_back
    return None


def where(frame: Any) -> Optional[dict]:
    """{file, line, function} of the nearest user frame, the file as the profiler writes it."""
    user = user_frame(frame)
    if user is None:
        return None
    return {"file": short_path(user.f_code.co_filename), "line": int(user.f_lineno), "function": user.f_code.co_name}


def remember_optimizer(seen: list, opt: Any, frame: Any) -> Optional[dict]:
    """Add the construction site of `opt` (called from inside `Optimizer.__init__`, `frame` its caller) to
    `seen`, one entry per class and site, counting repeats; returns the entry."""
    while frame is not None and frame.f_locals.get("self") is opt:  # a subclass's __init__ (the user's own too)
        frame = frame.f_back
    site_ = where(frame)
    if site_ is None:
        return None
    defaults = getattr(opt, "defaults", None) or {}
    entry = {"class": type(opt).__name__, **site_, "foreach": _setting(defaults.get("foreach")),
             "fused": _setting(defaults.get("fused")), "count": 1, "zero_grad": []}
    for old in seen:
        if all(old[k] == entry[k] for k in ("class", "file", "line", "foreach", "fused")):
            old["count"] += 1
            return old
    if len(seen) >= MAX_OPTIMIZERS:
        return None
    seen.append(entry)
    return entry


def _setting(value: Any) -> Optional[bool]:
    return None if value is None else bool(value)


def remember_call(entry: dict, frame: Any) -> None:
    """A `zero_grad` call from `frame` (the caller of Optimizer.zero_grad): kept when it is the user's own code."""
    if frame is None or is_library_file(frame.f_code.co_filename) or len(entry["zero_grad"]) >= MAX_CALL_SITES:
        return
    call = {"file": short_path(frame.f_code.co_filename), "line": int(frame.f_lineno), "function": frame.f_code.co_name}
    if call not in entry["zero_grad"]:
        entry["zero_grad"].append(call)


def script_dir() -> str:
    """The script's folder: first on sys.path when it starts (`python train.py`, `perfsleuth run`), the working
    directory for `-m` and interactive sessions."""
    return os.path.abspath((sys.path[0] if sys.path else "") or os.getcwd())


def code_facts(user_dir: Optional[str] = None) -> dict:
    """`code` of the run metadata: the script's folder (`script_dir()` by default) and the top-level modules
    loaded from library folders, but not from that folder."""
    user = os.path.abspath(user_dir) if user_dir is not None else script_dir()
    roots = set()
    for name, mod in list(sys.modules.items()):
        if "." in name or name in sys.stdlib_module_names:
            continue
        f = getattr(mod, "__file__", None)
        if not isinstance(f, str):
            continue
        f = os.path.abspath(f)
        if not f.startswith(user + os.sep) and LIBRARY_DIRS.intersection(f.split(os.sep)):
            roots.add(name)
    return {"user_dir": user, "library_roots": sorted(roots)[:MAX_ROOTS]}


def stopped_at(tb: Any) -> Optional[str]:
    """`train.py:57 in closure`: the innermost frame of the user's own code in a traceback (where the script
    was when perfsleuth stopped it)."""
    last = None
    while tb is not None:
        if not is_library_file(tb.tb_frame.f_code.co_filename):
            last = tb
        tb = tb.tb_next
    if last is None:
        return None
    return f"{short_path(last.tb_frame.f_code.co_filename)}:{last.tb_lineno} in {last.tb_frame.f_code.co_name}"
