"""`perfsleuth run --verify` on real CPU training scripts (tests/e2e/verify_scripts/): the fixes are applied and
measured, A/B interleaved, in child processes. Timing on a shared machine is noisy, so these assert
directions, outcomes and what is kept, never absolute times; exact numbers are in test_verify_units.py.

The machine is shared: the test of a fix that helps needs an idle core, and checks from the experiment's
own record (`others_cores`: CPU other processes used during each window, from /proc/stat) that it had one;
when it had none, it checks that the report says the machine was busy."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from perfsleuth.record.target import resolve_target
from perfsleuth.verify.experiment import OUTCOME_RANK, Verifier
from perfsleuth.verify.config import VerifyConfig
from perfsleuth.verify.fixes import FRESH, TOGGLE, Context, forecast_workers, plan
from perfsleuth.engine.measured import rated

SCRIPTS = Path(__file__).resolve().parent / "verify_scripts"
QUICK = ["--wait", "4", "--warmup", "1", "--active", "3", "--no-stack"]


def perfsleuth_run(cwd: Path, *args, timeout=300, cpus=None) -> subprocess.CompletedProcess:
    """`cpus`: hold perfsleuth, the script and every process they start to these cores."""
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    return subprocess.run([sys.executable, "-m", "perfsleuth", "run", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, preexec_fn=pin)


def the(report: dict, rule: str) -> dict:
    [f] = [f for f in report["findings"] if f["rule"] == rule]
    return f


def experiments(report: dict, fix: str) -> list:
    return [e for e in report["verify"]["experiments"] if e["fix"] == fix]


def test_a_fix_that_helps_is_measured_faster(tmp_path):
    """Workers for a Python-heavy Dataset whose batches take about as long as the model's step: a worker on
    a free core overlaps the two (forecast and measured in a fresh process per window)."""
    out = tmp_path / "o"
    proc = perfsleuth_run(tmp_path, *QUICK, "--verify", "-o", str(out), str(SCRIPTS / "loader_heavy.py"),
                          "--steps", "300")
    assert proc.returncode == 0, proc.stderr
    rep = json.loads((out / "report.json").read_text())
    f = the(rep, "num-workers")
    v = f["verified"]
    assert v["how"] == FRESH and v["pairs"] == 3 and len(v["pair_ratios"]) == 3 and len(v["load"]) == 3
    assert v["variant"].startswith("num_workers=")
    others = [w["others_cores"] for e in experiments(rep, "num_workers") for w in e["windows"]]
    if sum(others) / len(others) < 0.5:  # the premise held: other processes left a core idle
        assert v["speedup"] > 1.0, (v, others)  # the direction: faster
    else:  # this shared machine had no idle core to give: the report must say so, not pass it off as a measure
        assert "the machine was busy during the experiments" in rep["verify"]["warning"], (v, others)
        assert "the machine was busy" in proc.stderr
    forecast = f.get("forecast")
    assert f["severity_from"] == "measured" and f["severity"] == rated(v, forecast)[0]
    assert v["warmup_us"]["variant"] > 0 and v["steps_per_window"] >= 5
    for e in experiments(rep, "num_workers"):
        assert e["status"] == "measured" and e["processes"] == 6, e  # A B A B A B, one process each
    assert "verify 1/" in proc.stderr and "pair 1/3: " in proc.stderr and "pair 3/3: " in proc.stderr
    # the script's own output: once on the terminal (the profiled run), the experiments' in the log
    assert proc.stdout.count("loader_heavy: started") == 1
    log = (out / "verify" / "children.log").read_text()
    # the sweep (issue 40): the forecast's count first, then 1 up to the cores and one above, each measured
    tried = [e["params"]["num_workers"] for e in experiments(rep, "num_workers")]
    cores = len(os.sched_getaffinity(0))
    assert tried[0] == forecast_workers(f) and (cores > 4 or sorted(tried) == list(range(1, cores + 2))), tried
    assert log.count("loader_heavy: started") == 6 * len(tried)  # 6 windows each
    # the finding's number is the best setting measured, and it names every setting tried
    best = max((e["verified"] for e in experiments(rep, "num_workers")),
               key=lambda x: (OUTCOME_RANK[x["outcome"]], x["speedup"]))  # a conclusive gain first
    assert (v["speedup"], v["variant"]) == (best["speedup"], best["variant"])
    assert [t["params"]["num_workers"] for t in v["tried"]] == sorted(tried)
    if v["outcome"] == "faster":
        assert f"{v['variant']}," in f["fix"] and "measured fastest here" in f["fix"]
    assert rep["verify"]["log"] == str(out / "verify" / "children.log") and str(out / "verify") in proc.stderr


def test_a_fix_that_does_not_help_is_demoted(tmp_path):
    """The same script held to one core (its affinity, which the workers inherit): a worker can only take
    turns with the main process, so the fix moves the work around and adds the hand-over. The premise is
    certain whatever else runs here. (A busy process beside it on the other core was not: the scheduler
    shares that core, the worker gets part of it, and CI once measured the workers faster.)"""
    cpu = max(os.sched_getaffinity(0))
    out = tmp_path / "o"
    proc = perfsleuth_run(tmp_path, *QUICK, "--verify", "-o", str(out), str(SCRIPTS / "loader_heavy.py"),
                          "--steps", "300", cpus={cpu})
    assert proc.returncode == 0, proc.stderr
    rep = json.loads((out / "report.json").read_text())
    f = the(rep, "num-workers")
    v = f["verified"]
    forecast = f.get("forecast")
    assert f["severity_from"] == "measured" and f["severity"] == rated(v, forecast)[0], (f["severity"], v)
    others = [w["others_cores"] for e in experiments(rep, "num_workers") for w in e["windows"]]
    if sum(others) / len(others) > 1.25:  # this shared machine's other sessions were busy on our core too:
        # the pairs measure them (issue 40's sweep), and the report says so
        assert "the machine was busy during the experiments" in rep["verify"]["warning"], (v, others)
        return
    assert v["outcome"] in ("no gain", "slower", "noise"), (v, others)  # never "faster"
    if v["outcome"] != "noise":  # a measurement beyond noise: demoted, and said
        assert f["severity"] == "low" and v["note"].startswith("tried: "), v
    else:  # the other processes of this shared machine moved the pairs apart: said
        assert "no difference beyond noise" in v["note"], v
    for e in experiments(rep, "num_workers"):
        assert e["verified"]["outcome"] != "faster", e


def test_an_in_process_toggle_and_the_scripts_files_are_left_alone(tmp_path):
    """foreach=True on an optimizer over 120 small parameters, switched between windows of one process.
    The script writes report.json and verify/children.log into the output folder itself, every run:
    perfsleuth's go elsewhere and say so."""
    out = tmp_path / "o"
    proc = perfsleuth_run(tmp_path, *QUICK, "--verify", "-o", str(out), str(SCRIPTS / "many_small_params.py"),
                          "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    mine = json.dumps({"written_by": "the script"})
    assert (out / "report.json").read_text() == mine
    assert (out / "verify" / "children.log").read_text() == mine
    assert "the report went to" in proc.stderr
    rep = json.loads((out / "perfsleuth-report" / "report.json").read_text())
    assert rep["verify"]["folder"] == str(out / "verify-2")  # a new folder: the script's `verify/` is left as is
    [e] = experiments(rep, "foreach")
    assert e["status"] == "measured" and e["how"] == TOGGLE and e["processes"] == 1 and e["applied"] == "1 optimizer"
    f = the(rep, "fused-optimizer")
    v = f["verified"]
    assert v["how"] == TOGGLE and v["pairs"] == 3 and v["speedup"] > 1.0, v
    assert f["severity_from"] == "measured"
    # the script ran again once per process, and its side effects repeated (said in the report)
    runs = (out / "runs.txt").read_text().splitlines()
    assert len(runs) == 1 + sum(e["processes"] for e in rep["verify"]["experiments"] if e.get("processes"))
    assert "side effects" in rep["verify"]["cost"]


def test_sigterm_during_verify_keeps_what_was_measured(tmp_path):
    out = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-m", "perfsleuth", "run", *QUICK, "--verify", "--verify-steps", "30",
                             "-o", str(out), str(SCRIPTS / "many_small_params.py"), "--steps", "2000"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if "pair 1/3: " in line:
                proc.send_signal(signal.SIGTERM)
                break
        rest_out, rest_err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    stderr = "".join(seen) + rest_err
    assert proc.returncode == 143, stderr
    rep = json.loads((out / "report.json").read_text())
    assert rep["verify"]["interrupted"] == "SIGTERM"
    [e] = experiments(rep, "foreach")
    assert e["status"] == "stopped" and e["reason"].startswith("interrupted (SIGTERM) after "), e
    assert len(e["windows"]) >= 2 and e["windows"][0]["variant"] == "A" and e["windows"][1]["variant"] == "B"
    assert "interrupted (SIGTERM)" in stderr
    assert "verify: not run" not in stderr


def verifier(tmp_path, monkeypatch, args, **config) -> tuple:
    monkeypatch.chdir(tmp_path)
    target = resolve_target(str(SCRIPTS / "many_small_params.py"), args, False)
    lines: list = []
    return Verifier(target, tmp_path, VerifyConfig(**config), 10_000.0, lines.append), lines


def test_a_failing_variant_does_not_lose_the_others(tmp_path, monkeypatch):
    ctx = Context(loaders=[{"num_workers": 0}], cores=2.0, free_cores=2.0)
    findings = [{"rule": "num-workers", "forecast": {"assumptions": {"workers": "num_workers=1 (was 0)"}}},
                {"rule": "fused-optimizer", "forecast": {"speedup": 1.3}}]
    exps, not_tried = plan(findings, ctx)
    assert [e["variant"] for e in exps] == ["num_workers=1", "num_workers=2", "num_workers=3", "optimizer foreach=True"]
    exps = [exps[0], exps[3]]  # one setting of the sweep fails the same way as the others
    v, lines = verifier(tmp_path, monkeypatch, ["--fail-in-worker", "--steps", "400"], steps=10)
    extra = v.run(exps, not_tried)
    failed, measured = extra["experiments"]
    assert failed["status"] == "failed"
    assert failed["reason"].startswith("the script raised RuntimeError: Caught RuntimeError in DataLoader worker")
    assert "\n" not in failed["reason"] and failed["verified"] is None
    assert measured["status"] == "measured" and measured["verified"]["pairs"] == 3
    assert any(line.startswith("verify 1/2: num_workers=1: failed: the script raised RuntimeError") for line in lines)
    log = Path(extra["log"]).read_text()
    assert "this Dataset cannot run in a worker process" in log  # the script's traceback, in the log


def test_the_budget_stops_further_experiments_and_says_so(tmp_path, monkeypatch):
    exps, not_tried = plan([{"rule": "fused-optimizer"}, {"rule": "zero-grad"}], Context())
    # steps of 100 ms that the estimate takes for 10 ms: the first experiment starts, and the budget ends it (its 6
    # windows of 2 + 10 steps after 3 of start-up sleep 7.5 s at least; at 50 ms a step a quick machine had finished
    # them inside the 6 s)
    v, lines = verifier(tmp_path, monkeypatch, ["--sleep", "0.1", "--steps", "2000"], steps=10, budget_s=6.0,
                        startup_guess_s=0.1)
    started = time.monotonic()
    extra = v.run(exps, not_tried)
    assert time.monotonic() - started < 30
    first, second = extra["experiments"]
    assert first["status"] == "stopped" and "the budget ran out after" in first["reason"], first
    assert second["status"] == "not tried" and second["reason"].startswith("the budget (6 s) would run out"), second
    assert extra["budget_s"] == 6.0
    assert any("not tried: the budget" in line for line in lines)
    assert os.path.isfile(extra["log"])


def test_a_script_too_short_for_its_windows_says_so(tmp_path, monkeypatch):
    """Toggled in one process, 6 windows of 2 + 10 steps after 3 of start-up need 75 steps; the script has 40."""
    exps, not_tried = plan([{"rule": "fused-optimizer"}], Context())
    v, lines = verifier(tmp_path, monkeypatch, ["--steps", "40"], steps=10)
    [e] = v.run(exps, not_tried)["experiments"]
    assert e["status"] == "failed" and e["verified"] is None
    assert e["reason"] == ("the script ended after step 41 (as `run` counts them), before its windows were timed "
                           "(3 of 6); fewer steps per window: --verify-steps")  # 40 optimizer steps after the first batch
    assert [w["variant"] for w in e["windows"]] == ["A", "B", "A"]  # what was timed is kept


def test_a_fix_that_frees_memory_measures_the_peak_of_each_window(tmp_path):
    """zero_grad(set_to_none=True) on a script that keeps a 64 MiB gradient through every forward:
    each window's peak (the process's resident-set high-water mark since the window's first timed
    step) is measured, and the variant's is lower by about the gradient: the measurement says so in
    the JSON and in the finding's text of the terminal, Markdown and HTML alike."""
    out = tmp_path / "o"
    proc = perfsleuth_run(tmp_path, *QUICK, "--verify", "--verify-pairs", "2", "-o", str(out),
                          str(SCRIPTS / "zero_grad_fill.py"))
    assert proc.returncode == 0, proc.stderr
    rep = json.loads((out / "report.json").read_text())
    [e] = experiments(rep, "zero_grad")
    assert e["status"] == "measured"
    assert e["applied"].endswith("zero_grad(set_to_none=False) calls")
    assert all(w["peak"]["rss_bytes"] > 64 << 20 for w in e["windows"])
    v = the(rep, "zero-grad")["verified"]
    peak = v["peak"]
    assert peak["measure"] == "rss_bytes" and len(peak["pairs"]) == 2
    # the gradient is 64 MiB: the variant's peak is lower by at least half of it, in every pair
    assert all(b <= a - (32 << 20) for a, b in peak["pairs"]), peak
    assert peak["change_bytes"] == peak["variant_bytes"] - peak["baseline_bytes"] < -(32 << 20)
    from perfsleuth.report.figures import peak_text
    from perfsleuth.report.present import fmt_ibytes

    text = peak_text(v)
    assert text.startswith(f"peak {fmt_ibytes(peak['baseline_bytes'])} → "
                           f"{fmt_ibytes(peak['variant_bytes'])} (")
    assert text in proc.stdout  # the terminal report
    assert text in (out / "summary.md").read_text() and text in (out / "report.html").read_text()
