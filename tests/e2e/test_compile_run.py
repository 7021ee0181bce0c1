"""`perfsleuth run` on real compiled CPU programs (fixtures/scripts/cpu/compiled_mlp.py): torch 2.13's
inductor builds the graphs with the system C++ compiler. Each run is a fresh process (dynamo's counters and
caches are per process); the tests share inductor's artefacts through one TORCHINDUCTOR_CACHE_DIR in a tmp dir.

- varying batch lengths, recompile limit 3: the unprofiled step compiles (not profiler distortion), the
  recorded window recompiles, gives up at the limit, and runs the model eager after it;
- `.item()` inside forward: graph breaks with dynamo's reason, no recompilation;
- fixed shapes: compiled once during start-up, no compile finding.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "fixtures" / "scripts" / "cpu" / "compiled_mlp.py"


@pytest.fixture(scope="module")
def inductor_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("inductor-cache")


def run(tmp_path: Path, cache: Path, schedule: list, *args) -> tuple[dict, dict, str]:
    """(report.json, the trace's perfsleuth metadata with what run added after the window, stderr)."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "TORCH_LOGS"}  # the facts must not need torch's logs
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    proc = subprocess.run([sys.executable, "-m", "perfsleuth", "run", *schedule, "--no-stack", "-o", str(out),
                           str(SCRIPT), "--features", "16", "--hidden", "32", *args],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import gzip

    with gzip.open(out / "trace.pt.trace.json.gz", "rt") as f:
        doc = json.load(f)
    meta = {**doc["perfsleuth"], **(doc.get("perfsleuth_final") or {})}  # as trace/model.py reads it
    return json.loads((out / "report.json").read_text()), meta, proc.stderr


def by_rule(report: dict) -> dict:
    return {f["rule"]: f for f in report["findings"]}


def test_varying_lengths_recompile_then_run_eager(tmp_path, inductor_cache):
    report, meta, _ = run(tmp_path, inductor_cache, ["--wait", "2", "--warmup", "0", "--active", "4"],
                          "--mode", "varying", "--recompile-limit", "3", "--steps", "12")
    # start-up compiles 1/0 (frame 1: forward; perfsleuth's hooks, called in the first step, are frames 0 and
    # 2), the one unprofiled step 1/1, the first recorded step 1/2, the second gives up at the limit: eager after
    ids = [(c["id"], c["phase"]) for c in meta["compile"]["compiles"] if c["id"].startswith("1/")]
    assert ids == [("1/0", "start"), ("1/1", "wait"), ("1/2", "active"), ("1/3", "active")]
    assert meta["compile"]["steps"]["wait"][0] > 0 and meta["compile"]["counters"]["recompile_limit_hits"] == 1
    m = report["measurement"]  # the one step timed before the window compiled: only the steps after it count
    assert (m["unprofiled_compile_steps"], m["before"]) == (1, None)
    assert len(meta["clock"]["after_us"]) == len(meta["compile"]["steps"]["after"]) >= m["after"]["n"] >= 1
    assert not any(meta["compile"]["steps"]["after"])  # eager after the limit: nothing compiles any more
    steps = report["steps"]
    assert [s["phase"] for s in steps] == ["compile", "compile", "steady", "steady"]
    assert "recompiling (torch.compile 1/2)" in steps[0]["phase_reason"]
    assert "(torch.compile 1/3 gave up)" in steps[1]["phase_reason"]
    found = by_rule(report)
    assert {"recompilation", "compile-fallback", "compile-in-steady-state"} <= set(found)
    rec = found["recompilation"]
    assert rec["evidence"]["recompiles"] == 2 and rec["evidence"]["compile_limit_hit"] is True
    assert rec["evidence"]["recompile_reason"] == "tensor 'x' size mismatch at index N. expected N, actual N"
    assert "A tensor's shape changed" in rec["message"] and rec["forecast"]["speedup"] > 1.25
    assert rec["severity"] == "high" and "dynamic=True" in rec["fix"]
    fb = found["compile-fallback"]
    assert fb["evidence"]["compile_eager_share"] == 1.0 and fb["evidence"]["compile_recompile_limit"] == 3
    assert fb["forecast"]["speedup"] is None and "no compiled run to compare with" in fb["forecast"]["reason"]
    assert report["findings"][0]["rule"] in ("recompilation", "compile-in-steady-state")


def test_item_in_forward_breaks_the_graph(tmp_path, inductor_cache):
    report, meta, _ = run(tmp_path, inductor_cache, ["--wait", "2", "--warmup", "1", "--active", "3"],
                          "--mode", "graph-break", "--steps", "10")
    assert "compile" not in [s["phase"] for s in report["steps"]]
    found = by_rule(report)
    gb = found["graph-breaks"]
    assert gb["evidence"]["graph_breaks_per_step"] >= 1 and gb["evidence"]["graph_break_us_per_step"] > 0
    assert gb["evidence"]["graph_break_reason"].startswith("Unsupported Tensor.item() call")
    assert "Tensor.item()" in gb["message"] and "torch.where" in gb["fix"]
    assert meta["compile"]["counters"]["graph_breaks"] >= 1
    assert not set(found) & {"recompilation", "compile-fallback", "compile-in-steady-state"}
    own = [c for c in meta["compile"]["compiles"] if c["own"]]  # perfsleuth removed its hooks: once, not the program
    assert [c["phase"] for c in own] == ["wait"] and "_global_forward_hooks" in own[0]["reason"]


def test_clean_compiled_loop_has_no_compile_finding(tmp_path, inductor_cache):
    report, meta, _ = run(tmp_path, inductor_cache, ["--wait", "2", "--warmup", "1", "--active", "3"],
                          "--mode", "clean", "--steps", "10")
    assert "compile" not in [s["phase"] for s in report["steps"]]
    assert [c["phase"] for c in meta["compile"]["compiles"] if not c["own"]] == ["start"] * 3  # pre, forward, post
    assert not set(by_rule(report)) & {"recompilation", "graph-breaks", "compile-fallback", "compile-in-steady-state"}
