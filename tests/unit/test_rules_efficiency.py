"""tensor-core-shapes, attention-unfused, elementwise-fusion (rules/efficiency.toml) and the amp rule's
FLOPs-weighted evidence: a trace that fires each, one that does not, exact facts."""

import pytest
from tracebuilder_rules import RuleTraceBuilder, analyze, fired

BF16 = "c10::BFloat16"


def _mm(tb, t0, m, n, k, dtype, dur, at):
    tb.op("aten::mm", t0, 6, **{"Input Dims": [[m, k], [k, n]], "Input type": [dtype, dtype],
                                "Concrete Inputs": ["", ""]})
    tb.launch("sm80_xmma_gemm", host=(t0 + 1, 4), device=(at, dur))


@pytest.mark.parametrize("n, fires", [(50257, True), (50304, False)])
def test_tensor_core_shapes(tmp_path, n, fires):
    tb = RuleTraceBuilder()
    for i in range(2):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        _mm(tb, t0 + 10, 64, n, 64, BF16, 100, t0 + 20)
    report, facts = analyze(tb, tmp_path)
    assert facts["efficiency_known"]
    assert facts["matmul_misaligned_share"] == (0.1 if fires else 0.0)
    assert facts["matmul_misaligned_us_per_step"] == (100.0 if fires else 0.0)
    assert ("tensor-core-shapes" in fired(report)) is fires
    if fires:
        roof = max(2 * 64 * n * 64 / 312e12, (64 * 64 + 64 * n + 64 * n) * 2 / 2039e9) * 1e6
        assert facts["matmul_misaligned_lost_us_per_step"] == pytest.approx(100 - roof, abs=1e-3)
        assert report["findings"][0]["ceiling"]["saving_us"] == pytest.approx(100 - roof, abs=1e-3)


def _attention_trace(fused: bool) -> RuleTraceBuilder:
    tb = RuleTraceBuilder(device=False, compute=None)
    q = [8, 4, 128, 32]
    for i in range(2):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        if fused:
            tb.op("aten::_scaled_dot_product_flash_attention_for_cpu", t0 + 10, 300,
                  **{"Input Dims": [q, q, q, [], [], [], []], "Input type": ["float"] * 3 + ["Scalar"] * 4,
                     "Concrete Inputs": ["", "", "", "0.", "False", "", ""]})
            continue
        tb.op("aten::bmm", t0 + 10, 100, **{"Input Dims": [[32, 128, 32], [32, 32, 128]],
                                            "Input type": ["float", "float"], "Concrete Inputs": ["", ""]})
        tb.op("aten::_softmax", t0 + 120, 100, **{"Input Dims": [[8, 4, 128, 128], [], []],
                                                  "Input type": ["float", "Scalar", "Scalar"],
                                                  "Concrete Inputs": ["", "-1", "False"]})
        tb.op("aten::bmm", t0 + 230, 100, **{"Input Dims": [[32, 128, 128], [32, 128, 32]],
                                             "Input type": ["float", "float"], "Concrete Inputs": ["", ""]})
    return tb


@pytest.mark.parametrize("fused", [False, True])
def test_attention_unfused(tmp_path, fused):
    report, facts = analyze(_attention_trace(fused), tmp_path)
    assert facts["efficiency_known"]
    assert facts["attention_unfused_us_per_step"] == (0.0 if fused else 300.0)
    assert facts["attention_unfused_share"] == (0.0 if fused else 0.3)
    assert ("attention-unfused" in fired(report)) is not fused


@pytest.mark.parametrize("ops, fires", [(30, True), (10, False)])
def test_elementwise_fusion(tmp_path, ops, fires):
    tb = RuleTraceBuilder()
    x = [1024, 1024]
    for i in range(2):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        for j in range(ops):
            tb.op("aten::add", t0 + 5 + j * 10, 8, **{"Input Dims": [x, x, []], "Input type": [BF16, BF16, "Scalar"],
                                                      "Concrete Inputs": ["", "", "1"]})
            tb.launch("vectorized_elementwise_kernel", host=(t0 + 6 + j * 10, 2), device=(t0 + 10 + j * 10, 8))
    report, facts = analyze(tb, tmp_path)
    assert facts["vector_memory_ops_per_step"] == ops
    assert facts["vector_memory_us_per_step"] == 8.0 * ops
    assert facts["vector_memory_share"] == 8.0 * ops / 1000
    assert ("elementwise-fusion" in fired(report)) is fires


def test_amp_gains_flops_weighted_evidence(tmp_path):
    tb = RuleTraceBuilder()
    for i in range(2):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        _mm(tb, t0 + 10, 256, 256, 256, "float", 300, t0 + 20)  # fp32: 3/4 of the FLOPs
        _mm(tb, t0 + 30, 256, 256, 256, "float", 300, t0 + 400)
        _mm(tb, t0 + 50, 256, 256, 256, "float", 100, t0 + 800)
        _mm(tb, t0 + 70, 256, 256, 256, BF16, 50, t0 + 920)
    report, facts = analyze(tb, tmp_path)
    assert facts["matmul_fp32_flops_share"] == 0.75
    amp = fired(report)["amp"]
    assert "by FLOPs, 75.0% of the matmul, convolution and attention work is fp32" in amp["message"]
    assert amp["evidence"]["matmul_fp32_flops_share"] == 0.75


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_qwen_fires_elementwise_fusion_not_the_others(real_traces, tmp_path):
    from perfsleuth.api import analyze_path

    report = analyze_path(real_traces / "h100_qwen0.5b_inference.json.gz").to_dict()
    slugs = {f["rule"] for f in report["findings"]}
    assert "elementwise-fusion" in slugs
    assert not {"tensor-core-shapes", "attention-unfused"} & slugs
