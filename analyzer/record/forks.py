"""Forks and threads: only the process and the thread that started profiling are profiled and stopped.

A script may fork (`os.fork`, multiprocessing's fork start method, DataLoader workers) and may train in
threads. perfsleuth's hooks are global (the optimizer hooks, `DataLoader.__next__`, module calls), so
they run in every thread and, after a fork, in the child too. `Owner` is the process and thread a
session (or a set of hooks) belongs to: anywhere else the hooks do nothing -- no step is counted, no
profiler is stepped or stopped, `_WindowComplete` is never raised (docs/run.md, "Forks and threads").

At a fork (`os.register_at_fork`, once per process, from the first profiler perfsleuth starts):

- **before**, libkineto's config thread is stopped, and **after, in the parent**, started again. That
  thread starts with the first profiler and lives to the end of the process; a child inherits its handle
  and its condition variable with the thread waiting on it, and at the child's exit ConfigLoader's
  destructor joins a thread that is not there (hanging on whichever thread reused its stack) or waits for
  that waiter for ever. torch.profiler alone does this to any child that exits normally (torch 2.13;
  tests/test_run_forks.py). The two calls are libkineto's own exported methods; where they are not found
  nothing is done.
- **in the child**, when one of perfsleuth's profilers was recording, op recording is switched off for
  the child's thread (`torch.autograd._enable_record_function(False)`): its ops are not profiled and do
  not pile up in its copy of the parent's buffers. Nothing else of the profiler is touched there: stopping
  it would process every event the parent recorded (seconds in each DataLoader worker). A child the
  script forked itself stops its copy when the script ends in it (`leave_child`), CPU-only profilers only.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import signal
import sys
import threading
import weakref
from typing import Callable, Iterator, Optional

_RECORDING: "weakref.WeakSet" = weakref.WeakSet()  # sessions whose profiler records now (`.recording`)
_state = {"registered": False, "profiled": False, "stopped": False, "kineto": None, "inherited": None}


class Owner:
    """The process and thread that made this object."""

    def __init__(self):
        self.pid, self.thread = os.getpid(), threading.get_ident()

    def here(self) -> bool:
        """Called from the owning process, in the owning thread."""
        return os.getpid() == self.pid and threading.get_ident() == self.thread

    def in_process(self) -> bool:
        """Called from the owning process (any thread); False in a forked child."""
        return os.getpid() == self.pid


def profiling(session) -> None:
    """`session` starts a profiler in this process: from now on forks are handled (see the module docstring)."""
    _state["profiled"] = True
    _RECORDING.add(session)
    if not _state["registered"]:
        _state["registered"] = True
        os.register_at_fork(before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child)


def _kineto() -> Optional[tuple]:
    """(ConfigLoader instance, stopThread, startThread) from libtorch_cpu, or None where not found."""
    if _state["kineto"] is None:
        _state["kineto"] = False
        torch = sys.modules.get("torch")
        try:
            lib = ctypes.CDLL(sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib",
                                                            "libtorch_cpu.*")))[0])
            instance = lib._ZN9libkineto12ConfigLoader8instanceEv
            stop, start = lib._ZN9libkineto12ConfigLoader10stopThreadEv, lib._ZN9libkineto12ConfigLoader11startThreadEv
        except (AttributeError, IndexError, OSError, TypeError):
            return None
        instance.restype, instance.argtypes = ctypes.c_void_p, []
        for fn in (stop, start):
            fn.restype, fn.argtypes = None, [ctypes.c_void_p]
        _state["kineto"] = (instance, stop, start)
    return _state["kineto"] or None


def _before() -> None:
    kineto = _kineto() if _state["profiled"] else None
    if kineto is not None:
        instance, stop, _ = kineto
        stop(instance())
        _state["stopped"] = True


def _after_in_parent() -> None:
    if _state["stopped"]:
        _state["stopped"] = False
        instance, _, start = _state["kineto"]
        start(instance())


def _after_in_child() -> None:
    _state["stopped"] = False  # the child starts no config thread of its own (a profiler it starts will)
    recording = [s for s in list(_RECORDING) if getattr(s, "recording", False)]
    cuda = any(getattr(s, "cuda", False) for s in recording)
    _state["inherited"] = ("cuda" if cuda else "cpu") if recording else None
    if recording:
        torch = sys.modules.get("torch")
        try:
            torch._C._autograd._enable_record_function(False)
        except Exception:  # an older torch: the child keeps recording into its copy, as before
            pass
    _RECORDING.clear()


def _drop_inherited_profiler() -> None:
    """A child that inherited a CPU-only recording ends it before it exits: otherwise torch's teardown says
    'Requested callback is not found' on the way out. This processes what the parent had recorded when it
    forked (the start-up, or a window): only here, in a child the script itself forked, never in a DataLoader
    worker (they leave by os._exit). A CUDA profiler is left alone: CUPTI is not the child's."""
    if _state.get("inherited") != "cpu":
        return
    _state["inherited"] = None
    try:
        import torch

        if torch.autograd._profiler_enabled():
            torch.autograd._disable_profiler()
    except Exception:
        pass


def say(line: str) -> None:
    """A line on stderr now (escaped like every line perfsleuth prints): the process may end right after it."""
    from ..report.escape import terminal

    print(terminal(line), file=sys.stderr, flush=True)


def os_exit_notice(session, code, here: bool) -> None:
    """The script calls os._exit(code) (`watching_os_exit`): the process ends right after this, with no report;
    what `session` recorded is written (from the owning thread only: the profiler is not another thread's to
    stop) and a line says where it is and how to analyse it."""
    from . import code_sites
    from .outcome import os_exit_line
    from .outputs import raw_path

    site = code_sites.where(sys._getframe(3))  # (this, the session's lambda, the os._exit wrapper, the caller)
    if here and not session._finished:
        session.finish(whole_run=True)
    kept = next((p for p in (session.trace_path, raw_path(session.trace_path)) if p.is_file()), None)
    say(os_exit_line(code, site, session.steps, session.profiled_steps, kept))


def execute(script: Callable[[], None], owner: Owner, format_traceback) -> None:
    """Run the script; in a child it forked, the end of the script is the end of that child (`leave_child`)."""
    try:
        script()
    except BaseException as exc:
        leave_child(owner, exc, format_traceback)
        raise
    leave_child(owner, None, format_traceback)


class ChildExit(SystemExit):
    """A forked child of the script leaves perfsleuth's runner with the script's exit code."""


def leave_child(owner: Owner, exc: Optional[BaseException], format_traceback) -> None:
    """In a child the script forked, once the script's code has ended in it (it returned, or `exc` was
    raised): end the child as `python script.py`'s child would end, without any of perfsleuth's reporting
    (SystemExit with the script's code, or its traceback and 1, or death by the signal). Nothing in the
    owning process."""
    if owner.in_process():
        return
    from .signals import Interrupted

    _drop_inherited_profiler()

    if exc is None or isinstance(exc, SystemExit):
        raise ChildExit(0 if exc is None else exc.code)
    if isinstance(exc, Interrupted):  # SIGTERM / SIGHUP: the child dies of it, as without perfsleuth
        signal.signal(exc.signum, signal.SIG_DFL)
        os.kill(os.getpid(), exc.signum)
    sys.stderr.write(format_traceback(exc))
    sys.stderr.flush()
    raise ChildExit(130 if isinstance(exc, KeyboardInterrupt) else 1)


def stop_children(grace_s: float = 2.0) -> int:
    """End the processes the script started with multiprocessing that are still alive, when perfsleuth stopped
    it (or a signal did): the script's own code that would have joined or fed them does not run any more, and
    a spawn child still starting would read its queue's semaphore after the parent dropped it (a SemLock
    traceback), or a non-daemon child would hold the exit. SIGTERM, then SIGKILL after `grace_s`. The number
    ended."""
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return 0
    try:
        children = mp.active_children()
    except Exception:
        return 0
    for child in children:
        try:
            child.terminate()
        except Exception:
            pass
    for child in children:
        try:
            child.join(grace_s)
            if child.is_alive():
                child.kill()
                child.join(1.0)
        except Exception:
            pass
    return len(children)


@contextlib.contextmanager
def watching_os_exit(owner: Owner, on_exit: Callable[[int, bool], None]) -> Iterator[None]:
    """While the script runs, `os._exit(code)` in the owning process first calls `on_exit(code, in the owning
    thread?)` (the process then ends at once, as asked: no `finally`, no report); in a forked child
    (multiprocessing's, DataLoader workers) it is the plain os._exit."""
    real = os._exit

    def _exit(code):
        if owner.in_process():
            try:
                on_exit(code, owner.here())
            except BaseException:  # noqa: BLE001  the script asked to end now: nothing may stop that
                pass
        real(code)

    os._exit = _exit
    try:
        yield
    finally:
        os._exit = real
