"""`perfsleuth run` measuring through noise (issue 24 item 5), for real: the unprofiled steps after the recorded
window are timed and land in the trace, also when the script ends among them; a run killed among them leaves
a usable trace; a run beside busy processes says the machine was busy, not that the profiler distorted it."""

import gzip
import json
import os
import subprocess
import sys

from perfsleuth.api import analyze_path
from test_run_failures import run, script

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures", "scripts", "cpu")
# test_run_failures' loop: boundary 1 is the first next(), boundary k + 2 ends iteration k. The window of
# 3 + 1 + 3 steps ends at boundary 7 (iteration 5); the 4 steps after it end with iterations 6 to 9.
SCHEDULE = ["--wait", "3", "--warmup", "1", "--active", "3", "--no-stack"]


def finished_clock(path) -> dict:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    return doc["perfsleuth_final"]["clock"]


def test_steps_after_the_window_are_timed_into_the_trace(tmp_path):
    code, out, err = run(*SCHEDULE, "-o", tmp_path / "o", script(tmp_path))
    assert code == 0, err
    assert "perfsleuth: stopped the script after step 14 (profiled 3)" in err  # 7 + 4 + the 3 memory steps
    clock = finished_clock(tmp_path / "o" / "trace.pt.trace.json.gz")
    assert len(clock["unprofiled_us"]) == 2 and len(clock["after_us"]) == len(clock["after_cpu_us"]) == 4
    assert all(us > 0 for us in clock["after_us"] + clock["after_cpu_us"])
    assert not (tmp_path / "o" / "trace.pt.trace.json").exists()
    m = json.loads((tmp_path / "o" / "report.json").read_text())["measurement"]
    assert m["after"]["n"] + m["before"]["n"] + m["unprofiled_warmup_steps"] == 6
    assert m["unprofiled_step_us"]["n"] == m["cpu_us"]["unprofiled"]["n"] == m["after"]["n"] + m["before"]["n"]


def test_a_script_that_ends_among_the_steps_after_the_window_still_finishes_its_trace(tmp_path):
    # iteration 6 completes (boundary 8: one step after the window timed), iteration 7 leaves the loop
    path = script(tmp_path, body="if step == 7:\n        break")
    code, out, err = run(*SCHEDULE, "-o", tmp_path / "o", path)
    assert code == 0, err
    assert "stopped the script" not in err and "the run ended inside the active window" not in out + err
    assert finished_clock(tmp_path / "o" / "trace.pt.trace.json.gz")["after_us"] != []
    assert len(finished_clock(tmp_path / "o" / "trace.pt.trace.json.gz")["after_us"]) == 1
    assert not (tmp_path / "o" / "trace.pt.trace.json").exists()
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert rep["measurement"]["after"]["n"] == 1 and len(rep["steps"]) == 3


def test_a_run_killed_among_the_steps_after_the_window_leaves_a_usable_trace(tmp_path):
    """SIGKILL runs no cleanup: the JSON exported when the window ended is the trace. (os._exit is watched and
    writes the gzipped trace: tests/e2e/test_run_processes.py.)"""
    path = script(tmp_path, body="if step == 7:\n        import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    out = tmp_path / "o"
    proc = subprocess.run([sys.executable, "-m", "perfsleuth", "run", *SCHEDULE, "-o", str(out), str(path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9
    assert sorted(p.name for p in out.iterdir()) == ["trace.pt.trace.json"]
    rep = analyze_path(out).to_dict()
    assert len(rep["steps"]) == 3 and rep["measurement"]["after"] is None
    assert rep["measurement"]["before"]["n"] + rep["measurement"]["unprofiled_warmup_steps"] == 2


def test_a_run_beside_busy_processes_reports_a_busy_machine_not_distortion(tmp_path):
    """Two busy loops pinned to the one CPU the run may use: other processes take most of it."""
    cpu = min(os.sched_getaffinity(0))

    def pinned():
        os.sched_setaffinity(0, {cpu})

    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pinned) for _ in range(2)]
    try:
        out = tmp_path / "o"
        proc = subprocess.run([sys.executable, "-m", "perfsleuth", "run", "--no-stack", "-o", str(out),
                               os.path.join(SCRIPTS, "compute_mlp.py"), "--steps", "40"],
                              capture_output=True, text=True, timeout=600, preexec_fn=pinned)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((out / "report.json").read_text())["measurement"]
    assert m["busy"] is True and m["distorted"] is False, m
    assert m["others_cores"] >= 0.5  # of the 1 CPU this run could use
    # the spinners are most of it ("and the hypervisor (steal time: …)" where this VM's host also took some)
    assert m["busy_reason"].startswith("other processes ") and m["steal_cores"] < m["others_cores"] / 2, m
    assert "the machine was busy during the run: rerun on a quiet machine, or with more steps" in proc.stdout
    assert "PROFILER DISTORTION" not in proc.stdout and "--no-shapes" not in proc.stdout
