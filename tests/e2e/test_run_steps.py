"""`perfsleuth run` and `perfsleuth.profile()` keep the user's program whole, find steps in loops without an
optimizer or a DataLoader, analyse a script without any step as one window, and say what they did.

Real scripts (fixtures/scripts/cpu) with torch on the CPU: a multi-epoch run that saves a checkpoint after
its loop, an inference loop over tensors in memory, an update rule without torch.optim, one computation
with no step at all. Small windows keep each run to seconds.
"""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from click.testing import CliRunner
from perfsleuth.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "fixtures" / "scripts" / "cpu"
SMALL = ["--wait", "1", "--warmup", "1", "--active", "3"]


def cli(*args):
    result = CliRunner().invoke(main, ["run", *map(str, args)], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def python(*args, cwd, env=None):
    """A script run the way a user runs it; torch's own `USDT:` trace lines on stderr are dropped, and its C++ line
    when the memory window frees a CPU block allocated before it (docs/run.md, "Memory")."""
    proc = subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=env)
    err = "".join(line for line in proc.stderr.splitlines(keepends=True)
                  if not line.startswith("USDT:") and "Memory block of unknown size was allocated before" not in line)
    return proc.returncode, proc.stdout, err


def line_of(path: Path, text: str) -> int:
    """The first line of `path` that starts with `text` (after its indentation)."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.strip().startswith(text))


def report_in(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text())


# --- the user's code runs whole -----------------------------------------------------------------------
def test_profile_runs_every_epoch_and_the_code_after_the_loop(tmp_path):
    """The issue's case: `with perfsleuth.profile()` around a multi-epoch loop. Every epoch trains, the
    checkpoint after the loop is written, nothing is said on stderr, and the report covers the window."""
    ckpt = tmp_path / "ckpt.pt"
    code, out, err = python(SCRIPTS / "epochs.py", "--epochs", "6", "--checkpoint", ckpt, "--profile", "whole",
                            cwd=tmp_path)
    assert code == 0, err
    assert out.startswith(f"trained 6 of 6 epochs\nsaved {ckpt}\nperfsleuth ")
    # 3 recorded steps; the first may be set apart as warm-up on a busy machine (docs/attribution.md#steady-state)
    assert "steps: 3 (ProfilerStep)" in out or "steps: 2 steady + 1 warm-up (ProfilerStep)" in out
    assert "verdict: " in out
    assert err == ""
    state = torch.load(ckpt)
    assert sorted(state) == ["0.bias", "0.weight", "2.bias", "2.weight", "4.bias", "4.weight"]
    assert not list(tmp_path.glob("perfsleuth-*"))  # the temporary trace folder went with the process


def test_profile_stop_after_window_is_asked_for_and_said(tmp_path):
    ckpt = tmp_path / "ckpt.pt"
    code, out, err = python(SCRIPTS / "epochs.py", "--epochs", "6", "--checkpoint", ckpt, "--profile", "stop",
                            cwd=tmp_path)
    assert code == 0, err
    # 4 batches an epoch; the window (1 + 1 + 3 boundaries: the first next(), then each optimizer step)
    # completes at the 4th optimizer step, the end of the first epoch; 4 steps run unprofiled after it, the
    # memory window's 3, one step in which no profiler starts, and the stacks window's 2 steps follow
    # (docs/run.md#measurement-without-distorting), inside the fourth epoch
    assert err == ("perfsleuth: stopped the profiled block after step 15 (3 profiled), as stop_after_window=True "
                   "asks: the rest of the `with` block did not run\n")
    assert out.startswith(f"trained 3 of 6 epochs\nsaved {ckpt}\n") and ckpt.is_file()


def test_run_stops_after_the_window_and_says_so_and_full_runs_it_whole(tmp_path):
    ckpt = tmp_path / "ckpt.pt"
    code, out, err = cli(*SMALL, "--no-stack", "-o", tmp_path / "o", SCRIPTS / "epochs.py", "--epochs", "6",
                         "--checkpoint", ckpt)
    assert code == 0, err
    assert "trained" not in out and not ckpt.exists()
    at = f"epochs.py:{line_of(SCRIPTS / 'epochs.py', 'opt.step()')} in <module>"  # where the script was
    # 5 boundaries make the window, 4 unprofiled steps follow, then the memory window's 3
    assert err == f"perfsleuth: stopped the script after step 12 (profiled 3) at {at}; --full runs it to the end\n"
    code, out, err = cli(*SMALL, "--no-stack", "--full", "-o", tmp_path / "full", SCRIPTS / "epochs.py",
                         "--epochs", "6", "--checkpoint", ckpt)
    assert code == 0, err
    assert out.startswith(f"trained 6 of 6 epochs\nsaved {ckpt}\n") and ckpt.is_file() and err == ""
    assert len(report_in(tmp_path / "full")["steps"]) == 3


# --- steps without an optimizer or a DataLoader ---------------------------------------------------------
def test_inference_loop_over_tensors_gets_steps_from_the_model_call(tmp_path):
    code, out, err = cli(*SMALL, "-o", tmp_path / "o", SCRIPTS / "infer_tensors.py", "--steps", "16")
    assert code == 0, err
    # 5 boundaries make the window; 4 unprofiled steps follow, then the memory window's 3, one step in which no
    # profiler starts, and the stacks window's 2
    at = f"infer_tensors.py:{line_of(SCRIPTS / 'infer_tensors.py', 'scores = model(x)')} in <module>"
    assert err == f"perfsleuth: stopped the script after step 15 (profiled 3) at {at}; --full runs it to the end\n"
    rep = report_in(tmp_path / "o")
    assert rep["steps_source"] == "ProfilerStep"
    assert [s["name"] for s in rep["steps"]] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert rep["summary"]["time_share"]["dataloader"] == 0.0
    assert rep["trace"]["stacks_trace"] is not None  # the scheduled window, not the light whole-run recording
    assert not any("one window" in w for w in rep["warnings"])
    code, out, err = cli(*SMALL, "--full", "--no-stack", "-o", tmp_path / "full", SCRIPTS / "infer_tensors.py",
                         "--steps", "12")
    assert code == 0 and out.startswith("labelled 384 samples\n") and err == ""


def test_custom_update_rule_gets_steps_from_the_model_call_not_the_loss_module(tmp_path):
    code, out, err = cli(*SMALL, "--full", "-o", tmp_path / "o", SCRIPTS / "custom_update.py", "--steps", "10")
    assert code == 0, err
    assert out.startswith("done, last loss ")
    rep = report_in(tmp_path / "o")
    assert [s["name"] for s in rep["steps"]] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    # one step = one iteration: the forward (3 Linear layers: 3 addmm), the loss, the backward and the
    # hand-written update (one sub_ per parameter: 6). CrossEntropyLoss is a module too, called after the
    # model each iteration: were it a boundary, each iteration would be cut in two.
    with gzip.open(tmp_path / "o" / "trace.pt.trace.json.gz", "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    for step in rep["steps"]:
        win = next(e for e in events if e["name"] == step["name"])
        inside = [e["name"] for e in events if e.get("cat") == "cpu_op" and win["ts"] <= e["ts"] < win["ts"] + win["dur"]]
        assert (inside.count("aten::addmm"), inside.count("aten::sub_")) == (3, 6), step["name"]


def test_script_without_any_step_is_analysed_as_one_window(tmp_path):
    code, out, err = cli(*SMALL, "-o", tmp_path / "o", SCRIPTS / "one_shot.py")
    assert code == 0, err
    assert out.startswith("done, norm ")
    assert err == "perfsleuth: no step boundary in the script: the report covers the whole run as one window\n"
    rep = report_in(tmp_path / "o")
    assert rep["steps_source"] == "whole-trace" and len(rep["steps"]) == 1
    assert rep["trace"]["has_stacks"] is False
    ops = {o["name"]: o["count"] for o in rep["top_ops"]}
    assert ops["aten::mm"] == 12 and "aten::linalg_solve" in ops  # the whole computation is in the window
    assert rep["warnings"] == [
        "no step boundary was seen (no optimizer.step(), DataLoader batch, repeated model call or prof.step()): "
        "everything profiled is analysed as one window, recorded without Python stacks or input shapes"]
    assert "steps: 1 (whole-trace)" in out and "warning: no step boundary was seen" in out


def test_no_fallback_window_records_nothing_before_the_first_step(tmp_path):
    code, out, err = cli(*SMALL, "--no-fallback-window", "-o", tmp_path / "o", SCRIPTS / "one_shot.py")
    assert code == 1 and out.startswith("done, norm ")
    assert err.startswith("perfsleuth: no report: the script saw no step boundary. Steps come from ")
    code, out, err = cli(*SMALL, "--no-fallback-window", "--no-stack", "-o", tmp_path / "o2", SCRIPTS / "compute_mlp.py",
                         "--steps", "8", "--hidden", "64")
    assert code == 0 and len(report_in(tmp_path / "o2")["steps"]) == 3  # steps are found as before


# --- perfsleuth run without torch ----------------------------------------------------------------------
def test_run_without_torch_is_one_line_naming_what_to_install(tmp_path):
    """A real interpreter in which `import torch` fails (a sitecustomize that blocks it, as on a machine
    without PyTorch): one line, exit 2; `analyze` still works there."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _NoTorch())\n")
    env = {**os.environ, "PYTHONPATH": str(shim)}
    code, out, err = python("-c", "import torch", cwd=tmp_path, env=env)
    assert code == 1 and "No module named 'torch'" in err  # the shim works
    code, out, err = python("-m", "perfsleuth", "run", SCRIPTS / "one_shot.py", cwd=tmp_path, env=env)
    assert code == 2 and out == ""
    assert err == ("perfsleuth: error: perfsleuth run needs PyTorch, which is not installed: pip install torch "
                   "(on Linux that is the CUDA build; the CPU-only one: pip install torch --index-url "
                   "https://download.pytorch.org/whl/cpu)\n")
    code, out, err = python("-m", "perfsleuth", "analyze", ROOT / "fixtures/traces/cpu/eval_loop.pt.trace.json.gz",
                            cwd=tmp_path, env=env)
    assert code == 0 and "verdict: DATALOADER-BOUND" in out


# --- paths stay true ------------------------------------------------------------------------------------
def test_report_paths_are_absolute_so_a_later_diff_names_the_real_file(tmp_path, monkeypatch):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(work)
    code, out, err = cli(*SMALL, "--no-stack", "--no-memory", "-o", "prof", SCRIPTS / "compute_mlp.py", "--steps", "8",
                         "--hidden", "64", "--batch-size", "4")
    assert code == 0, err
    assert out.startswith("perfsleuth 0.1.0 — prof/trace.pt.trace.json.gz\n")  # shown relative to here
    rep = report_in(work / "prof")
    assert rep["trace"]["path"] == str(work / "prof" / "trace.pt.trace.json.gz")
    monkeypatch.chdir(elsewhere)
    result = CliRunner().invoke(main, ["diff", str(work / "prof" / "report.json"), str(work / "prof" / "report.json")],
                                catch_exceptions=False)
    assert result.exit_code == 0
    first = result.stdout.splitlines()[0]
    assert first == f"perfsleuth diff — base: {work / 'prof' / 'trace.pt.trace.json.gz'}"
    assert Path(first.split("base: ")[1]).is_file()
