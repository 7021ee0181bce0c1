"""issue 18: nothing a file name, a trace or a rule file holds reaches the terminal raw (OSC titles, CSI
colours, bidi overrides), and bidi controls are shown visibly in every output; -j is capped."""

import json
import os

import pytest
from cli_promise import cli
from tracebuilder import TraceBuilder

OSC = "\x1b]0;pwned\x07"
CSI = "\x1b[31m"
RLO = "\u202e"


def raw_controls(text: str) -> list:
    return [ch for ch in text if (ord(ch) < 32 and ch not in "\n\t") or 0x7f <= ord(ch) <= 0x9f or ch == RLO]


def test_a_hostile_file_name_in_an_error_is_escaped(tmp_path):
    path = tmp_path / f"evil{OSC}{CSI}{RLO}txt.json"
    path.write_text("")
    result = cli("analyze", path)
    assert result.exit_code == 2
    assert raw_controls(result.stderr) == []
    assert "evil\\x1b]0;pwned\\x07\\x1b[31m<U+202E>txt.json: empty file" in result.stderr


def test_a_hostile_file_name_in_a_report_and_in_warnings_is_escaped(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.launch(f"kernel{CSI}{RLO}gpj.exe", host=(1, 2), device=(10, 50))
    tb.write(d / f"good{OSC}.json")
    (d / f"bad{CSI}.json").write_text("{}")
    result = cli("analyze", d, "-j", "1")
    assert result.exit_code == 0, result.output
    assert raw_controls(result.stdout) == [] and raw_controls(result.stderr) == []
    assert "good\\x1b]0;pwned\\x07.json" in result.stdout
    assert "warning: skipped " in result.stderr and "bad\\x1b[31m.json" in result.stderr


def test_rule_titles_from_a_user_file_are_escaped_in_the_listing_and_logs(tmp_path):
    from rule_files import HOSTILE_SKELETON as RULE

    text = RULE.format(condition="step_us > 0", saving="1", message="m").replace(
        'title = "Evil"', 'title = "Evil\\u001b[31m\\u202etitle \\u001b]0;x\\u0007"')  # TOML escapes
    path = tmp_path / "evil.toml"
    path.write_text(text)
    result = cli("rules", "--rules", path)
    assert result.exit_code == 0, result.output
    assert raw_controls(result.stdout) == []
    assert "Evil\\x1b[31m<U+202E>title \\x1b]0;x\\x07" in result.stdout
    one = cli("rules", "evil", "--rules", path)
    assert one.exit_code == 0 and raw_controls(one.stdout) == [] and "<U+202E>" in one.stdout


def test_bidi_controls_are_visible_in_every_output(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    name = f"evil{RLO}txt.exe"
    tb.launch(name, host=(1, 2), device=(10, 50))
    trace = tb.write(tmp_path / "t.json")
    out = tmp_path / "o"
    result = cli("analyze", trace, "-o", out)
    assert result.exit_code == 0, result.output
    for f, shown in (("report.html", "evil&lt;U+202E&gt;txt.exe"), ("summary.md", "evil<U+202E>txt.exe")):
        text = (out / f).read_text(encoding="utf-8")
        assert RLO not in text, f
        assert shown in text, f
    assert RLO not in result.stdout  # (the terminal summary names no kernel; file names: tests above)
    raw = (out / "report.json").read_text(encoding="utf-8")
    assert RLO not in raw and "evil\\u202etxt.exe" in raw
    assert json.loads(raw)["top_kernels"][0]["name"] == name  # the data itself is unchanged


def test_jobs_beyond_the_cpus_are_capped_and_said(tmp_path, monkeypatch):
    from concurrent.futures import ProcessPoolExecutor

    from perfsleuth import api
    from perfsleuth.trace import cluster

    seen = []

    class Spy(ProcessPoolExecutor):
        def __init__(self, max_workers=None, **kw):
            seen.append(max_workers)
            super().__init__(max_workers, **kw)

    monkeypatch.setattr(cluster, "ProcessPoolExecutor", Spy)  # the pool of a folder's files
    monkeypatch.setattr(api, "usable_cpus", lambda: 2)
    d = tmp_path / "logs"
    d.mkdir()
    for i in range(4):
        tb = TraceBuilder()
        tb.step(1, 0, 100)
        tb.launch("k", host=(1, 2), device=(10, 50))
        tb.write(d / f"rank{i}.json")
    result = cli("analyze", d, "-j", "256")
    assert result.exit_code == 0, result.output
    assert "perfsleuth: -j 256 is more than the 2 usable CPU(s): using 2" in result.stderr
    assert seen == [2]
    assert api.capped_jobs(256) == 2 and api.capped_jobs(None) == 2 and api.capped_jobs(1) == 1


def test_usable_cpus_follow_the_affinity_mask():
    from perfsleuth.api import usable_cpus

    assert usable_cpus() == len(os.sched_getaffinity(0))


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "cp1252"}, {"PYTHONIOENCODING": "latin-1"},
                                 {"PYTHONIOENCODING": "ascii"}])
def test_an_output_encoding_that_cannot_show_the_text_costs_no_report(tmp_path, env):
    """Issue 38, class 6: with a non-UTF-8 output encoding the terminal text (×, µ, ▲, any name from a trace)
    ended in UnicodeEncodeError, exit 1, and no report, because the files came after it. Now the files come
    first and what cannot be shown prints as '?'."""
    import subprocess
    import sys
    from pathlib import Path

    trace = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "real" / "h100_qwen0.5b_inference.json.gz"
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "perfsleuth", "analyze", str(trace), "-o", str(out)],
                          capture_output=True, env={**os.environ, **env}, timeout=300)
    assert done.returncode == 0, done.stderr.decode("latin-1")[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "summary.md"]
    text = done.stdout.decode("latin-1")
    assert "verdict:" in text
    if env["PYTHONIOENCODING"] != "ascii":  # (click writes UTF-8 to a stream that claims ASCII)
        assert "?" in text and "\u00d7" not in done.stdout.decode("latin-1")  # what it could not show: '?'
    assert text.rstrip().endswith("report.json")  # "wrote" lines after the summary, as before
