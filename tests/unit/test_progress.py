"""The CLI's progress bar: on stderr, only when stderr is a terminal and the load is already long."""

import io

import pytest
from perfsleuth.cli import main as cli


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


# ---------------------------------------------------------------- a folder: a line per trace, a bar
from pathlib import Path  # noqa: E402

from perfsleuth import api  # noqa: E402
from perfsleuth.cli.progress import FolderProgress, PhaseLine, on_terminal  # noqa: E402

GPU = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "gpu"


class _Report:
    def __init__(self, verdict: str, findings: int):
        self.verdict, self.findings = verdict, [{}] * findings


def test_folder_lines_and_bar_on_a_terminal():
    out = _Terminal()
    now = [10.0]
    progress = FolderProgress(stream=out, enabled=True, clock=lambda: now[0])
    now[0] = 12.5
    progress("/runs/rank1.pt.trace.json.gz", _Report("sync-bound", 2), None, 1, 3)
    progress("/runs/bad.json", None, "not a PyTorch profiler trace", 2, 3)
    assert out.getvalue() == ("\r\033[K[1/3] 2.5 s  rank1.pt.trace.json.gz: sync-bound, 2 findings\n"
                              "analysing the folder [##########--------------------] 1/3 traces"
                              "\r\033[K[2/3] 2.5 s  bad.json: skipped: not a PyTorch profiler trace\n"
                              "analysing the folder [####################----------] 2/3 traces")
    progress("/runs/rank\x1b[31m0.json", _Report("host-bound", 1), None, 3, 3)  # the last: no bar left behind
    assert out.getvalue().endswith("\r\033[K[3/3] 2.5 s  rank\\x1b[31m0.json: host-bound, 1 finding\n")
    progress.close()
    assert out.getvalue().endswith("1 finding\n")  # nothing to erase


def test_an_interrupted_folder_erases_its_bar():
    out = _Terminal()
    progress = FolderProgress(stream=out, enabled=True)
    progress("a.json", _Report("host-bound", 0), None, 1, 4)
    progress.close()
    assert out.getvalue().endswith("1/4 traces\r\033[K")


def test_nothing_when_stdout_or_stderr_is_not_a_terminal():
    assert on_terminal(_Terminal(), _Terminal()) is True
    assert on_terminal(io.StringIO(), _Terminal()) is False  # perfsleuth analyze DIR > index.txt
    assert on_terminal(_Terminal(), io.StringIO()) is False
    out = io.StringIO()
    progress = FolderProgress(stream=out, enabled=False)
    progress("a.json", _Report("host-bound", 0), None, 1, 2)
    phase = PhaseLine(stream=out, enabled=False)
    phase("profiling", "2 warm-up + 5 recorded steps")
    assert out.getvalue() == ""


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_each_trace_of_a_folder_is_told_as_it_finishes():
    seen = []
    result = api.analyze_path(GPU, jobs=1, on_file=lambda *a: seen.append(a))
    files = sorted(GPU.glob("*.json.gz"))
    assert [(Path(p).name, done, total) for p, _, _, done, total in seen] == \
        [(f.name, i, len(files)) for i, f in enumerate(files, 1)]
    verdicts = {Path(r.trace.path).name: r.verdict for r in result.reports}
    assert {Path(p).name: report.verdict for p, report, *_ in seen} == verdicts


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_a_pool_tells_every_trace_once():
    seen = []
    api.analyze_path(GPU, jobs=2, on_file=lambda *a: seen.append(a))
    assert sorted(Path(p).name for p, *_ in seen) == sorted(f.name for f in GPU.glob("*.json.gz"))
    assert [done for *_, done, _ in seen] == list(range(1, len(seen) + 1))


def test_phase_lines_are_said_once_per_change():
    out = io.StringIO()
    phase = PhaseLine(stream=out, enabled=True)
    for p, d in [("waiting", "5 steps"), ("profiling", "2 + 5"), ("profiling", "2 + 5"), ("writing", "trace.json.gz"),
                 ("analysing", "trace\x07.json.gz")]:
        phase(p, d)
    assert out.getvalue() == ("perfsleuth: waiting: 5 steps\nperfsleuth: profiling: 2 + 5\n"
                              "perfsleuth: writing: trace.json.gz\nperfsleuth: analysing: trace\\x07.json.gz\n")


def test_a_long_folder_in_a_log_gets_a_count_now_and_then():
    """issue 28: 5,000 small traces took six minutes without a word in a log. Not on a terminal, a folder that
    takes long gets a count on stderr after LOG_AFTER_S, then every LOG_EVERY_S; never for the last trace."""
    from perfsleuth.cli.progress import LOG_AFTER_S, LOG_EVERY_S

    now = [0.0]
    out = io.StringIO()
    progress = FolderProgress(stream=out, enabled=False, clock=lambda: now[0])
    for i, t in enumerate([1.0, LOG_AFTER_S - 0.5, LOG_AFTER_S, LOG_AFTER_S + 1, LOG_AFTER_S + LOG_EVERY_S, 1e4], 1):
        now[0] = t
        progress(f"r{i}.json", _Report("host-bound", 0), None, i, 6)
    assert out.getvalue().splitlines() == [
        f"perfsleuth: analysing the folder: 3 of 6 traces in {LOG_AFTER_S:.0f} s",
        f"perfsleuth: analysing the folder: 5 of 6 traces in {LOG_AFTER_S + LOG_EVERY_S:.0f} s"]


def test_run_says_what_it_does_before_importing_torch(monkeypatch, tmp_path):
    """issue 37: `run` printed nothing of its own for 10-20 s (torch's import, the script's
    start). On a terminal its first line comes at once, before torch is imported: here the import
    is made to fail, and the line is already there, ahead of the error."""
    from click.testing import CliRunner
    from perfsleuth.cli.main import main
    from perfsleuth.errors import UsageError
    from perfsleuth.record import target

    def no_torch():
        raise UsageError("torch was imported here")

    monkeypatch.setattr(target, "require_torch", no_torch)
    monkeypatch.setattr("perfsleuth.cli.progress.on_terminal", lambda *streams: True)
    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")
    result = CliRunner().invoke(main, ["run", "-o", str(tmp_path / "out"), str(script),
                                       "--lr", "0.1"])
    assert result.exit_code == 2
    assert result.stderr == ("perfsleuth: starting: train.py; importing PyTorch\n"
                             "perfsleuth: error: torch was imported here\n")
    assert result.stdout == ""
