"""The GPU generation without deviceProperties (kernel names, device names), and rules that could not
be checked for lack of it: listed in the JSON, the terminal, the HTML and the Markdown, never skipped."""

import gzip
import json

import pytest
from perfsleuth.api import analyze_file
from perfsleuth.facts.generation import device_generation, from_device_name, from_kernel_names
from perfsleuth.render.html import render_html
from perfsleuth.render.markdown import render_markdown
from perfsleuth.render.terminal import render_terminal
from perfsleuth.trace.model import Device
from tracebuilder_rules import RuleTraceBuilder, analyze, fired


@pytest.mark.parametrize("name, cap, gen", [
    ("volta_sgemm_128x64_nn", 7.0, "volta"),
    ("volta_scudnn_128x64_relu_interior_nn_v1", 7.0, "volta"),
    ("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn", 7.5, "turing"),
    ("ampere_sgemm_128x64_tn", 8.0, "ampere"),
    ("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", 8.0, "ampere"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(Params)", 8.0, "ampere"),
    ("sm86_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc", 8.6, "ampere"),
    ("sm89_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32", 8.9, "ada"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64warpgroupsize1x1x1", 9.0, "hopper"),
    ("void cutlass::device_kernel<hopper_gemm_kernel>", 9.0, "hopper"),
    ("bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_dynBatch_sm100f",
     10.0, "blackwell"),
    ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKv", 10.0, "blackwell"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_GSUAMB_ISA90a_IU1_K1", 9.0, "cdna2"),
    ("Cijk_Ailk_Bljk_BBS_BH_MT64x64x64_MI16x16x16x1_SN_1LDSB0_ISA942_K1", 9.4, "cdna3"),
    ("igemm_fwd_gtcx3_nhwc_bf16_gfx942_kernel", 9.4, "cdna3"),
])
def test_generation_from_kernel_names(name, cap, gen):
    assert from_kernel_names([name])[:2] == (cap, gen)


@pytest.mark.parametrize("name", ["cudaStreamIsCapturing", "void at::native::vectorized_elementwise_kernel<4>",
                                  "void reduce_smem_kernel<float, 128>", "prism75_kernel",
                                  "sm_count_kernel"])
def test_names_that_name_no_generation(name):
    assert from_kernel_names([name]) is None  # 'cap-turing', no architecture, an unknown SM number


def test_the_newest_architecture_named_wins():
    assert from_kernel_names(["volta_sgemm_64x64_nt", "ampere_sgemm_128x64_tn", "turing_h1688gemm"])[:2] == (8.0, "ampere")


@pytest.mark.parametrize("name, cap", [("Tesla V100-SXM2-32GB", 7.0), ("NVIDIA A100-PG509-200", 8.0),
                                       ("NVIDIA H100 80GB HBM3", 9.0), ("NVIDIA B200", 10.0), ("Tesla T4", 7.5),
                                       ("AMD Instinct MI300X", 9.4), ("AMD Instinct MI250X", 9.0)])
def test_generation_from_device_names(name, cap):
    assert from_device_name(name)[0] == cap


def test_order_of_trust():
    props = [Device("Tesla V100-SXM2-32GB", 7, 0)]
    assert device_generation(props, "nvidia", ["ampere_sgemm"])["source"] == "deviceProperties"
    assert device_generation([Device("NVIDIA A100")], "nvidia", ["volta_sgemm"])["source"] == "device name"
    assert device_generation([], "nvidia", ["volta_sgemm_128x64_nn"]) == {
        "compute_capability": 7.0, "generation": "volta", "source": "kernel names", "evidence": "volta_sgemm_128x64_nn"}
    assert device_generation([], "nvidia", ["gemm_kernel"])["source"] == "unknown"


def _without_properties(src, dst):
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    doc.pop("deviceProperties", None)
    with gzip.open(dst, "wt") as f:
        json.dump(doc, f)
    return dst


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_v100_trace_without_properties_still_gets_amp(real_traces, tmp_path):
    """The 2020-2021 V100 traces as older exporters wrote them: volta_sgemm / volta_scudnn kernels,
    99.9 % FP32 GEMM/conv time, no deviceProperties. The kernel names say Volta; amp fires."""
    path = _without_properties(real_traces / "v100_ns_resolution.pt.trace.json.gz", tmp_path / "v100.json.gz")
    report = analyze_file(path).to_dict()
    assert report["trace"]["compute_capability"] is None  # the trace does not say
    assert (report["trace"]["generation"], report["trace"]["generation_source"]) == ("volta", "kernel names")
    assert report["trace"]["compute_capability_inferred"] == 7.0
    amp = fired(report)["amp"]
    assert amp["severity"] == "high" and "(volta, from the kernel names)" in amp["message"]
    assert "GradScaler" in amp["fix"]  # Volta: fp16 with loss scaling, no bf16
    assert report["not_checked"] == []


def _unknown_generation_trace() -> RuleTraceBuilder:
    """FP32 GEMMs on a GPU whose generation nothing names: no properties, no architecture in kernel names."""
    tb = RuleTraceBuilder(compute=None)
    for i in range(2):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        tb.typed_launch("aten::mm", ["float", "float"], "void gemm_kernel<float, 128>", host=(t0 + 1, 6),
                        device=(t0 + 10, 300))
    return tb


def test_amp_not_checked_is_listed_everywhere(tmp_path):
    report, facts = analyze(_unknown_generation_trace(), tmp_path)
    assert facts["device_generation_known"] is False and facts["gemm_fp32_share"] == 1.0
    assert "amp" not in fired(report)
    assert report["not_checked"] == [{
        "rule": "amp", "title": "Matrix multiplies and convolutions run in FP32", "missing": ["device_generation"],
        "reason": "device generation unknown (no deviceProperties, and no architecture in the device name or the "
                  "kernel names)"}]
    assert "not checked: amp — device generation unknown" in render_terminal(report)
    assert "`amp` — device generation unknown" in render_markdown(report)
    html = render_html(report)
    assert 'id="not-checked"' in html and "<code>amp</code> — device generation unknown" in html


def test_amp_not_listed_when_it_does_not_apply(tmp_path):
    """bf16 GEMMs on an unknown GPU: amp would not fire whatever the generation."""
    tb = RuleTraceBuilder(compute=None)
    tb.step(1, 0, 1000)
    tb.typed_launch("aten::mm", ["c10::BFloat16", "c10::BFloat16"], "void gemm_kernel<bf16>", host=(1, 6),
                    device=(10, 300))
    report, _ = analyze(tb, tmp_path)
    assert report["not_checked"] == []


def test_sampled_trace_has_no_properties_but_ampere_kernels(real_traces):
    report = analyze_file(real_traces / "sampled_rank0_of128.json.gz").to_dict()
    assert report["trace"]["device"] is None
    assert (report["trace"]["generation"], report["trace"]["generation_source"]) == ("ampere", "kernel names")
    assert "amp" in fired(report)
