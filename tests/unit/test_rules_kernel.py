"""amp, cudnn-benchmark, channels-last: GEMM dtypes from input types and kernel names, thresholds."""

import pytest
from tracebuilder_rules import RuleTraceBuilder, analyze, fired, rated, rule_severity

FP32, BF16 = ["float", "float"], ["c10::BFloat16", "c10::BFloat16"]
CONV_BF16 = "sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64"


def gemm_trace(kernels: list, compute=(8, 0), device: bool = True, steps: int = 2) -> RuleTraceBuilder:
    """1000 µs steps; `kernels` = [(op, input types or None, kernel name, device µs)], run back to back from 10 µs."""
    tb = RuleTraceBuilder(device=device, compute=compute)
    for i in range(steps):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        at = t0 + 10
        for j, (op, in_type, kernel, dur) in enumerate(kernels):
            host = (t0 + 1 + j * 8, 6)
            if in_type is None:
                tb.op(op, *host)
                tb.launch(kernel, host=(host[0] + 1, 4), device=(at, dur))
            else:
                tb.typed_launch(op, in_type, kernel, host=host, device=(at, dur))
            at += dur
    return tb


@pytest.mark.parametrize("gemm_us, fires", [(51, True), (49, False)])
def test_amp_min_gemm_share(tmp_path, gemm_us, fires):
    report, facts = analyze(gemm_trace([("aten::mm", FP32, "ampere_sgemm_128x64_tn", gemm_us)]), tmp_path)
    assert facts["gemm_share"] == gemm_us / 1000
    assert facts["gemm_fp32_share"] == 1.0 and facts["gemm_tf32_share"] == 0.0
    assert facts["gemm_dtype_from_inputs"] == 1.0
    assert ("amp" in fired(report)) is fires


@pytest.mark.parametrize("bf16_us, fires", [(51, True), (52, False)])
def test_amp_min_fp32_fraction(tmp_path, bf16_us, fires):
    tb = gemm_trace([("aten::mm", FP32, "ampere_sgemm_128x64_tn", 51), ("aten::mm", BF16, "nvjet_tst_64x8", bf16_us)])
    report, facts = analyze(tb, tmp_path)
    assert facts["gemm_fp32_share"] == round(51 / (51 + bf16_us), 4)
    assert facts["gemm_reduced_share"] == round(bf16_us / (51 + bf16_us), 4)
    assert ("amp" in fired(report)) is fires
    assert {t["dtype"] for t in facts.tables["gemm_dtypes"]} == {"fp32", "bf16"}


def test_amp_finding_on_ampere_suggests_bf16_and_tf32(tmp_path):
    report, facts = analyze(gemm_trace([("aten::mm", FP32, "ampere_sgemm_128x64_tn", 300)]), tmp_path)
    f = fired(report)["amp"]
    assert rule_severity("amp", facts) == "high" and rated(f, "high")  # 30% of the step in FP32 GEMMs
    assert f["ceiling"]["saving_us"] == 150.0  # expected_saving 0.5 of 300 µs
    assert f["ceiling"]["speedup"] == round(1000 / 850, 3)
    assert "dtype=torch.bfloat16" in f["fix"] and 'set_float32_matmul_precision("high")' in f["fix"]
    assert "GradScaler" not in f["fix"]


def test_amp_on_tf32_kernels_says_tf32_is_on(tmp_path):
    tb = gemm_trace([("aten::mm", FP32, "cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align4", 100)])
    report, facts = analyze(tb, tmp_path)
    assert facts["gemm_tf32_share"] == 1.0 and facts["gemm_fp32_share"] == 1.0
    f = fired(report)["amp"]
    assert "TF32 tensor cores are already in use" in f["message"]
    assert "set_float32_matmul_precision" not in f["fix"]


def test_amp_on_volta_from_kernel_names_suggests_fp16_with_gradscaler(tmp_path):
    tb = gemm_trace([("aten::mm", None, "volta_sgemm_128x64_nn", 100)], compute=(7, 0))
    report, facts = analyze(tb, tmp_path)
    assert facts["gemm_dtype_from_inputs"] == 0.0 and facts["gemm_fp32_share"] == 1.0
    f = fired(report)["amp"]
    assert "torch.amp.GradScaler" in f["fix"] and "torch.float16" in f["fix"]
    assert "dtype=torch.bfloat16" not in f["fix"]


def test_input_type_wins_over_the_kernel_name(tmp_path):
    report, facts = analyze(gemm_trace([("aten::mm", BF16, "ampere_sgemm_128x64_tn", 300)]), tmp_path)
    assert facts["gemm_fp32_share"] == 0.0 and facts["gemm_reduced_share"] == 1.0
    assert "amp" not in fired(report)


def test_amp_silent_without_tensor_cores(tmp_path):
    report, _ = analyze(gemm_trace([("aten::mm", FP32, "ampere_sgemm_128x64_tn", 300)], compute=(6, 1)), tmp_path)
    assert "amp" not in fired(report) and report["not_checked"] == []  # checked: Pascal has no tensor cores


@pytest.mark.parametrize("compute, device", [(None, True), ((8, 0), False)])
def test_amp_without_device_properties_reads_the_kernel_names(tmp_path, compute, device):
    """No deviceProperties (an empty list, or none at all): `ampere_sgemm` says Ampere, so amp is checked."""
    report, facts = analyze(gemm_trace([("aten::mm", FP32, "ampere_sgemm_128x64_tn", 300)], compute=compute,
                                       device=device), tmp_path)
    assert facts["device_generation_source"] == "kernel names" and facts["device_compute_capability"] == 8.0
    assert "amp" in fired(report)


@pytest.mark.parametrize("conv_us, fires", [(101, True), (99, False)])
def test_cudnn_benchmark_min_conv_share(tmp_path, conv_us, fires):
    report, facts = analyze(gemm_trace([("aten::cudnn_convolution", BF16, CONV_BF16, conv_us)]), tmp_path)
    assert facts["conv_share"] == conv_us / 1000 and facts["conv_us_per_step"] == conv_us
    assert ("cudnn-benchmark" in fired(report)) is fires
    assert "amp" not in fired(report)
    if fires:
        f = fired(report)["cudnn-benchmark"]
        assert rule_severity("cudnn-benchmark", facts) == "low" and rated(f, "low")
        assert f["ceiling"]["saving_us"] == round(conv_us * 0.1, 3)
        assert "torch.backends.cudnn.benchmark = True" in f["fix"]


def test_cudnn_benchmark_is_nvidia_only(tmp_path):
    tb = gemm_trace([("aten::miopen_convolution", BF16, "igemm_fwd_gtcx3_nhwc_bf16_conv", 300)],
                    compute=(9, 4))
    tb.device_name = "AMD Instinct MI300X"
    report, facts = analyze(tb, tmp_path)
    assert facts["conv_share"] == 0.3
    assert "cudnn-benchmark" not in fired(report)


@pytest.mark.parametrize("transform_us, fires, severity", [(11, True, "low"), (9, False, None), (50, True, "medium")])
def test_channels_last_min_share(tmp_path, transform_us, fires, severity):
    tb = gemm_trace([("aten::cudnn_convolution", BF16, CONV_BF16, 50),
                     ("aten::cudnn_convolution", BF16, "void cudnn::ops::nchwToNhwcKernel<float>", transform_us)])
    report, facts = analyze(tb, tmp_path)
    assert facts["layout_transform_us_per_step"] == transform_us
    assert ("channels-last" in fired(report)) is fires
    if fires:
        f = fired(report)["channels-last"]
        assert rule_severity("channels-last", facts) == severity and rated(f, severity)
        assert f["ceiling"]["saving_us"] == transform_us
        assert "memory_format=torch.channels_last" in f["fix"]


def test_channels_last_needs_convolutions_or_gemms(tmp_path):
    tb = gemm_trace([("aten::copy_", None, "void cudnn::ops::nchwToNhwcKernel<float>", 50)])
    report, facts = analyze(tb, tmp_path)
    assert facts["layout_transform_share"] == 0.05 and facts["conv_share"] == 0.0 and facts["gemm_share"] == 0.0
    assert "channels-last" not in fired(report)
