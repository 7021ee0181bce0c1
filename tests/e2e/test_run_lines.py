"""Steps and lines (issue 24): `optimizer.step(closure)` is one step, the stacks window stays within its
budget, optimizer findings point at the optimizer's construction, and a finding's line is in the user's own
code, not in a framework's.

Real runs with torch on the CPU: an LBFGS trainer of time_sequence_prediction's shape
(fixtures/scripts/cpu/lbfgs.py) and a Lightning-shaped loop (a framework in a temporary site-packages folder
runs the loop and calls the user's training_step inside `optimizer.step(closure)`). Small windows keep each
run to seconds.
"""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from perfsleuth.record import step_clock
from perfsleuth.cli.main import main
from perfsleuth.facts.core import compute_facts
from perfsleuth.facts.locations import is_user_frame, library_roots
from perfsleuth.analysis.attribution import attribute
from perfsleuth.analysis.steps import find_steps
from perfsleuth.trace.model import load_trace

ROOT = Path(__file__).resolve().parents[2]
LBFGS = ROOT / "fixtures" / "scripts" / "cpu" / "lbfgs.py"
SMALL = ["--wait", "1", "--warmup", "1", "--active", "3", "--no-memory"]  # the memory window: test_run_memory.py


def cli(*args):
    result = CliRunner().invoke(main, ["run", *map(str, args)], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def line_of(path: Path, text: str) -> int:
    """The first line that starts with `text` (after its indentation)."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.strip().startswith(text))


def trace_doc(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def names(doc: dict) -> list:
    return [e.get("name", "") for e in doc["traceEvents"]]


def test_lbfgs_step_with_a_closure_is_one_step_and_the_stop_says_where(tmp_path):
    """LBFGS calls the closure (the forward and backward passes) up to max_iter=4 times a step: every recorded
    step holds one `optimizer.step(closure)` and several closure calls, not one closure call each; the line
    on stderr says where the script was stopped."""
    code, out, err = cli(*SMALL, "--no-stack", "-o", tmp_path / "o", LBFGS, "--steps", "20")
    assert code == 0, err
    at = f"lbfgs.py:{line_of(LBFGS, 'optimizer.step(closure)')} in <module>"
    assert err == f"perfsleuth: stopped the script after step 9 (profiled 3) at {at}; --full runs it to the end\n"
    assert "step 9 " not in out  # stopped inside the 10th iteration: 5 steps make the window, 4 more after it
    doc = trace_doc(tmp_path / "o" / "trace.pt.trace.json.gz")
    assert names(doc).count("Optimizer.step#LBFGS.step") == 3
    closures = names(doc).count("Optimizer.zero_grad#LBFGS.zero_grad")  # one zero_grad per closure call
    assert 6 <= closures <= 3 * 5
    assert len(doc["perfsleuth"]["clock"]["profiled_us"]) == 3
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert [s["name"] for s in report["steps"]] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    # LBFGS has no foreach or fused implementation: no fused-optimizer finding to give
    assert "fused-optimizer" not in {f["rule"] for f in report["findings"]}


def test_lbfgs_stacks_window_over_its_budget_is_one_closure_call(tmp_path, monkeypatch):
    """When one stacks step is estimated over the budget (here: every step, STACK_COST raised), the stacks
    window of an `optimizer.step(closure)` run ends when the first closure call returns, and says so in the
    companion; its per-step numbers are scaled by the closure calls of a whole step."""
    monkeypatch.setattr(step_clock, "STACK_COST", 1e9)
    code, out, err = cli(*SMALL, "-o", tmp_path / "o", LBFGS, "--steps", "20")
    assert code == 0, err
    at = f"lbfgs.py:{line_of(LBFGS, 'optimizer.step(closure)')} in <module>"
    assert err == f"perfsleuth: stopped the script after step 9 (profiled 3) at {at}; --full runs it to the end\n"
    main_doc = trace_doc(tmp_path / "o" / "trace.pt.trace.json.gz")
    calls = names(main_doc).count("Optimizer.zero_grad#LBFGS.zero_grad") / 3
    stacks = trace_doc(tmp_path / "o" / "trace.stacks.pt.trace.json.gz")
    window = stacks["perfsleuth"]["stacks_window"]
    assert window["steps"] == 1 and window["cut"] == "closure" and window["scale"] >= 2
    assert abs(window["scale"] - calls) <= 1  # the last main step's closure calls, about the mean
    assert names(stacks).count("Optimizer.zero_grad#LBFGS.zero_grad") == 1  # one closure call recorded
    assert names(stacks).count("Optimizer.step#LBFGS.step") == 1


def test_stacks_budget_sizes_the_window_from_the_main_one():
    mb = 1 << 20
    small = step_clock.StacksBudget(2, main_bytes=mb, main_steps=5, step_us=20_000.0, closure_calls=None,
                                    free_bytes=4 * mb)
    assert (small.steps, small.cut, small.scale, small.limit) == (2, None, 1.0, 4 * mb)  # 2 x 0.8 MB <= 2 MB
    mid = step_clock.StacksBudget(2, main_bytes=6 * mb, main_steps=5, step_us=20_000.0, closure_calls=None,
                                  free_bytes=4 * mb)
    assert (mid.steps, mid.cut) == (1, None)  # 4.8 MB a step over half of 6 MB: one step, no sub-step to cut at
    lbfgs = step_clock.StacksBudget(2, main_bytes=100 * mb, main_steps=5, step_us=40e6, closure_calls=20,
                                    free_bytes=4 * mb)
    assert (lbfgs.steps, lbfgs.cut, lbfgs.scale) == (1, "closure", 20.0)
    assert lbfgs.metadata() == {"steps": 1, "cut": "closure", "scale": 20.0, "limit_bytes": 100 * mb,
                                "estimated_step_bytes": 80 * mb}
    long = step_clock.StacksBudget(2, main_bytes=mb, main_steps=5, step_us=2e6, closure_calls=1, free_bytes=4 * mb)
    assert (long.steps, long.cut) == (1, None)  # long steps: one, however small


FRAMEWORK = '''"""A training framework in the shape of Lightning: its Trainer runs the loop and calls the user's
training_step inside optimizer.step(closure); it reads the loss for its progress bar itself."""
import torch


class LightningModule(torch.nn.Module):
    pass


class Trainer:
    def __init__(self, max_steps):
        self.max_steps, self.logged = max_steps, []

    def fit(self, module, batches):
        optimizer = module.configure_optimizers()
        for _, batch in zip(range(self.max_steps), batches):
            self._step(module, optimizer, batch)

    def _step(self, module, optimizer, batch):
        def closure():
            loss = module.training_step(batch)
            optimizer.zero_grad()
            loss.backward()
            return loss
        loss = optimizer.step(closure)
        self.logged.append(loss.detach().item())
'''

USER_SCRIPT = '''import os
import sys

sys.path.insert(0, os.path.abspath(sys.argv[1]))  # the framework's site-packages
import fakelight  # noqa: E402
import torch  # noqa: E402


class Model(fakelight.LightningModule):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(32))

    def training_step(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x.pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3, foreach=False)


fakelight.Trainer(max_steps=40).fit(Model(), (torch.randn(4, 8) for _ in range(1000)))
'''


@pytest.fixture
def lightning_like(tmp_path):
    site = tmp_path / "env" / "site-packages"
    (site / "fakelight").mkdir(parents=True)
    (site / "fakelight" / "__init__.py").write_text(FRAMEWORK)
    (tmp_path / "proj").mkdir()
    script = tmp_path / "proj" / "train.py"
    script.write_text(USER_SCRIPT)
    return script, site


def test_lightning_like_loop_points_at_the_users_code_not_the_framework(lightning_like, tmp_path):
    """The framework's frames are written relative to its site-packages folder (`fakelight/__init__.py(19):
    _step`), like lightning's and transformers': they are not the user's. Every location a finding or an
    evidence table names is in train.py; the optimizer finding points at the `Adam(...)` line in
    configure_optimizers, where the fix goes."""
    script, site = lightning_like
    # as a user runs it, in a process of its own: the profiler fixes the folders it writes frames relative to
    # at its first stacks recording in a process (an earlier test's would do here)
    proc = subprocess.run([sys.executable, "-m", "perfsleuth", "run", *SMALL, "-o", str(tmp_path / "o"), "train.py",
                           "../env/site-packages"], cwd=script.parent, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    fused = next(f for f in report["findings"] if f["rule"] == "fused-optimizer")
    assert fused["locations"][0] == {"file": "train.py", "line": line_of(script, "return torch.optim.Adam("),
                                     "function": "configure_optimizers", "count": 1, "line_kind": "construction"}
    located = [loc for f in report["findings"] for loc in f["locations"]]
    assert located and all(loc["file"] == "train.py" for loc in located)
    meta = trace_doc(tmp_path / "o" / "trace.pt.trace.json.gz")["perfsleuth"]
    assert "fakelight" in meta["code"]["library_roots"] and meta["code"]["user_dir"] == str(script.parent)
    assert meta["optimizers"] == [{"class": "Adam", "file": "train.py", "line": line_of(script, "return torch.optim.Adam("),
                                   "function": "configure_optimizers", "foreach": False, "fused": None, "count": 1,
                                   "zero_grad": []}]  # zero_grad is called by the framework, not by train.py
    # the companion's own tables: the framework's frames are there, and no location names them
    stacks = load_trace(tmp_path / "o" / "trace.stacks.pt.trace.json.gz")
    framework = {n for n in stacks.events["name"].astype(str).unique() if n.startswith("fakelight/")}
    assert framework and not any(is_user_frame(n, library_roots(stacks)) for n in framework)
    assert all(is_user_frame(n) for n in framework)  # as a relative path alone they would pass for the user's
    steps = find_steps(stacks)
    facts = compute_facts(stacks, steps, attribute(stacks, steps))
    rows = [r for t in facts.tables.values() if isinstance(t, list) for r in t if isinstance(r, dict) and "file" in r]
    assert rows and {r["file"] for r in rows} == {"train.py"}


def test_optimizer_findings_point_at_the_construction_and_the_zero_grad_call(tmp_path):
    """many_params.py: Adam(foreach=False) built in toy.optimizer, zero_grad(set_to_none=False) called in
    toy.train: fused-optimizer at the construction, zero-grad at the call and then the construction."""
    scripts = ROOT / "fixtures" / "scripts" / "cpu"
    toy = scripts / "toy.py"
    code, out, err = cli(*SMALL, "--no-stack", "-o", tmp_path / "o", scripts / "many_params.py", "--zero-grad-fill")
    assert code == 0, err
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    by_rule = {f["rule"]: f for f in report["findings"]}
    built = {"file": "toy.py", "line": line_of(toy, "return cls(params, lr="), "function": "optimizer", "count": 1,
             "line_kind": "construction"}
    assert by_rule["fused-optimizer"]["locations"] == [built]
    call = {"file": "toy.py", "line": line_of(toy, "opt.zero_grad(set_to_none="), "function": "train", "count": 1,
            "line_kind": "call"}
    assert by_rule["zero-grad"]["locations"] == [call, built]
