"""Which ops count for a step's FLOPs on a GPU: those of the steady steps' own (host) annotations, even
when the host runs ahead of the device and a step's window, extended to its device work, opens after
its ops were launched (fixtures/traces/real/mi300_resnet_act_checkpoint)."""

from __future__ import annotations

import pytest

from perfsleuth.api import analyze_path
from perfsleuth.config import Config
from tracebuilder import TraceBuilder

M, N, K = 256, 512, 1024
ADDMM = {"Input Dims": [[N], [M, K], [K, N], [], []], "Input type": ["c10::BFloat16"] * 3 + ["Scalar"] * 2,
         "Concrete Inputs": ["", "", "", "1", "1"]}
ADDMM_FLOPS = 2 * M * N * K + M * N


def test_a_host_ahead_of_its_device_still_counts_each_steps_ops(tmp_path):
    """Five steps whose ops all run on the host before the device starts the first one's kernel: the
    first step's window stretches over every host op; steps 2-5 (steady) open after them. Their ops,
    in their own host windows, count: one addmm per step, its kernel's 250 µs."""
    tb = TraceBuilder()
    for n in range(1, 6):
        t0 = n * 100
        tb.step(n, t0, 90)
        tb.op("aten::addmm", t0 + 10, 50, **ADDMM)
        tb.launch("gemm", host=(t0 + 20, 5), device=(2000 + n * 300, 250))
    d = analyze_path(tb.write(tmp_path / "t.json")).to_dict()
    assert [s["phase"] for s in d["steps"]] == ["warmup"] + ["steady"] * 4
    assert d["steps"][1]["start_us"] == 2450.0  # after every host op
    e = d["efficiency"]
    assert e is not None, d.get("efficiency_unavailable")
    assert e["flops_per_step"] == ADDMM_FLOPS
    (op,) = e["ops"]
    assert (op["name"], op["count"], op["time_us"]) == ("aten::addmm", 4, 250.0)
    assert e["step_time_us"] == 300.0
    assert e["modelled_time_share"] == pytest.approx(1.0)


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_mi300_activation_checkpointing_trace_has_its_flops(real_traces):
    """The MI300X ResNet trace (DDP, activation checkpointing): the host is two steps ahead; steps 16
    and 17 are steady. Per step 39 forward convolutions (the checkpointed ones run twice) and 20
    backward ones, in bf16 against the MI300X's dense 1307.4 TFLOP/s."""
    r = analyze_path(real_traces / "mi300_resnet_act_checkpoint.json.gz",
                     Config(efficiency_top_n=100)).to_dict()
    e = r["efficiency"]
    assert e is not None, r.get("efficiency_unavailable")
    assert e["flops_per_step"] == 140_899_768_191
    assert e["precision"] == "bf16" and e["peak_name"] == "Instinct MI300X"
    counts = {}
    for o in e["ops"]:
        counts[o["name"]] = counts.get(o["name"], 0) + o["count"]
    assert counts["aten::convolution"] == 78 and counts["aten::convolution_backward"] == 40
    conv = next(f for f in e["families"] if f["family"] == "convolution")
    assert conv["flops_per_step"] == 140_364_349_440
