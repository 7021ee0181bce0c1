"""What a long command is doing, on the terminal: a line per trace of a folder as it finishes and a bar
for the whole folder (`analyze DIR`), and the phase a `run` is in (waiting, profiling, writing,
analysing). All of it on stderr, and only when stdout and stderr are both a terminal: a redirected
or piped run (CI logs, `> report.txt`) gets none of it, and the report itself is never interleaved --
except a folder that takes long: there a log gets a count on stderr after `LOG_AFTER_S` and then every
`LOG_EVERY_S` (5,000 small traces took six minutes without a word: issue 28)."""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional, TextIO

BAR_WIDTH = 30
LOG_AFTER_S, LOG_EVERY_S = 10.0, 30.0  # a folder's count in a log that is no terminal: first after, then every
_CLEAR = "\r\033[K"  # back to the line's start, erase it: the bar is redrawn below each new line


def on_terminal(stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> bool:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    try:
        return bool(out.isatty() and err.isatty())
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _shown(text: str) -> str:
    from ..report.escape import terminal  # names come from the file system: escaped like every name

    return terminal(text)


class FolderProgress:
    """`on_file` for api.analyze_path: one line per finished trace (`[ 3/16] 2.4 s  rank3.json: sync-bound`)
    with the folder's bar under the lines, redrawn after each. `enabled` defaults to `on_terminal()`."""

    def __init__(self, stream: Optional[TextIO] = None, enabled: Optional[bool] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.stream = stream or sys.stderr
        self.enabled = on_terminal() if enabled is None else enabled
        self.clock, self.start, self.bar_shown = clock, clock(), False
        self._next_log = self.start + LOG_AFTER_S

    def __call__(self, path: str, report, problem: Optional[str], done: int, total: int) -> None:
        if not self.enabled:
            self._log(done, total)
            return
        from ..trace.sources import display_name

        name = display_name(path)
        what = f"skipped: {problem}" if report is None else self._summary(report)
        width = len(str(total))
        line = f"[{done:>{width}}/{total}] {self.clock() - self.start:.1f} s  {_shown(name)}: {_shown(what)}"
        bar = "" if done >= total else self.bar(done, total)
        self.stream.write(f"{_CLEAR}{line}\n{bar}")
        self.stream.flush()
        self.bar_shown = bool(bar)

    def _log(self, done: int, total: int) -> None:
        """Not on a terminal: a count now and then, only for a folder that takes long."""
        now = self.clock()
        if done < total and now >= self._next_log:
            self.stream.write(f"perfsleuth: analysing the folder: {done:,} of {total:,} traces in "
                              f"{now - self.start:.0f} s\n")
            self.stream.flush()
            self._next_log = now + LOG_EVERY_S

    @staticmethod
    def _summary(report) -> str:
        n = len(report.findings)
        return f"{report.verdict}, {n} finding{'s' if n != 1 else ''}"

    @staticmethod
    def bar(done: int, total: int) -> str:
        filled = BAR_WIDTH * done // max(total, 1)
        return f"analysing the folder [{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {done}/{total} traces"

    def close(self) -> None:
        """Erase the bar (an interrupted or failed folder leaves no half-drawn line)."""
        if self.enabled and self.bar_shown:
            self.stream.write(_CLEAR)
            self.stream.flush()
            self.bar_shown = False


class PhaseLine:
    """`run`'s phases: one line on stderr each time the phase changes (`perfsleuth: profiling: ...`).
    A line, not a redrawn status: the script writes its own output to the same terminal."""

    def __init__(self, stream: Optional[TextIO] = None, enabled: Optional[bool] = None):
        self.stream = stream or sys.stderr
        self.enabled = on_terminal() if enabled is None else enabled
        self.current: Optional[str] = None

    def __call__(self, phase: str, detail: str = "") -> None:
        if not self.enabled or phase + detail == self.current:
            return
        self.current = phase + detail
        self.stream.write(f"perfsleuth: {phase}" + (f": {_shown(detail)}" if detail else "") + "\n")
        self.stream.flush()
