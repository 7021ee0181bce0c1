"""The GPU scenario scripts run on CPU (small shapes), and record.py writes a profiler trace whose
Python frame for the `.item()` call is the one the synthetic sync_bound trace uses."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from fixtures.synth import scenarios as S

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_sync_bound_script_runs_on_cpu():
    out = _run(["fixtures/scripts/gpu/sync_bound.py", "--device", "cpu", "--steps", "3"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("sync_bound: 3 steps on cpu, ")


def test_record_writes_the_frames_the_synthetic_trace_names(tmp_path):
    out = _run(["-m", "fixtures.scripts.gpu.record", str(tmp_path), "sync_bound", "--device", "cpu"])
    assert out.returncode == 0, out.stderr
    doc = json.loads(gzip.open(tmp_path / "sync_bound.pt.trace.json.gz").read())
    events = doc["traceEvents"]
    steps = [e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")]
    assert steps == [f"ProfilerStep#{n}" for n in range(2, 7)]
    frames = {e["args"]["Python id"]: e["name"] for e in events if e.get("cat") == "python_function"}
    parents = [frames.get(e["args"]["Python parent id"]) for e in events if e.get("cat") == "python_function"
               and e["name"].startswith("<built-in method item of Tensor object at 0x")]
    assert parents.count(S.SYNC_STEP_FRAME) == 4 * 5  # four micro-batches in each of the five active steps
    assert {S.SYNC_BOOKKEEPING_FRAME, S.SYNC_RUN_FRAME} <= set(frames.values())
