"""`perfsleuth run --record-shapes` on a real CPU script with a loop of small modules (issue 39): the run times
the loop's ops batched at their recorded shapes (record/batched_probe.py), writes them into the trace, and the
batched-ops forecast takes those times; the same trace read again by `perfsleuth analyze` gives the same
forecast. The CPU peak is injected (PERFSLEUTH_CPU_PEAK): the probe is the only timing the run does."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

SCRIPT = '''
import torch, torch.nn as nn

torch.manual_seed(0)
torch.set_num_threads(1)
G, W = 16, 8


class Grouped(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(W, W) for _ in range(G))

    def forward(self, x):
        return torch.stack([torch.tanh(lin(x[:, g])) for g, lin in enumerate(self.blocks)], 1)


model = nn.Sequential(Grouped(), Grouped(), nn.Flatten(), nn.Linear(G * W, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, G, W), torch.randint(0, 10, (32,))
for _ in range(60):
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
'''


@pytest.mark.slow  # seconds: real processes (tests/README.md)
def test_the_run_times_the_loops_ops_batched_and_the_forecast_takes_them(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PERFSLEUTH_CPU_PEAK": "0.05,10", "PERFSLEUTH_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "perfsleuth", "run", "--record-shapes", "--no-stack", "--no-memory",
                           "-o", str(out), str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with gzip.open(out / "trace.pt.trace.json.gz") as f:
        probe = json.load(f)["perfsleuth_final"]["batched_probe"]
    assert probe["threads"] == 1 and probe["seconds"] > 0 and "median of 7 calls each after" in probe["source"]
    ops = {(o["name"], json.dumps(o["shapes"])): o for o in probe["ops"]}
    # two layers of 16 Linear(8, 8) over [32, 8] slices a step: 32 addmm, tanh, tanh_backward and bias sums, and
    # 32 weight-gradient mm; the input gradient's mm only in the second layer (the first's input needs none)
    addmm = ops[("aten::addmm", json.dumps([[8], [32, 8], [8, 8], [], []]))]
    # its input x[:, g]: one layer's 16 slices of a [32, 16, 8] tensor, 8 apart (strides [128, 1]): a batch of 16
    assert addmm["per_step"] == 32.0 and addmm["batch"] == 16 and addmm["ns"] > 0
    assert addmm["strides"][1] == [128, 1]
    tanh = ops[("aten::tanh", json.dumps([[32, 8]]))]
    assert tanh["per_step"] == 32.0 and tanh["batch"] == 32  # each tanh's input is whole: stacked
    assert ops[("aten::mm", json.dumps([[8, 32], [32, 8]]))]["per_step"] == 32.0
    assert ops[("aten::mm", json.dumps([[32, 8], [8, 8]]))]["per_step"] == 16.0
    [bias] = [o for o in probe["ops"] if o["name"] == "aten::sum"]
    assert bias["concrete"][1] == "[0]" and bias["per_step"] == 32.0
    report = json.loads((out / "report.json").read_text())
    [f] = [f for f in report["findings"] if f["rule"] == "tiny-ops"]
    fc = f["forecast"]
    assert fc["model"] == "batched-ops"
    said = fc["assumptions"]["whole_tensor_ops"]
    assert "measured: perfsleuth run's probe timed each batched over its recorded shapes on this machine" in said
    # the timed calls per step: the loop's addmm, tanh, tanh_backward, sum and mm (32 each, the second layer's
    # input-gradient mm 16)
    assert " 176 of the loops' " in said, said
    again = tmp_path / "again.json"
    a = subprocess.run([sys.executable, "-m", "perfsleuth", "analyze", str(out / "trace.pt.trace.json.gz"),
                        "--json", str(again)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert a.returncode == 0, a.stderr[-2000:]
    [g] = [g for g in json.loads(again.read_text())["findings"] if g["rule"] == "tiny-ops"]
    assert g["forecast"]["speedup"] == fc["speedup"] and g["forecast"]["assumptions"]["whole_tensor_ops"] == said
