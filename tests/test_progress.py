"""The CLI's progress bar: on stderr, only when stderr is a terminal and the load is already long."""

import io

from perfsleuth.commands import cli


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _drive(monkeypatch, stderr, seconds_per_step: float, total: int = 200 << 20, steps: int = 4) -> str:
    """Report `steps` equal steps of progress, each `seconds_per_step` after the last."""
    monkeypatch.setattr(cli.sys, "stderr", stderr)
    now = [0.0]
    bar = cli.ProgressBar("reading big.json", delay=1.0, clock=lambda: now[0])
    for k in range(1, steps + 1):
        now[0] += seconds_per_step
        bar(total * k // steps, total)
    return stderr.getvalue()


def test_bar_on_a_terminal_once_the_load_is_long(monkeypatch):
    out = _drive(monkeypatch, _Terminal(), 0.6)  # past the delay at the second step
    assert "reading big.json" in out and "100%" in out


def test_no_bar_for_short_loads_or_without_a_terminal(monkeypatch):
    assert _drive(monkeypatch, _Terminal(), 0.2) == ""  # done in 0.8 s
    assert _drive(monkeypatch, io.StringIO(), 0.6) == ""  # stderr redirected to a file
