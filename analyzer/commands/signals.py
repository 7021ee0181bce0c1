"""SIGTERM and SIGHUP end perfsleuth the way Ctrl-C does (docs/robustness.md).

`timeout`, CI cancellation, Kubernetes and Slurm send SIGTERM; a closed terminal sends SIGHUP. By
default either kills Python on the spot: no `finally` runs, so a half-written staging folder stays
and `perfsleuth run` loses the trace it was recording. Inside `as_interrupts()` they raise
`Interrupted` (a KeyboardInterrupt), which unwinds like Ctrl-C; the exit code is 128 + the signal
number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP), as a shell reports a killed process.
"""

from __future__ import annotations

import contextlib
import signal
import threading
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
