"""SIGTERM and SIGHUP end perfsleuth the way Ctrl-C does (docs/robustness.md).

`timeout`, CI cancellation, Kubernetes and Slurm send SIGTERM; a closed terminal sends SIGHUP. By
default either kills Python on the spot: no `finally` runs, so a half-written staging folder stays
and `perfsleuth run` loses the trace it was recording. Inside `as_interrupts()` they raise
`Interrupted` (a KeyboardInterrupt), which unwinds like Ctrl-C; the exit code is 128 + the signal
number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP), as a shell reports a killed process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Iterator

CAUGHT = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None)


class Interrupted(KeyboardInterrupt):
    """A SIGTERM or SIGHUP, delivered as an exception so that cleanup runs."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def signal_of(exc: BaseException) -> int:
    return getattr(exc, "signum", signal.SIGINT)


def signal_name(exc: BaseException) -> str:
    try:
        return signal.Signals(signal_of(exc)).name
    except ValueError:
        return f"signal {signal_of(exc)}"


def exit_code(exc: BaseException) -> int:
    return 128 + int(signal_of(exc))


PAUSE_ENV = "PERFSLEUTH_TEST_PAUSE"  # tests only: "POINT:FILE", waits at POINT (pause_at)


def pause_at(point: str, limit_s: float = 120.0) -> None:
    """For tests that send a signal at an exact moment (tests/e2e/test_verify_ends.py): with
    PERFSLEUTH_TEST_PAUSE=POINT:FILE, reaching `point` writes FILE (this pid) and waits while it
    exists (at most `limit_s`); the test signals, then removes FILE. Unset (outside tests):
    nothing."""
    spec = os.environ.get(PAUSE_ENV)
    if not spec or spec.partition(":")[0] != point:
        return
    path = spec.partition(":")[2]
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    deadline = time.monotonic() + limit_s
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def _raise(signum, frame) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def as_interrupts() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Interrupted in this block (main thread only; elsewhere a no-op).
    A handler someone else installed (not the default) is left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {}
    for sig in CAUGHT:
        current = signal.getsignal(sig)
        if current in (signal.SIG_DFL, None):
            saved[sig] = signal.signal(sig, _raise)
    try:
        yield
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)


class Finishing:
    """Signals while `perfsleuth run` finishes what it has: the trace, its analysis, the report files. A
    SIGINT, SIGTERM or SIGHUP there no longer throws the recorded steps away (issue 28): the first one is
    noted (`pending`) and said at once by `on_first(name)` -- a line that names the kept trace and the command
    that analyses it, so that it is known even if a SIGKILL follows --, and the work goes on; the caller exits
    with 128 + its number once the report is written. A second one, in a block that `allows_stop`, stops at
    once (`on_second(name)` first, then Interrupted). Main thread only; elsewhere nothing changes.

    Inside `interruptible()` (run --verify's experiments, within a `holding` block) the first signal
    is also raised as Interrupted, once: the work under way stops, what it measured is kept, and
    everything after it -- closing its processes, the summary, the report -- is held (issue 38)."""

    def __init__(self, on_first, on_second=lambda name: None):
        self.on_first, self.on_second = on_first, on_second
        self.pending = None  # the first signal's number
        self.trace = None  # the trace being finished (run.py sets it), for the lines that say where it is
        self.raising = False  # inside interruptible(): the first signal is raised too
        self.stopped = False  # a second signal stops now: nothing may catch it on the way out

    @contextlib.contextmanager
    def holding(self, allows_stop: bool = True) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame):
            name = signal.Signals(signum).name
            if self.pending is None:
                self.pending = signum
                self.on_first(name)
                if self.raising:
                    self.raising = False
                    raise Interrupted(signum)
            elif allows_stop:
                self.stopped = True
                self.on_second(name)
                raise Interrupted(signum)

        sigs = (signal.SIGINT, *CAUGHT)
        saved = {sig: signal.signal(sig, handler) for sig in sigs}
        try:
            yield
        finally:
            for sig, previous in saved.items():
                signal.signal(sig, previous if previous is not None else signal.SIG_DFL)

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """Within `holding`: a first signal here is raised as Interrupted too (once)."""
        self.raising = self.pending is None
        try:
            yield
        finally:
            self.raising = False

    @property
    def exit_code(self):
        """128 + the pending signal, or None."""
        return None if self.pending is None else 128 + int(self.pending)
