"""The script's surroundings under `perfsleuth run`: sys.argv and sys.path as `python script.py` sets
them, restored afterwards, and the script's traceback without perfsleuth's frames."""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .run import Target

# Frames of these files are perfsleuth's, not the user's: run.py runs the script (runpy under it).
_RUN_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run.py")
_RUNPY = os.path.abspath(runpy.__file__)
OWN_FRAME = "<perfsleuth>"  # the file name of the code perfsleuth puts inside the script's stack


@contextlib.contextmanager
def script_environment(target: Target):
    """sys.argv as the script expects it; its folder (the working directory for -m) first on sys.path;
    sys.argv, sys.path and the working directory restored afterwards."""
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    sys.argv = [str(target.path) if target.path else target.name, *target.args]
    first = saved_cwd if target.module else os.path.dirname(os.path.abspath(target.path))
    try:
        with sys_path_first(first):
            yield
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)  # a script that changed directory: the reports still go where asked


@contextlib.contextmanager
def sys_path_first(folder: str):
    saved = list(sys.path)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.path[:] = saved


def format_user_traceback(exc: BaseException) -> str:
    """The script's traceback as Python would print it, without perfsleuth's and runpy's frames."""
    te = traceback.TracebackException.from_exception(exc)
    seen: set = set()
    todo = [te]
    while todo:
        t = todo.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        t.stack = traceback.StackSummary.from_list([f for f in t.stack if not _ours(f.filename)])
        todo += [x for x in (t.__cause__, t.__context__) if x is not None]
    return "".join(te.format())


def _ours(filename: str) -> bool:
    name = os.path.abspath(filename) if not filename.startswith("<") else filename
    return name in (_RUN_PY, _RUNPY) or filename in ("<frozen runpy>", OWN_FRAME)

