"""The CLI in-process, and the promise for bad input (docs/robustness.md): exit code 2 and exactly one
stderr line `perfsleuth: error: ...` holding the given texts, never a traceback."""

from pathlib import Path

from click.testing import CliRunner
from perfsleuth.cli.main import main
from tracebuilder import TraceBuilder


def small_trace(folder: Path, name: str = "t.json") -> Path:
    """One ProfilerStep with one kernel: the smallest trace that gets a report."""
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k", host=(1, 2), device=(10, 50))
    return tb.write(Path(folder) / name)


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line(result, *texts):
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output, result.output
    assert result.stderr.startswith("perfsleuth: error: "), result.stderr
    for text in texts:
        assert str(text) in result.stderr, result.stderr
