"""`perfsleuth run --record-shapes` on a real CPU training script (convolutions, linear layers, batched
matmuls): the report's FLOPs per step within 10 % of torch's FlopCounterMode counting one training step of
the same model; the run's CPU peak is injected (PERFSLEUTH_CPU_PEAK), never benchmarked in a test."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torch  # noqa: E402 -- the test suite installs torch (scripts/test.sh): a missing one fails, never skips

SCRIPT = '''
import torch, torch.nn as nn

torch.manual_seed(0)
torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc1 = nn.Linear(32 * 8 * 8, 128)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        y = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        h = self.fc1(y.flatten(1)).view(-1, 2, 64)
        h = torch.bmm(h, h.transpose(1, 2)) @ h  # batched matmuls
        return self.fc2(h.mean(1))


def batch():
    return torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,))


def step(model, opt, x, y):
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()


if __name__ == "__main__":
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = batch()
    for _ in range(40):  # perfsleuth run stops it after its windows (the FLOPs step follows the after steps)
        step(model, opt, x, y)
'''


def _flop_counter_one_step(path: Path) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    spec = importlib.util.spec_from_file_location("efficiency_train", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = mod.batch()
    counter = FlopCounterMode(display=False)
    with counter:
        mod.step(model, opt, x, y)
    return counter.get_total_flops()


def test_run_flops_per_step_match_flop_counter(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PERFSLEUTH_CPU_PEAK": "0.05,10", "PERFSLEUTH_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "perfsleuth", "run", "--record-shapes", "--no-stack", "-o", str(out),
                           str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    e = report["efficiency"]
    assert e is not None, report.get("efficiency_unavailable")
    theirs = _flop_counter_one_step(script)
    matrix = sum(f["flops_per_step"] for f in e["families"] if f["family"] in ("matmul", "convolution", "attention"))
    # FlopCounterMode counts matmuls and convolutions only (no elementwise): compare those. Within 10 %, and in
    # fact exact but for the bias adds of the two addmm (16 x 128 + 16 x 10 per step), which it leaves out.
    assert abs(matrix - theirs) / theirs < 0.10, (matrix, theirs)
    assert matrix - theirs == 16 * 128 + 16 * 10
    assert e["flops_per_step"] >= matrix  # elementwise, normalisation, ... come on top
    assert e["peak_kind"] == "measured" and e["peak_flops_per_s"] == pytest.approx(0.05e12)
    assert e["peak_source"] == "given by PERFSLEUTH_CPU_PEAK"
    assert e["hfu"] is not None and e["hfu"] > 0
    assert not (tmp_path / "cache").exists()  # injected: nothing measured, nothing cached
    # MFU: the run counted one step of its own with FlopCounterMode, after the timed steps: exactly the count
    # of one step of the same model here, over the analysed steps' mean time and the same peak as HFU
    assert e["model_flops_per_step"] == theirs
    assert e["model_flops_source"] == "torch.utils.flop_counter.FlopCounterMode"
    assert e["mfu"] == pytest.approx(theirs / (e["step_time_us"] / 1e6) / 0.05e12)
    assert e["hfu"] == pytest.approx(e["flops_per_step"] / (e["step_time_us"] / 1e6) / 0.05e12)
    assert "MFU " in proc.stdout and "HFU " in proc.stdout


def test_run_without_shapes_says_why_there_is_no_mfu_and_takes_a_given_peak(tmp_path):
    """Without --record-shapes nothing is counted (and the trace says why); with --peak-tflops the peak is
    the user's, not measured (nothing cached)."""
    import gzip

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PERFSLEUTH_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PERFSLEUTH_CPU_PEAK", None)
    for args, name in ((["--no-memory"], "plain"), (["--record-shapes", "--peak-tflops", "2"], "given")):
        out = tmp_path / name
        proc = subprocess.run([sys.executable, "-m", "perfsleuth", "run", "--no-stack", *args, "-o", str(out),
                               str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        report = json.loads((out / "report.json").read_text())
        trace = next(out.glob("*.pt.trace.json.gz"))
        final = json.loads(gzip.decompress(trace.read_bytes()))["perfsleuth_final"]
        if name == "plain":
            assert report["efficiency"] is None
            assert final["model_flops"]["unavailable"] == "not counted: shapes were not recorded (--record-shapes)"
        else:
            e = report["efficiency"]
            assert e["peak_kind"] == "user" and e["peak_flops_per_s"] == 2e12
            assert e["model_flops_per_step"] == final["model_flops"]["flops_per_step"] > 0
            assert final["model_flops"]["step_s"] > 0 and final["model_flops"]["unprofiled_step_s"] > 0
            assert "peak" not in final  # given: not measured
    assert not (tmp_path / "cache").exists()


def test_a_peak_measured_on_a_busy_machine_is_not_cached(tmp_path, monkeypatch):
    """Other processes kept 1.5 cores busy while it measured (the machine's busy CPU time less this process's
    own, over the wall time): the run keeps the peak and says so; the next run measures again."""
    from perfsleuth.record import cpu_peak

    assert cpu_peak.others_cores((100.0, 2, 2), (103.5, 2, 2), own_s=0.5, wall_s=2.0) == 1.5
    assert cpu_peak.others_cores((100.0, 2, 2), (100.9, 2, 2), own_s=1.0, wall_s=2.0) == 0.0
    assert cpu_peak.others_cores(None, (1.0, 2, 2), own_s=0.5, wall_s=2.0) is None
    calls = []

    def busy_measure(threads):
        calls.append(threads)
        return {**cpu_peak._peak(0.05, 9.0, threads, "fake; other processes kept 1.5 cores busy"),
                "others_cores": 1.5}

    monkeypatch.delenv(cpu_peak.ENV, raising=False)
    monkeypatch.setenv("PERFSLEUTH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_peak, "measure", busy_measure)
    first = cpu_peak.cpu_peak(2)
    assert first["others_cores"] == 1.5 and first["max_achievable_tflops"]["matrix_fp32"] == 0.05
    cpu_peak.cpu_peak(2)
    assert calls == [2, 2] and not (tmp_path / "cpu_peaks.json").exists()


def test_cpu_peak_is_measured_once_per_machine_and_cached(tmp_path, monkeypatch):
    from perfsleuth.analysis.efficiency.peaks import checked_peak
    from perfsleuth.record import cpu_peak

    calls = []

    def fake_measure(threads):  # the test never benchmarks: the measurement is replaced
        calls.append(threads)
        return cpu_peak._peak(0.2, 12.5, threads, "fake")

    monkeypatch.delenv(cpu_peak.ENV, raising=False)
    monkeypatch.setenv("PERFSLEUTH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu_peak, "measure", fake_measure)
    first = cpu_peak.cpu_peak(2)
    again = cpu_peak.cpu_peak(2)
    other = cpu_peak.cpu_peak(1)
    assert calls == [2, 1]  # once per thread count; the second call read the cache
    assert first == again and first["max_achievable_tflops"]["matrix_fp32"] == 0.2 and first["mem_bw_gbps"] == 12.5
    assert other["threads"] == 1
    assert len(json.loads((tmp_path / "cpu_peaks.json").read_text())) == 2
    assert checked_peak(first)["kind"] == "measured"
    assert checked_peak({"max_achievable_tflops": {"matrix_fp32": -1}}) is None
    assert checked_peak({"max_achievable_tflops": {"matrix_fp32": 1}, "mem_bw_gbps": "fast"}) is None
    monkeypatch.setenv(cpu_peak.ENV, "not,numbers")
    assert cpu_peak.injected(2) is None
