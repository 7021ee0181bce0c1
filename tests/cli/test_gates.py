"""CI gates: `analyze --fail-on` and `diff --fail-on-regression`, their parsing, and exit codes 0/1/2."""

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner
from perfsleuth.cli.main import main
from perfsleuth.cli.diff import diff_reports
from perfsleuth.cli.gates import (
    FailOn,
    check_regression,
    check_report,
    failure_line,
    known_rule_slugs,
    parse_fail_on,
    parse_threshold,
)
from perfsleuth.errors import UsageError
from test_diff import BASE, report

# host-bound (its 33% of sync is passed over: removing it is forecast at 1.005x), with an item-sync finding
# (docs/attribution.md)
GATED = "a100_rank0_of16_nccl.json.gz"
CONTROL, TEST = "a100_trace_diff_control.json.gz", "v100_trace_diff_test.json.gz"


# ---------------------------------------------------------------- --fail-on parsing


def test_parse_fail_on_verdicts_and_rules():
    got = parse_fail_on(["sync-bound,item-sync", "SYNC-BOUND", " , num-workers ,dataloader-bound"])
    assert got == FailOn(verdicts=("sync-bound", "dataloader-bound"), rules=("item-sync", "num-workers"))
    assert not parse_fail_on([]) and not parse_fail_on([" , "])


@pytest.mark.parametrize("value,message", [
    ("sync-bond", "--fail-on: unknown verdict 'sync-bond' (did you mean sync-bound?)"),
    ("syncbound", "--fail-on: unknown verdict 'syncbound' (did you mean sync-bound?)"),
    ("gpu-bound", "--fail-on: unknown verdict 'gpu-bound'; verdicts: dataloader-bound, kernel-bound, sync-bound"),
    ("item_sync", "--fail-on: 'item_sync' is neither a verdict"),
    ("item sync", "--fail-on: 'item sync' is neither a verdict"),
])
def test_parse_fail_on_errors(value, message):
    with pytest.raises(UsageError) as exc:
        parse_fail_on([value])
    assert str(exc.value).startswith(message)


def test_rule_slugs_checked_against_the_catalogue():
    known = known_rule_slugs()
    assert {"item-sync", "num-workers", "pin-memory"} <= known
    assert parse_fail_on(["item-sync"], known).rules == ("item-sync",)
    with pytest.raises(UsageError, match=r"unknown rule 'itme-sync' \(did you mean item-sync\?\)"):
        parse_fail_on(["itme-sync"], known)
    # without a catalogue any slug of [a-z0-9-] is taken
    assert parse_fail_on(["no-such-rule-9"]).rules == ("no-such-rule-9",)


# ---------------------------------------------------------------- --fail-on evaluation


def test_check_report():
    rep = report(BASE, verdict="sync-bound", findings=["item-sync", "amp"])
    assert check_report(rep, parse_fail_on(["sync-bound,item-sync,num-workers"])) == [
        "verdict sync-bound (--fail-on sync-bound)", "finding item-sync (--fail-on item-sync)"]
    assert check_report(rep, parse_fail_on(["kernel-bound,num-workers"])) == []
    assert check_report(rep, FailOn()) == []


def test_check_report_set_names_the_trace():
    a, b = report(BASE, verdict="sync-bound"), report(BASE, verdict="kernel-bound")
    a["trace"]["path"], b["trace"]["path"] = "rank0.json.gz", "rank1.json.gz"
    result = {"schema": "perfsleuth/report-set@1", "reports": [a, b]}
    assert check_report(result, parse_fail_on(["sync-bound"])) == [
        "verdict sync-bound in rank0.json.gz (--fail-on sync-bound)"]


def test_failure_line():
    assert failure_line(["a", "b"]) == "perfsleuth: gate failed: a; b"


# ---------------------------------------------------------------- --fail-on-regression


@pytest.mark.parametrize("text,value", [("10%", 0.1), ("0.1", 0.1), (" 2.5 % ", 0.025), (".05", 0.05),
                                        ("0%", 0.0), ("150%", 1.5)])
def test_parse_threshold(text, value):
    assert parse_threshold(text) == pytest.approx(value, abs=1e-12)


@pytest.mark.parametrize("text,message", [
    ("10", "'10' is ambiguous; write 10% or 0.1"),
    ("-5%", "'-5%' is not a percentage"),
    ("ten", "'ten' is not a percentage"),
    ("1e3", "'1e3' is not a percentage"),
    ("5000%", "'5000%' is out of range"),
])
def test_parse_threshold_errors(text, message):
    with pytest.raises(UsageError) as exc:
        parse_threshold(text)
    assert str(exc.value).startswith(f"--fail-on-regression: {message}")


def test_regression_gate():
    d = diff_reports(report(BASE), report([110, 111, 109, 110]))  # +10 %, regression
    assert check_regression(d, 0.05) == [
        "step time +10.0% (median 100.0 µs → 110.0 µs, outside noise ±2.1 µs) exceeds --fail-on-regression 5%"]
    assert check_regression(d, 0.10) == []  # must exceed, not equal
    assert check_regression(d, 0.15) == []
    assert check_regression(d, None) == []


def test_regression_gate_ignores_noise_and_improvements():
    noisy = diff_reports(report([80, 100, 120, 100]), report([95, 115, 135, 115]))  # +15 % within noise
    assert noisy["step_time"]["change"] == 0.15
    assert check_regression(noisy, 0.0) == []
    faster = diff_reports(report(BASE), report([90, 91, 89, 90]))
    assert check_regression(faster, 0.0) == []


# ---------------------------------------------------------------- exit codes through the CLI


def _invoke(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def _reports(tmp_path, base, head):
    paths = []
    for name, rep in (("base.json", base), ("head.json", head)):
        (tmp_path / name).write_text(json.dumps(rep))
        paths.append(str(tmp_path / name))
    return paths


def test_diff_exit_codes(tmp_path):
    b, h = _reports(tmp_path, report(BASE), report([110, 111, 109, 110]))
    r = _invoke(["diff", b, h, "--fail-on-regression", "5%"])
    assert r.exit_code == 1
    assert r.stderr == ("perfsleuth: gate failed: step time +10.0% (median 100.0 µs → 110.0 µs, outside noise "
                        "±2.1 µs) exceeds --fail-on-regression 5%\n")
    assert "REGRESSION" in r.stdout  # the comparison is still printed
    assert _invoke(["diff", b, h, "--fail-on-regression", "0.15"]).exit_code == 0
    assert _invoke(["diff", b, h]).exit_code == 0
    r = _invoke(["diff", b, h, "--fail-on-regression", "10"])
    assert (r.exit_code, r.stderr) == (2, "perfsleuth: error: --fail-on-regression: '10' is ambiguous; "
                                          "write 10% or 0.1\n")


def test_diff_within_noise_passes(tmp_path):
    b, h = _reports(tmp_path, report(BASE), report([100, 102, 98, 101]))
    r = _invoke(["diff", b, h, "--fail-on-regression", "0%"])
    assert r.exit_code == 0  # and says why (tests/cli/test_diff_warnings_and_category_gates.py)
    assert r.stderr.startswith("perfsleuth: gate passed: step time +0.5% (median 100.0 µs → "
                               "100.5 µs) is within")


def test_diff_writes_outputs_before_failing(tmp_path):
    b, h = _reports(tmp_path, report(BASE), report([110, 111, 109, 110]))
    md, js = tmp_path / "diff.md", tmp_path / "diff.json"
    r = _invoke(["diff", b, h, "--fail-on-regression", "1%", "--markdown", str(md), "--json", str(js)])
    assert r.exit_code == 1
    assert json.loads(js.read_text())["step_time"]["call"] == "regression"
    assert md.read_text().startswith("### perfsleuth diff: median step **+10.0%**")


def test_diff_bad_input_is_exit_2(tmp_path):
    good = _reports(tmp_path, report(BASE), report(BASE))[0]
    bad = tmp_path / "set.json"
    bad.write_text(json.dumps({"schema": "perfsleuth/report-set@1", "reports": []}))
    r = _invoke(["diff", good, str(bad)])
    assert r.exit_code == 2
    assert r.stderr == f"perfsleuth: error: {bad}: is a report set (0 traces); diff compares one report with one report\n"
    r = _invoke(["diff", good, str(tmp_path / "nope.json.gz")])
    assert (r.exit_code, r.stderr) == (2, f"perfsleuth: error: {tmp_path / 'nope.json.gz'}: no such file or directory\n")
    garbage = tmp_path / "garbage.json.gz"
    garbage.write_bytes(b"not gzip")
    r = _invoke(["diff", good, str(garbage)])
    assert r.exit_code == 2 and r.stderr.startswith(f"perfsleuth: error: {garbage}") and r.stderr.count("\n") == 1


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_analyze_fail_on_real_trace(real_traces):
    path = str(real_traces / GATED)
    r = _invoke(["analyze", path, "--fail-on", "host-bound"])
    assert r.exit_code == 1
    assert r.stderr == "perfsleuth: gate failed: verdict host-bound (--fail-on host-bound)\n"
    assert "verdict: HOST-BOUND" in r.stdout
    r = _invoke(["analyze", path, "--fail-on", "host-bound,item-sync"])
    assert r.exit_code == 1
    assert r.stderr == ("perfsleuth: gate failed: verdict host-bound (--fail-on host-bound); "
                        "finding item-sync (--fail-on item-sync)\n")
    r = _invoke(["analyze", path, "--fail-on", "kernel-bound", "--fail-on", "num-workers"])
    assert (r.exit_code, r.stderr) == (0, "")


def test_analyze_fail_on_bad_names_exit_2_before_analysing(tmp_path):
    missing = str(tmp_path / "never-read.json.gz")  # the option is checked first
    r = _invoke(["analyze", missing, "--fail-on", "sync-bond"])
    assert r.exit_code == 2
    assert r.stderr.startswith("perfsleuth: error: --fail-on: unknown verdict 'sync-bond' (did you mean sync-bound?)")
    r = _invoke(["analyze", missing, "--fail-on", "itme-sync"])
    assert r.exit_code == 2 and "unknown rule 'itme-sync' (did you mean item-sync?)" in r.stderr
    assert r.stderr.count("\n") == 1


def test_analyze_fail_on_writes_the_report_first(real_traces, tmp_path):
    out = tmp_path / "report.json"
    r = _invoke(["analyze", str(real_traces / GATED), "--json", str(out), "--fail-on", "host-bound"])
    assert r.exit_code == 1
    assert json.loads(out.read_text())["verdict"] == "host-bound"


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_gates_in_a_real_process(real_traces, tmp_path):
    """Exit codes as a CI runner sees them: a real interpreter, real stdout/stderr."""
    def run(*args):
        return subprocess.run([sys.executable, "-m", "perfsleuth.cli.main", *args], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path)

    p = run("analyze", str(real_traces / GATED), "--fail-on", "host-bound")
    assert p.returncode == 1
    assert p.stderr == "perfsleuth: gate failed: verdict host-bound (--fail-on host-bound)\n"
    p = run("diff", str(real_traces / CONTROL), str(real_traces / TEST), "--fail-on-regression", "10%")
    assert p.returncode == 1
    assert p.stderr == ("perfsleuth: gate failed: step time +52.0% (median 76.76 ms → 116.69 ms, outside noise "
                        "±2.92 ms) exceeds --fail-on-regression 10%; the runs differ (device "
                        "NVIDIA A100-PG509-200 vs Tesla V100-SXM2-16GB): a change between them "
                        "need not come from the code; compare one program on one machine, over "
                        "as many steps\n")
    p = run("diff", str(real_traces / CONTROL), str(real_traces / CONTROL), "--fail-on-regression", "1%")
    assert (p.returncode, p.stderr) == (0, "")
    p = run("diff", str(real_traces / CONTROL), "missing.json.gz")
    assert (p.returncode, p.stderr) == (2, "perfsleuth: error: missing.json.gz: no such file or directory\n")


def test_fail_on_the_job_verdict_of_a_directory_of_ranks():
    """straggler-bound exists only as a job verdict (a directory of one job's rank traces); a rank
    verdict in the same list still trips on the per-rank reports."""
    assert parse_fail_on(["straggler-bound"]).verdicts == ("straggler-bound",)
    data = {"reports": [{"verdict": "kernel-bound", "findings": [], "trace": {"path": "r0"}},
                        {"verdict": "dataloader-bound", "findings": [], "trace": {"path": "r1"}}],
            "job": {"verdict": "straggler-bound"}}
    assert check_report(data, parse_fail_on(["straggler-bound"])) == [
        "job verdict straggler-bound (--fail-on straggler-bound)"]
    assert check_report(data, parse_fail_on(["straggler-bound,dataloader-bound"])) == [
        "job verdict straggler-bound (--fail-on straggler-bound)",
        "verdict dataloader-bound in r1 (--fail-on dataloader-bound)"]
    assert check_report({**data, "job": {"verdict": "kernel-bound"}}, parse_fail_on(["straggler-bound"])) == []
    # A folder of several jobs: each job's verdict is checked; a withheld one (None) trips nothing.
    several = {"reports": data["reports"],
               "jobs": [{"job": {"verdict": None}}, {"job": {"verdict": "straggler-bound"}}]}
    assert check_report(several, parse_fail_on(["straggler-bound"])) == [
        "job verdict straggler-bound (--fail-on straggler-bound)"]


def test_cli_fails_on_the_job_verdict_of_recorded_ranks():
    from pathlib import Path

    job = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "ranks" / "ddp2_straggler"
    result = CliRunner().invoke(main, ["analyze", str(job), "--fail-on", "straggler-bound"])
    assert result.exit_code == 1
    assert "perfsleuth: gate failed: job verdict straggler-bound (--fail-on straggler-bound)" in result.stderr
