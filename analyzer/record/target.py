"""What `perfsleuth run` runs: the script or module, its `sys.argv` and `sys.path`, and its traceback
with perfsleuth's frames removed; whether torch can be imported (`require_torch`, the only place that tries)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import runpy
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from ..errors import UsageError
from .step_hooks import OWN_FRAME

_HERE = os.path.dirname(os.path.abspath(__file__))
# the files whose frames sit between the user's code and the interpreter: runpy, the runner, the hooks
_OURS = tuple(os.path.join(_HERE, name)
              for name in ("target.py", "session.py", "runner.py", "step_hooks.py", "forks.py")) + (
    os.path.abspath(runpy.__file__),)


@dataclass
class Target:
    """What to run: a script path or a module name, and the arguments it gets."""

    name: str
    args: tuple = ()
    module: bool = False
    path: Optional[Path] = None  # the script, or the module's file

    @property
    def program(self) -> str:
        """What ran, as the trace records it: the module's name, or the script's file name (no
        folder: a path of this machine is no part of a report)."""
        return self.name if self.module else Path(self.name).name

    @property
    def stem(self) -> str:
        return self.name.rsplit(".", 1)[-1] if self.module else Path(self.name).stem


def resolve_target(name: str, args: Sequence[str], module: bool) -> Target:
    """A missing script or module is a UsageError (one line, exit 2), found before torch is imported."""
    if module:
        with _sys_path_first(os.getcwd()):
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
        if spec is None:
            raise UsageError(f"no module named {name!r}")
        return Target(name, tuple(args), True, Path(spec.origin) if spec.origin else None)
    path = Path(name)
    if not path.exists():
        raise UsageError(f"{name}: no such script")
    if path.is_dir() and not (path / "__main__.py").is_file():
        raise UsageError(f"{name}: is a directory without __main__.py")
    return Target(name, tuple(args), False, path)


def execute(target: Target) -> None:
    if target.module:
        runpy.run_module(target.name, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(str(target.path), run_name="__main__")


@contextlib.contextmanager
def script_environment(target: Target):
    """sys.argv as the script expects it; its folder (the working directory for -m) first on sys.path;
    sys.argv, sys.path and the working directory restored afterwards."""
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    sys.argv = [str(target.path) if target.path else target.name, *target.args]
    first = saved_cwd if target.module else os.path.dirname(os.path.abspath(target.path))
    try:
        with _sys_path_first(first):
            yield
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)  # a script that changed directory: the reports still go where asked


@contextlib.contextmanager
def _sys_path_first(folder: str):
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
    return name in _OURS or filename in ("<frozen runpy>", OWN_FRAME)


TORCH_INSTALL = ("pip install torch (on Linux that is the CUDA build; the CPU-only one: pip install torch "
                 "--index-url https://download.pytorch.org/whl/cpu)")


def require_torch() -> None:
    """`perfsleuth run` without PyTorch: one line naming what to install (exit 2), not a traceback."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        missing = getattr(exc, "name", None) == "torch" or "No module named 'torch'" in str(exc)
        why = "needs PyTorch, which is not installed" if missing else f"cannot import PyTorch ({exc})"
        raise UsageError(f"perfsleuth run {why}: {TORCH_INSTALL}") from None
