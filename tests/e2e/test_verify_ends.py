"""Issue 38, classes 1-3, with real processes: a signal at the end of `run --verify` (sent at an exact
point: PERFSLEUTH_TEST_PAUSE holds perfsleuth there until the test has signalled), a script that removes
its own run folder in every run, and processes a script starts in one verify window surviving into the next.
The in-process halves are in tests/unit/test_run_keep.py."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfsleuth.record.target import resolve_target
from perfsleuth.trace.companion import companion_name
from perfsleuth.verify.config import VerifyConfig
from perfsleuth.verify.experiment import Verifier
from perfsleuth.verify.fixes import FRESH, Context, plan

SCRIPTS = Path(__file__).resolve().parent / "verify_scripts"
QUICK = ["--wait", "4", "--warmup", "1", "--active", "3", "--no-stack", "--no-memory",
         "--verify", "--verify-pairs", "1", "--verify-steps", "5"]
TIMEOUT = 300


def _wait_for(what, limit_s: float, proc=None) -> None:
    deadline = time.monotonic() + limit_s
    while not what():
        assert proc is None or proc.poll() is None, "perfsleuth ended before the point"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
@pytest.mark.parametrize("point,sig,stage", [("verify-close", signal.SIGINT, "during --verify"),
                                             ("verify-recheck", signal.SIGTERM, "during --verify"),
                                             ("report", signal.SIGHUP, "after --verify")])
def test_a_signal_at_the_end_of_verify_keeps_the_report(tmp_path, point, sig, stage):
    """The signal arrives while the last verify process is closed (Server.close() waits up to 1 s), while
    the verdict is checked again, or while the report is written: the report with what was measured, the
    line saying where the trace is, and 128 + the signal."""
    out, marker = tmp_path / "o", tmp_path / "paused"
    stdout, stderr = tmp_path / "stdout", tmp_path / "stderr"
    env = {**os.environ, "PERFSLEUTH_TEST_PAUSE": f"{point}:{marker}"}
    with open(stdout, "w") as o, open(stderr, "w") as e:
        proc = subprocess.Popen([sys.executable, "-m", "perfsleuth", "run", *QUICK, "-o", str(out),
                                 str(SCRIPTS / "many_small_params.py")], cwd=tmp_path, stdout=o, stderr=e,
                                env=env)
        try:
            _wait_for(marker.is_file, TIMEOUT, proc)
            assert int(marker.read_text()) == proc.pid
            proc.send_signal(sig)
            name = signal.Signals(sig).name
            _wait_for(lambda: f"perfsleuth: {name}: finishing the report first" in stderr.read_text(), 30, proc)
            marker.unlink()
            proc.wait(timeout=TIMEOUT)
        finally:
            proc.kill()
    err = stderr.read_text()
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    trace = out / "trace.pt.trace.json.gz"
    kept = f"the trace is kept: {trace}; to analyse it: perfsleuth analyze {trace}"
    assert f"perfsleuth: {name}: finishing the report first ({kept}); {name} again stops now" in err
    assert f"perfsleuth: interrupted ({name}) {stage}: the report was finished first" in err
    rep = json.loads((out / "report.json").read_text())
    [e] = [e for e in rep["verify"]["experiments"] if e["fix"] == "foreach"]
    assert e["status"] == "measured" and e["verified"]["pairs"] == 1, e
    f = next(f for f in rep["findings"] if f["rule"] == "fused-optimizer")
    assert f["verified"]["speedup"] == e["verified"]["speedup"]  # the measurement reached the finding
    assert f"wrote {out / 'report.json'}" in stdout.read_text() and trace.is_file()


CLEANS = """import shutil
shutil.rmtree("runs", ignore_errors=True)  # a fresh run folder each time
"""


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_a_script_that_removes_its_run_folder_keeps_perfsleuths_files(tmp_path):
    """`shutil.rmtree("runs")` at the start of the script, run with `-o runs` and --verify: each experiment's
    run of the script removes the folder again. The trace, its stacks companion and verify/ are there at the
    end, every "wrote" names a file that is there, and the experiment is measured."""
    script = tmp_path / "train.py"
    script.write_text(CLEANS + (SCRIPTS / "many_small_params.py").read_text())
    quick = [a for a in QUICK if a != "--no-stack"]  # the stacks companion too
    proc = subprocess.run([sys.executable, "-m", "perfsleuth", "run", *quick, "-o", "runs", str(script)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    runs = tmp_path / "runs"
    wrote = [line.split(" ", 2)[1] for line in proc.stdout.splitlines() if line.startswith("wrote ")]
    trace = "trace.pt.trace.json.gz"
    assert {Path(p).name for p in wrote} >= {"report.json", trace, companion_name(trace)}, wrote
    for p in wrote:
        assert (tmp_path / p).is_file(), p  # relative to the working folder, as given
    rep = json.loads((runs / "report.json").read_text())
    assert rep["verify"]["folder"] == str(Path("runs") / "verify")  # as -o gave it
    [e] = [e for e in rep["verify"]["experiments"] if e["fix"] == "foreach"]
    assert e["status"] == "measured" and e["verified"] is not None, e
    assert "before saying why" not in proc.stderr
    log = (runs / "verify" / "children.log").read_text()
    assert "--- perfsleuth verify: windows 0-1: baseline, optimizer foreach=True ---" in log
    jobs = sum(e.get("processes") or 0 for e in rep["verify"]["experiments"])
    assert sorted(p.name for p in (runs / "verify").iterdir()) == ["children.log", *(
        f"job-{n:03d}.jsonl" for n in range(1, jobs + 1))]
    for e in rep["verify"]["experiments"]:
        assert "before saying why" not in (e["reason"] or ""), e
    assert not [p for p in tmp_path.iterdir() if ".perfsleuth-" in p.name]  # the private folder is gone


HELPERS = """
import multiprocessing, os, subprocess, sys, time
import torch
from torch.utils.data import DataLoader

HERE = {here!r}


def started(pid):
    try:
        with open(f"/proc/{{pid}}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if rest[0] in "ZX" else rest[19]  # its start time: a pid used again is another process


def idle():
    while True:
        time.sleep(1)


earlier = []
if os.path.exists(os.path.join(HERE, "pids")):
    earlier = [line.split() for line in open(os.path.join(HERE, "pids")).read().splitlines()]
with open(os.path.join(HERE, "starts"), "a") as f:
    f.write(f"{{sum(started(int(pid)) == start for pid, start in earlier)}}\\n")
helper = multiprocessing.get_context("fork").Process(target=idle, daemon=True)
helper.start()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.path.join(HERE, "pids"), "a") as f:
    for pid in (helper.pid, child.pid):
        f.write(f"{{pid}} {{started(pid)}}\\n")
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x in DataLoader(torch.randn(4000, 8), batch_size=8):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_processes_a_window_starts_are_ended_before_the_next(tmp_path, monkeypatch):
    """A daemon multiprocessing helper and a Popen child, started by the script in each fresh window's process:
    none of an earlier window's is running when a window starts (they were: 0, 2, 4, 6), and none is left."""
    script = tmp_path / "helpers.py"
    script.write_text(HELPERS.format(here=str(tmp_path)))
    findings = [{"rule": "num-workers", "forecast": {"assumptions": {"workers": "num_workers=1 (was 0)"}}}]
    exps, not_tried = plan(findings, Context(loaders=[{"num_workers": 0}], cores=2.0, free_cores=2.0))
    assert exps[0]["how"] == FRESH and exps[0]["variant"] == "num_workers=1"
    monkeypatch.chdir(tmp_path)
    lines: list = []
    v = Verifier(resolve_target(str(script), (), False), tmp_path, VerifyConfig(pairs=2, steps=5), 10_000.0,
                 lines.append)
    [e] = v.run(exps[:1], not_tried)["experiments"]
    assert e["status"] == "measured" and e["processes"] == 4, e
    assert (tmp_path / "starts").read_text().split() == ["0", "0", "0", "0"]  # A B A B
    pids = [line.split() for line in (tmp_path / "pids").read_text().splitlines()]
    assert len(pids) == 8
    for pid, start in pids:  # none runs on after perfsleuth either
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            assert rest[0] in "ZX" or rest[19] != start, pid
        except FileNotFoundError:
            pass
    log = (tmp_path / "verify" / "children.log").read_text()
    assert log.count("--- perfsleuth verify: ended 2 process(es) the script left running") == 4


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_a_busy_process_of_the_same_group_is_not_the_experiments_cpu():
    """A busy process in the window's process group that the window did not start (a helper an earlier window
    left running was one) is other processes' load: the window counts its own process tree."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # the same group as the window below

    def busy_s() -> float:
        with open(f"/proc/{busy.pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")

    try:
        time.sleep(0.3)
        before = busy_s()
        window = subprocess.run([sys.executable, "-c", (
            "import json, time\nfrom perfsleuth.verify.child import cpu_seconds\n"
            "a = cpu_seconds(); time.sleep(1.5); b = cpu_seconds(); print(json.dumps([a, b]))")],
            capture_output=True, text=True, timeout=60)
        spent = busy_s() - before
    finally:
        busy.kill()
        busy.wait()
    assert window.returncode == 0, window.stderr
    a, b = json.loads(window.stdout)
    assert spent >= 0.3, spent  # the busy process ran meanwhile (it counted as the window's before)
    assert b[1] - a[1] < 0.1, (a, b, spent)  # the window slept: none of it is its own
    assert b[0] - a[0] >= 0.3 * spent  # the machine's busy time holds the other process's
