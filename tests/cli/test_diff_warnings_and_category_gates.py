"""Issue 37's small things in `perfsleuth diff`: a warning, in every output and in the gate's
line, when the two runs differ in device, program or steps compared; gates on a category's share
(`--fail-on-regression dataloader:+10pp`); a pass within the noise band that says so; categories
that the diff marks as regressions named as not gated."""

import json

import pytest
from click.testing import CliRunner
from perfsleuth.cli.diff import diff_reports
from perfsleuth.cli.gates import RegressionGates, check_shares, gate_notes, parse_regressions
from perfsleuth.cli.main import main
from perfsleuth.errors import UsageError
from perfsleuth.render.diff_view import render_diff_markdown, render_diff_terminal
from test_diff import BASE, CATS, report

CPU = "fixtures/traces/cpu"
MLP, STARVED, FEW = (f"{CPU}/{n}.pt.trace.json.gz"
                     for n in ("compute_mlp", "dataloader_starved", "few_workers"))
TAIL = ("a change between them need not come from the code; compare one program on one "
        "machine, over as many steps")


def _invoke(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def loader_report(durations, loader_us, **trace):
    """A report@1 dict whose steps are `loader_us` of dataloader and the rest kernel."""
    steps = [{"name": f"ProfilerStep#{i}", "start_us": 1000.0 * i, "duration_us": float(d),
              "time_us": {**{c: 0.0 for c in CATS}, "dataloader": float(x),
                          "kernel": float(d - x)}}
             for i, (d, x) in enumerate(zip(durations, loader_us))]
    return {"schema": "perfsleuth/report@1", "tool": {"name": "perfsleuth", "version": "0.1.0"},
            "trace": {"path": "t.json.gz", "device": None, "device_type": "cpu", **trace},
            "steps_source": "ProfilerStep", "steps": steps, "verdict": "kernel-bound",
            "verdict_reason": "", "findings": [], "top_kernels": [], "top_ops": [],
            "warnings": []}


# ---------------------------------------------------------------- the runs differ


def test_device_program_and_steps_that_differ_are_said_first():
    base = loader_report([100, 101, 99, 100], [1, 1, 1, 1], program="train.py")
    head = loader_report([110, 111, 109, 110, 112, 108], [1] * 6, program="bench.py",
                         device="NVIDIA H100 80GB HBM3", device_type="cuda")
    d = diff_reports(base, head)
    assert d["differences"] == [
        {"what": "device", "base": "CPU only", "head": "NVIDIA H100 80GB HBM3"},
        {"what": "program", "base": "train.py", "head": "bench.py"},
        {"what": "steps", "base": 4, "head": 6}]
    sentence = ("the runs differ (device CPU only vs NVIDIA H100 80GB HBM3; program train.py vs "
                f"bench.py; 4 vs 6 steps compared): {TAIL}")
    assert d["warnings"][0] == sentence and d["base"]["program"] == "train.py"
    lines = render_diff_terminal(d).splitlines()
    assert lines[3] == "step time: median 100 µs → 110 µs (+10 µs, +10.0%): REGRESSION"
    assert lines[4] == f"warning: {sentence}"  # right under the headline, and only there
    assert sum(sentence in line for line in lines) == 1
    md = render_diff_markdown(d)
    assert md.split("\n\n")[1] == f"> **Warning:** {sentence}"
    assert md.count("the runs differ") == 1


def test_one_program_on_one_device_gets_no_warning():
    d = diff_reports(loader_report(BASE, [1] * 4, program="train.py"),
                     loader_report([110, 111, 109, 110, 110], [1] * 5, program="train.py"))
    # 4 against 5 steps: a step set apart as warm-up on one side is jitter, not another experiment
    assert d["differences"] == [] and not any("differ" in w for w in d["warnings"])
    # a trace that `perfsleuth run` did not record names no program: not compared
    d = diff_reports(loader_report(BASE, [1] * 4, program="train.py"),
                     loader_report(BASE, [1] * 4))
    assert d["differences"] == []
    assert "warning" not in render_diff_terminal(d)


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_a_cpu_run_against_an_a100_trace_warns_in_every_output_and_in_the_gate(real_traces,
                                                                               tmp_path):
    a100 = str(real_traces / "a100_alexnet_small.json.gz")
    md, js = tmp_path / "diff.md", tmp_path / "diff.json"
    r = _invoke(["diff", STARVED, a100, "--fail-on-regression", "10%", "--markdown", str(md),
                 "--json", str(js)])
    sentence = ("the runs differ (device CPU only vs NVIDIA A100-PG509-200; 5 vs 1 steps "
                f"compared): {TAIL}")
    assert r.exit_code == 1
    assert r.stdout.splitlines()[3:5] == [
        "step time: median 35.59 ms → 43.43 s (+43.39 s, ×1,220): REGRESSION",
        f"warning: {sentence}"]
    assert r.stderr == ("perfsleuth: gate failed: step time ×1,220 (median 35.59 ms → "
                        "43425.36 ms, outside noise ±1.28 ms) exceeds --fail-on-regression 10%; "
                        f"{sentence}\n")
    assert json.loads(js.read_text())["warnings"][0] == sentence
    assert md.read_text().split("\n\n")[1] == f"> **Warning:** {sentence}"


# ---------------------------------------------------------------- gates on a category's share


def test_parse_regressions():
    assert parse_regressions(["10%"]) == RegressionGates(step=0.1)
    assert parse_regressions(["dataloader:+10pp, 5%", "Host: 2.5 PP"]) == RegressionGates(
        step=0.05, shares=(("dataloader", 0.1), ("host", 0.025)))
    assert not parse_regressions([])


@pytest.mark.parametrize("value,message", [
    ("dataloder:+10pp", "unknown category 'dataloder' (did you mean dataloader?); categories: "
                        "dataloader, kernel, sync, transfer, host, communication, other"),
    ("dataloader:10%", "'dataloader:10%': a share grows in percentage points: write "
                       "dataloader:+10pp"),
    ("dataloader:+100pp", "'dataloader:+100pp' is out of range (+0pp to +99pp)"),
    ("10", "'10' is ambiguous; write 10% or 0.1"),
    (" , ", "' , ' names no gate (write 10% or dataloader:+10pp)"),
])
def test_parse_regressions_errors(value, message):
    with pytest.raises(UsageError) as exc:
        parse_regressions([value])
    assert str(exc.value) == f"--fail-on-regression: {message}"


def test_share_gate_trips_on_a_share_that_grew_outside_noise():
    d = diff_reports(loader_report(BASE, [1, 1, 1, 1]),
                     loader_report([110, 111, 109, 110], [50, 51, 49, 50]))
    row = next(c for c in d["categories"] if c["category"] == "dataloader")
    assert (row["base_share"], row["head_share"], row["share_change"], row["call"]) == (
        0.01, 0.4545, 0.4445, "regression")
    # noise: 2 x 1.4826 x the head's MAD of 0.5 µs
    assert check_shares(d, (("dataloader", 0.10),)) == [
        "dataloader share 1.0% → 45.5% (+44.5 pp; 1.0 µs → 50.0 µs per step, outside noise "
        "±1.5 µs) exceeds --fail-on-regression dataloader:+10pp"]
    assert check_shares(d, (("dataloader", 0.50),)) == []  # grew by less than asked
    assert check_shares(d, (("host", 0.0),)) == []


def test_a_pass_within_noise_says_so_and_names_what_is_not_gated():
    # +15 % within a wide noise band; the loader's share 1 % -> 40 % outside its own
    base = loader_report([80, 100, 120, 100], [1, 1, 1, 1])
    head = loader_report([95, 115, 135, 115], [46, 46, 46, 46])
    d = diff_reports(base, head)
    assert d["step_time"]["call"] == "within noise"
    assert gate_notes(d, parse_regressions(["10%"])) == [
        "gate passed: step time +15.0% (median 100.0 µs → 115.0 µs) is within the noise band "
        "±41.9 µs: not failed (--fail-on-regression 10%)",
        "not gated: dataloader 1.0% → 40.0% of the step (marked regression in the diff); "
        "categories are gated only when asked, e.g. --fail-on-regression dataloader:+10pp"]
    # gated: not named again
    assert gate_notes(d, parse_regressions(["10%", "dataloader:+50pp"]))[1:] == []
    assert gate_notes(d, RegressionGates()) == []  # no gate asked: nothing said
    # every output says it under the category table, gate or not
    note = ("▲ is a change beyond noise; a category fails no gate unless named "
            "(--fail-on-regression dataloader:+10pp)")
    lines = render_diff_terminal(d).splitlines()
    assert lines[lines.index(next(x for x in lines if x.startswith("other "))) + 1] == note
    assert f"| ≈ within noise |\n\n_{note}_\n\n" in render_diff_markdown(d)
    # a step that grows evenly (no share grew) gets no such line
    even = diff_reports(loader_report(BASE, [10] * 4),
                        loader_report([110, 111, 109, 110], [11] * 4))
    assert "fails no gate" not in render_diff_terminal(even) + render_diff_markdown(even)


def test_cli_pass_within_noise_is_said_on_stderr(tmp_path):
    paths = []
    for name, rep in (("b.json", report(BASE)), ("h.json", report([100, 102, 98, 101]))):
        (tmp_path / name).write_text(json.dumps(rep))
        paths.append(str(tmp_path / name))
    r = _invoke(["diff", *paths, "--fail-on-regression", "0%"])
    assert (r.exit_code, r.stderr) == (
        0, "perfsleuth: gate passed: step time +0.5% (median 100.0 µs → 100.5 µs) is within "
           "the noise band ±3.3 µs: not failed (--fail-on-regression 0%)\n")


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_category_gates_on_real_cpu_runs():
    """compute_mlp -> dataloader_starved: the step +8.7 % (outside noise), the loader's share
    0.9 % -> 96.1 %."""
    r = _invoke(["diff", MLP, STARVED, "--fail-on-regression", "50%"])
    assert (r.exit_code, r.stderr) == (
        0, "perfsleuth: not gated: dataloader 0.9% → 96.1% of the step (marked regression in the "
           "diff); categories are gated only when asked, e.g. --fail-on-regression "
           "dataloader:+10pp\n")
    r = _invoke(["diff", MLP, STARVED, "--fail-on-regression", "50%,dataloader:+10pp"])
    assert (r.exit_code, r.stderr) == (
        1, "perfsleuth: gate failed: dataloader share 0.9% → 96.1% (+95.2 pp; 244.5 µs → "
           "34.06 ms per step, outside noise ±1.21 ms) exceeds --fail-on-regression "
           "dataloader:+10pp\n")
    # few_workers: +7.4 % within a noise band of ±9.24 ms (one step of 43.9 ms among ~30 ms)
    r = _invoke(["diff", MLP, FEW, "--fail-on-regression", "5%"])
    assert r.exit_code == 0
    assert r.stderr.splitlines()[0] == (
        "perfsleuth: gate passed: step time +7.4% (median 31.75 ms → 34.11 ms) is within the "
        "noise band ±9.24 ms: not failed (--fail-on-regression 5%)")
