"""The efficiency section (facts/efficiency.py, analysis/efficiency/roofline.py) on hand-built traces with
exact numbers, and on the Qwen H100 trace against TraceLens's per-op kernel times."""

from __future__ import annotations

import ast
import csv
from pathlib import Path

import pytest

from perfsleuth.api import analyze_path
from perfsleuth.config import Config
from tracebuilder import TraceBuilder

TRACELENS = Path(__file__).resolve().parents[2] / "fixtures" / "tracelens" / "h100_qwen"
BF16 = "c10::BFloat16"
M, N, K = 256, 512, 1024
ADDMM = {"Input Dims": [[N], [M, K], [K, N], [], []], "Input type": [BF16] * 3 + ["Scalar"] * 2,
         "Concrete Inputs": ["", "", "", "1", "1"]}
ADDMM_FLOPS = 2 * M * N * K + M * N
ADDMM_BYTES = (M * K + K * N + M * N + N) * 2
RELU = {"Input Dims": [[1024, 1024]], "Input type": [BF16], "Concrete Inputs": [""]}
CLAMP = {"Input Dims": [[1024, 1024], []], "Input type": [BF16, "Scalar"], "Concrete Inputs": ["", "0"]}


def _gpu_trace(tb: TraceBuilder, shapes: bool = True) -> TraceBuilder:
    for n, t0 in ((1, 0), (2, 1000)):
        tb.step(n, t0, 1000)
        tb.op("aten::linear", t0 + 10, 200)  # composite: not counted, its addmm is
        tb.op("aten::addmm", t0 + 20, 150, **(ADDMM if shapes else {}))
        tb.launch("sm80_xmma_gemm_bf16bf16", host=(t0 + 30, 5), device=(t0 + 100, 100))
        tb.op("aten::relu", t0 + 300, 50, **(RELU if shapes else {}))
        tb.op("aten::clamp_min", t0 + 305, 40, **(CLAMP if shapes else {}))  # inside relu: counted once
        tb.launch("elementwise_kernel", host=(t0 + 310, 5), device=(t0 + 320, 10))
        tb.op("aten::cat", t0 + 400, 50)  # no shapes recorded for it: unmodelled
        tb.launch("CatArrayBatchedCopy", host=(t0 + 410, 5), device=(t0 + 420, 50))
    return tb


def _efficiency(tb: TraceBuilder, tmp_path, config=None) -> dict:
    data = analyze_path(tb.write(tmp_path / "t.json"), config).to_dict()
    return data


def test_gpu_trace_exact_numbers(tmp_path):
    d = _efficiency(_gpu_trace(TraceBuilder()), tmp_path)
    e = d["efficiency"]
    relu_n = 1024 * 1024
    assert e["flops_per_step"] == ADDMM_FLOPS + relu_n
    assert e["bytes_per_step"] == ADDMM_BYTES + 2 * relu_n * 2
    assert e["modelled_time_share"] == pytest.approx(110 / 160)
    assert e["precision"] == "bf16"
    assert e["peak_flops_per_s"] == 312e12 and e["peak_bytes_per_s"] == 2039e9  # A100 SXM 80GB, dense
    step_s = d["summary"]["step_time_us"]["mean"] / 1e6
    assert e["step_flops_per_s"] == pytest.approx((ADDMM_FLOPS + relu_n) / step_s)
    assert e["hfu"] == pytest.approx((ADDMM_FLOPS + relu_n) / step_s / 312e12)
    ops = {o["name"]: o for o in e["ops"]}
    assert set(ops) == {"aten::addmm", "aten::relu"}
    mm = ops["aten::addmm"]
    assert (mm["count"], mm["flops"], mm["bytes"], mm["time_us"]) == (2, ADDMM_FLOPS, ADDMM_BYTES, 100.0)
    roof = max(ADDMM_FLOPS / 312e12, ADDMM_BYTES / 2039e9)
    assert mm["pct_of_roofline"] == round(roof / 100e-6, 4)
    assert mm["bound"] == ("compute" if ADDMM_FLOPS / 312e12 > ADDMM_BYTES / 2039e9 else "memory")
    relu = ops["aten::relu"]
    assert relu["bound"] == "memory" and relu["time_us"] == 10.0
    assert relu["pct_of_roofline"] == round(2 * relu_n * 2 / 2039e9 / 10e-6, 4)


def test_no_shapes_says_record_shapes(tmp_path):
    d = _efficiency(_gpu_trace(TraceBuilder(), shapes=False), tmp_path)
    assert d["efficiency"] is None
    assert "record_shapes=True" in d["efficiency_unavailable"]


def test_unknown_device_gets_no_percentages(tmp_path):
    tb = _gpu_trace(TraceBuilder())
    doc = tb.build()
    doc["deviceProperties"][0]["name"] = "Imaginary GPU 9000"
    path = tmp_path / "t.json"
    path.write_text(__import__("json").dumps(doc))
    e = analyze_path(path).to_dict()["efficiency"]
    assert e["flops_per_step"] == ADDMM_FLOPS + 1024 * 1024
    assert e["peak_flops_per_s"] is None and e["hfu"] is None
    assert all(o["pct_of_roofline"] is None and o["bound"] is None for o in e["ops"])
    assert "Imaginary GPU 9000" in e["peak_unavailable"]


def test_cpu_trace_uses_the_ops_own_time_and_a_given_peak(tmp_path):
    tb = TraceBuilder(device=False)
    tb.step(1, 0, 1000)
    tb.op("aten::addmm", 100, 400, **ADDMM)
    tb.step(2, 1000, 1000)
    tb.op("aten::addmm", 1100, 200, **ADDMM)
    e = _efficiency(tb, tmp_path, Config(peak_tflops=1.0))["efficiency"]
    assert e["time_basis"] == "the op's own time on the CPU"
    assert e["peak_source"] == "user-given: 1 TFLOP/s"
    op = e["ops"][0]
    assert op["time_us"] == 300.0 and op["count"] == 2
    assert e["modelled_time_share"] == pytest.approx(600 / 2000)
    assert e["achieved_flops_per_s"] == pytest.approx(2 * ADDMM_FLOPS / 600e-6)
    assert e["hfu"] == pytest.approx(ADDMM_FLOPS / 1000e-6 / 1e12)


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_qwen_h100_kernel_times_match_tracelens(real_traces):
    """TraceLens's `Kernel Time (µs)_mean` per GEMM / SDPA shape is the op's kernels and memsets: ours too."""
    e = analyze_path(real_traces / "h100_qwen0.5b_inference.json.gz").to_dict()["efficiency"]
    assert e["peak_name"] == "H100 SXM" and e["precision"] == "bf16"
    ours = {}
    for o in analyze_path(real_traces / "h100_qwen0.5b_inference.json.gz",
                          Config(efficiency_top_n=500)).to_dict()["efficiency"]["ops"]:
        ours[(o["name"], o["shape"])] = o
    checked = 0
    for name in ("GEMM.csv", "SDPA_fwd.csv"):
        with open(TRACELENS / name, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                dims = [d for d in ast.literal_eval(row["Input Dims_first"]) if d]
                shape = " x ".join("[" + ", ".join(map(str, d)) + "]" for d in dims)
                o = ours[(row["name"], shape)]
                assert o["count"] == int(row["name_count"])
                assert o["time_us"] == pytest.approx(float(row["Kernel Time (µs)_mean"]), abs=0.01)
                assert o["flops"] == round(float(row["GFLOPS_first"]) * 1e9)
                checked += 1
    assert checked == 6


def test_names_from_the_trace_are_escaped_in_every_output(tmp_path):
    """An `Input type` the model does not know is shown as recorded: escaped in HTML, Markdown, terminal."""
    from perfsleuth.render.html import render_html
    from perfsleuth.render.markdown import render_markdown
    from perfsleuth.render.terminal import render_terminal

    evil = "<img src=x onerror=alert(1)>|`\x1b[31m"
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.op("aten::mm", 10, 150, **{"Input Dims": [[64, 64], [64, 64]], "Input type": [evil, evil],
                                  "Concrete Inputs": ["", ""]})
    tb.launch("gemm", host=(20, 5), device=(100, 100))
    d = _efficiency(tb, tmp_path)
    assert d["efficiency"]["ops"][0]["dtype"] == evil
    html = render_html(d)
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "\x1b" not in render_terminal(d)
    md = render_markdown(d)
    assert "\\<img src=x onerror=alert(1)\\>\\|" in md  # Markdown-escaped: renders literally
    assert "<img src=x" not in md.replace("\\<img", "")


def test_fp32_matmuls_faster_than_the_fp32_units_ran_on_tf32(tmp_path):
    """2·512³ FLOPs in 10 µs is 26.8 TFLOP/s: above the A100's 19.5 FP32, so the roof is TF32's 156."""
    tb = TraceBuilder()
    for n, t0 in ((1, 0), (2, 1000)):
        tb.step(n, t0, 1000)
        tb.op("aten::mm", t0 + 10, 50, **{"Input Dims": [[512, 512], [512, 512]], "Input type": ["float"] * 2,
                                          "Concrete Inputs": ["", ""]})
        tb.launch("ampere_tf32_gemm", host=(t0 + 20, 5), device=(t0 + 100, 10))
    o = _efficiency(tb, tmp_path)["efficiency"]["ops"][0]
    flops, nbytes = 2 * 512**3, 3 * 512 * 512 * 4
    assert o["pct_of_roofline"] == round(max(flops / 156e12, nbytes / 2039e9) / 10e-6, 4)
