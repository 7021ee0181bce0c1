"""`perfsleuth run` on the CPU programs with known causes (fixtures/scripts/cpu/README.md): each gets
the finding that names its cause, at the source line it comes from, and its fixed variant does not.

Real torch on the CPU, in-process through click's CliRunner, small windows (wait 1, warmup 1, active 2, no
unprofiled steps after the window: the stacks window, the source lines' only source, comes right after it and
the 8-step scripts reach it).
"""

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from perfsleuth.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "fixtures" / "scripts" / "cpu"
# no memory window (tests/test_run_memory.py): with it, the stacks window would come 4 steps later than 8 allow
SMALL = ["--wait", "1", "--warmup", "1", "--active", "2", "--after", "0", "--no-memory"]


def run(tmp_path, script: str, *args) -> tuple[dict, str]:
    out = tmp_path / "-".join([script.replace(".py", ""), *[a.strip("-") for a in args]])
    result = CliRunner().invoke(main, ["run", *SMALL, "-o", str(out), str(SCRIPTS / script), "--steps", "8", *args],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads((out / "report.json").read_text()), result.stdout


def by_rule(report: dict) -> dict:
    return {f["rule"]: f for f in report["findings"]}


def test_tiny_ops_script(tmp_path):
    """~320 scalar ops per step in a Python loop: tiny-ops, pointing at the loop's function."""
    report, out = run(tmp_path, "tiny_ops.py")
    f = by_rule(report)["tiny-ops"]
    assert f["evidence"]["ops_top_per_step"] >= 800 and f["evidence"]["op_top_median_us"] <= 20
    loops = [loc for loc in f["locations"] if loc["function"] == "penalty_loop"]
    assert loops and loops[0]["file"].endswith("tiny_ops.py") and loops[0]["line"] == 14
    assert loops[0]["line_kind"] == "function"
    assert "The place that runs the most of the small ops: `penalty_loop` (`tiny_ops.py:14`" in f["message"]
    vectorized, _ = run(tmp_path, "tiny_ops.py", "--vectorized")
    assert "tiny-ops" not in by_rule(vectorized)


def test_module_loop_script(tmp_path):
    """96 Linear(8, 8) per layer in a Python loop reads kernel-bound on the CPU (time inside ops), but the
    ops are dispatch overhead: tiny-ops says so; the batched rewrite does not get it."""
    report, _ = run(tmp_path, "module_loop.py")
    assert "tiny-ops" in by_rule(report) and "fused-optimizer" in by_rule(report)  # SGD over 386 tensors
    assert by_rule(report)["tiny-ops"]["evidence"]["ops_top_per_step"] >= 1500
    batched, _ = run(tmp_path, "module_loop.py", "--batched")
    assert "tiny-ops" not in by_rule(batched)


def test_wide_members_script(tmp_path):
    """Eight wide encoders (long matmuls) and a per-parameter RMSprop (issue 39's MultiBench program, small): the
    only loop of short ops is the optimizer's, so fused-optimizer is the finding and tiny-ops is not (it had led the
    report without a number, advising to stack the encoders, which measured 0.90x on the program it came from)."""
    from perfsleuth.api import analyze_file
    from perfsleuth.facts.core import compute_facts

    report, _ = run(tmp_path, "wide_members.py")
    assert "tiny-ops" not in by_rule(report)
    f = by_rule(report)["fused-optimizer"]
    assert f["evidence"]["optimizer_name"] == "RMSprop" and f["evidence"]["optimizer_ops_per_step"] >= 36
    trace = next(p for p in tmp_path.rglob("trace.pt.trace.json.gz"))
    a = analyze_file(trace)
    facts = compute_facts(a.trace, a.steps, a.breakdown)
    # what the rule saw: enough small ops and their gaps to fire before (>= 0.1 of the step), nearly all of them
    # inside the optimizer's per-parameter loop
    assert facts["tiny_ops_optimizer_only"] is True and facts["tiny_ops_share"] >= 0.1
    assert facts["tiny_ops_outside_optimizer_share"] < 0.1


def test_rnn_cell_script(tmp_path):
    """A GRUCell loop over 40 time steps on embedded tokens, stacked: the iterations depend on each other through
    the hidden state, so tiny-ops has no batching forecast (it had 4.65x, where nn.GRU runs about 1.05x) and its fix
    is the fused module."""
    from perfsleuth.api import analyze_file
    from perfsleuth.facts.core import compute_facts

    report, _ = run(tmp_path, "rnn_cell.py")
    f = by_rule(report)["tiny-ops"]
    assert (f["forecast"]["kind"], f["forecast"]["speedup"]) == ("none", None)
    assert f["forecast"]["reason"].startswith("the loops run a recurrent cell")
    assert "They run a recurrent cell over time steps" in f["message"] and "nn.GRU(input, hidden" in f["fix"]
    a = analyze_file(next(tmp_path.rglob("trace.pt.trace.json.gz")))
    facts = compute_facts(a.trace, a.steps, a.breakdown)
    assert facts["tiny_ops_recurrent"] is True and facts["tiny_ops_sequential"] is False


def test_oversubscribed_script(tmp_path):
    """torch threads = the cores, plus 2 DataLoader workers: more busy threads than cores, as a fact."""
    cores = len(os.sched_getaffinity(0))
    report, out = run(tmp_path, "oversubscribed.py", "--threads", str(cores))
    f = by_rule(report)["cpu-threads"]
    assert f["evidence"]["has_run_metadata"] is True and f["evidence"]["cpu_cores"] == cores
    assert f["evidence"]["cpu_threads_wanted"] == cores + 2
    # issue 37 item 4: no number (what one thread does to each op is not in the trace), the reason names --verify;
    # the severity is the rule's own (issue 24: without a forecast, at most medium)
    assert (f["forecast"]["kind"], f["forecast"]["speedup"]) == ("none", None)
    assert f["forecast"]["reason"].endswith("`perfsleuth run --verify` measures it")
    assert f["severity"] == "medium"
    assert f"asks for {cores + 2} busy threads on {cores} cores" in f["message"]
    assert "not checked: cpu-threads" not in out


def test_many_params_script(tmp_path):
    """Adam(foreach=False) over 194 small parameters on the CPU: fused-optimizer says foreach=True."""
    report, _ = run(tmp_path, "many_params.py")
    f = by_rule(report)["fused-optimizer"]
    assert f["evidence"]["optimizer_name"] == "Adam" and f["evidence"]["optimizer_ops_per_step"] >= 194
    assert "foreach=True" in f["fix"] and "pin_memory" not in f["fix"] + f["message"]
    fixed, _ = run(tmp_path, "many_params.py", "--foreach")
    assert "fused-optimizer" not in by_rule(fixed)


def test_python_dataset_script_points_at_getitem(tmp_path):
    """num_workers=0 with a pure-Python Dataset: num-workers, at PythonHeavyDataset.__getitem__ in toy.py,
    whose line is the function's first line (the frame started while tracing)."""
    report, out = run(tmp_path, "python_dataset.py")
    f = by_rule(report)["num-workers"]
    assert f["locations"][0] == {"file": "toy.py", "line": 55, "function": "__getitem__",
                                 "count": f["locations"][0]["count"], "line_kind": "function"}
    assert "pin_memory" not in f["fix"] and "per GPU" not in f["fix"] and "The training loop waits" in f["message"]
    assert "The loading time is spent in `__getitem__` (`toy.py:55`" in f["message"]
    # what fills it (issue 37): the Dataset hashes tokens in pure Python, so Python leads
    assert re.search(r"of the loader's time; inside it: Python \d+%", f["message"]), f["message"]
    # and dataloader-slow names that Python as the cause, with no forecast (issue 37)
    slow = by_rule(report)["dataloader-slow"]
    assert slow["evidence"]["loader_cause"] == "Python" and slow["forecast"]["kind"] == "none"
    assert "of the loader's time is the Dataset's own Python in `PythonHeavyDataset.__getitem__`" in slow["message"]
    assert "at toy.py:55 in __getitem__ (first line of the function)" in out
    assert report["degree"] == "high" and report["verdict_text"].startswith("dataloader-bound: ")


def test_decoding_dataset_names_decoding_with_a_caching_forecast(tmp_path):
    """num_workers=0 and a Dataset that decodes a PNG held in memory in every __getitem__ (issue 37: the
    loader's real cause): dataloader-slow says decoding, at PngDataset.__getitem__, with the split from the
    stacks window and a forecast of caching the decoded samples; num-workers, on the same loader, says the
    same loader time. Decoded once (--cached), the loader no longer fills the step."""
    report, out = run(tmp_path, "decode_dataset.py")
    found = by_rule(report)
    f = found["dataloader-slow"]
    ev = f["evidence"]
    assert ev["loader_cause"] == "decoding" and ev["loader_cause_share"] >= 0.5, ev
    assert f["ceiling"]["saving_us"] == ev["loader_cause_us_per_step"]
    line = (SCRIPTS / "decode_dataset.py").read_text().split("\n").index("    def __getitem__(self, i):") + 1
    assert f["locations"][0]["function"] == "__getitem__" and f["locations"][0]["line"] == line
    waits = re.match(r"The training loop waits (\S+ \S+) per step", f["message"])
    assert waits, f["message"]
    assert f"of the loader's time is decoding in `PngDataset.__getitem__`" in f["message"]
    assert "It comes from `__getitem__` (`" in f["message"] and f"decode_dataset.py:{line}`)" in f["message"]
    fc = f["forecast"]
    assert (fc["kind"], fc["model"]) == ("forecast", "dataloader-sample-work"), fc
    assert fc["speedup"] > 1.2 and fc["assumptions"]["fix"].startswith("the decoded samples cached")
    assert "as the stacks window measured it" in fc["assumptions"]["removed"]
    assert "GPU" not in f["message"] + f["fix"] and "self.decoded[i]" in f["fix"]
    # one loader time: num-workers says the same one
    assert found["num-workers"]["message"].startswith(f"The training loop waits {waits.group(1)} per step")
    # ordered by their numbers
    rank = [x["rule"] for x in report["findings"]]
    other = found["num-workers"]["forecast"].get("saving_us") or 0.0
    assert (rank.index("dataloader-slow") < rank.index("num-workers")) == (fc["saving_us"] >= other)
    assert "dataloader-slow" in out
    cached, _ = run(tmp_path, "decode_dataset.py", "--cached")
    assert "dataloader-slow" not in by_rule(cached)
