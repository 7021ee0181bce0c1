"""The CLI's progress bar: on stderr, only when stderr is a terminal and the load is long."""

import io

from perfsleuth import cli


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _drive(monkeypatch, stderr, total, steps=4):
    monkeypatch.setattr(cli.sys, "stderr", stderr)
    bar = cli.ProgressBar("reading big.json")
    for k in range(1, steps + 1):
        bar(total * k // steps, total)
    return stderr.getvalue()


def test_bar_on_a_terminal_for_a_long_load(monkeypatch):
    out = _drive(monkeypatch, _Terminal(), 200 << 20)  # bytes of a document cut into ranges
    assert "reading big.json" in out and "100%" in out


def test_no_bar_for_short_loads_or_without_a_terminal(monkeypatch):
    assert _drive(monkeypatch, _Terminal(), 400_000) == ""  # events: below 500k
    assert _drive(monkeypatch, io.StringIO(), 200 << 20) == ""  # stderr redirected to a file
