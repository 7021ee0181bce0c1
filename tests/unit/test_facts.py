"""Facts: the registry, exact values on a hand-built trace, the name tables, the vectorised helpers."""

import re

import numpy as np
import pandas as pd
import pytest
from perfsleuth.facts.common import innermost_enclosing, intersect, last_started, overlap_ns
from perfsleuth.analysis.intervals import subtract
from perfsleuth.facts.core import FACTS
from perfsleuth.facts.device import dtype_from_input_type, dtype_from_name, kernel_family
from perfsleuth.facts.locations import is_user_frame, parse_frame
from tracebuilder_rules import PAGEABLE_HTOD, RuleTraceBuilder, analyze

UNITS = {"count", "text", "us", "ratio", "index", "us/step", "bool", "capability", "share", "count/step",
         "bytes/step", "bytes", "fraction", "flop/step", "flop/s"}


def test_registry_names_are_identifiers_with_unit_and_meaning():
    assert len(FACTS) >= 60
    for name, (unit, desc) in FACTS.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
        assert unit in UNITS, (name, unit)
        assert desc and desc[0].islower() or desc[0].isupper(), name


def test_compute_facts_gives_exactly_the_registry(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("k", host=(0, 5), device=(10, 500))
    _, facts = analyze(tb, tmp_path)
    assert set(facts.values) == set(FACTS)
    assert set(facts.tables) == {"sync_sites", "explicit_sync_sites", "gemm_dtypes", "kernel_families", "host_consumers",
                                 "host_sites", "alloc_sites", "small_op_sites", "optimizer_sites", "dataloader_sites",
                                 "zero_grad_sites", "pageable_copy_sites", "blocking_copy_sites", "recompile_reasons",
                                 "graph_break_reasons", "compile_step_times",
                                     "memory_kept_sites", "memory_peak_sites"}


def test_core_facts_exact(tmp_path):
    tb = RuleTraceBuilder(world_size=4)
    for i, d in enumerate((1000, 2000, 1000)):
        t0 = (0, 1000, 3000)[i]
        tb.step(i + 1, t0, d)
        tb.launch("k", host=(t0, 5), device=(t0 + 10, 490))
        tb.copy(PAGEABLE_HTOD, host=(t0 + 600, 30), device=(t0 + 610, 5), nbytes=1000)
    report, f = analyze(tb, tmp_path)
    assert f["steps"] == 3 and f["step_source"] == "ProfilerStep"
    assert f["step_us"] == round(4000 / 3, 3) and f["step_median_us"] == 1000.0 and f["step_max_us"] == 2000.0
    assert f["step_max_ratio"] == 2.0 and f["step_slowest_index"] == 1
    assert f["step_excess_us_per_step"] == round(1000 / 3, 3)
    assert f["device_is_gpu"] is True and f["device_type"] == "cuda" and f["device_vendor"] == "nvidia"
    assert f["device_compute_capability"] == 8.0 and f["world_size"] == 4
    assert f["kernel_us_per_step"] == 490.0 and f["kernel_share"] == round(1470 / 4000, 4)
    assert f["transfer_us_per_step"] == 30.0  # the host is blocked in the pageable copy call [600, 630)
    assert f["device_busy_share"] == round(1485 / 4000, 4)
    assert f["h2d_pageable_bytes_per_step"] == 1000.0 and f["h2d_pageable_host_us_per_step"] == 30.0
    assert f["kernels_per_step"] == 1.0 and f["kernel_median_us"] == 490.0 and f["short_kernel_share"] == 0.0
    assert f["has_stacks"] is False and f["has_shapes"] is False
    for c in ("dataloader", "kernel", "sync", "transfer", "host", "communication", "other"):
        assert f[f"{c}_share"] == report["summary"]["time_share"][c]


def test_cpu_only_facts(tmp_path):
    tb = RuleTraceBuilder(device=False, rank=None)
    tb.step(1, 0, 1000)
    tb.op("aten::mm", 10, 500)
    _, f = analyze(tb, tmp_path)
    assert f["device_is_gpu"] is False and f["device_type"] == "cpu" and f["device_vendor"] == "unknown"
    assert f["device_compute_capability"] == 0.0 and f["world_size"] == 1 and f["device_busy_share"] == 0.0
    assert f["kernels_per_step"] == 0.0 and f["gemm_share"] == 0.0


@pytest.mark.parametrize("name, dtype", [
    ("ampere_sgemm_128x64_tn", "fp32"),
    ("volta_sgemm_32x128_nn", "fp32"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>", "fp32"),
    ("void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>", "fp32"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8", "fp32"),
    ("Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1", "fp32"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align4>", "tf32"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw", "tf32"),
    ("volta_h884gemm_64x64_ldg8_nn", "fp16"),
    ("volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn", "fp16"),
    ("ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_64x3_nn", "fp16"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "bf16"),
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1", "bf16"),
    ("Cijk_Ailk_Bljk_BBS_BH_MT64x64x64_MI16x16x16x1_SN_1LDSB0", "bf16"),
    ("Cijk_Ailk_Bljk_HHS_BH_MT64x64x64_MI16x16x16x1_SN_1LDSB0", "fp16"),
    ("naive_conv_fwd_nchw_float_double_float", "fp32"),
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n", "fp8"),
    ("ampere_int8_i8816gemm_int8_128x128_ldg16_nn", "int8"),
    ("nvjet_tst_192x8_64x8_4x1_v_bz_TNT", "unknown"),
])
def test_kernel_name_dtype_table(name, dtype):
    assert dtype_from_name(name) == dtype


@pytest.mark.parametrize("in_type, dtype", [("float,float", "fp32"), ("c10::BFloat16,c10::BFloat16,", "bf16"),
                                            ("c10::Half,c10::Half", "fp16"), (",float", "fp32"), ("", ""),
                                            ("double,double", "fp64"), ("long,long", "unknown")])
def test_input_type_dtype(in_type, dtype):
    assert dtype_from_input_type(in_type) == dtype


@pytest.mark.parametrize("name, family", [
    ("ampere_sgemm_128x64_tn", "gemm"), ("void fbgemm_gpu::permute_2D_data_kernel<int>", "other"),
    ("vllm::_typeConvert<c10::BFloat16>", "other"), ("sm80_xmma_fprop_implicit_gemm_tf32", "conv"),
    ("void wgrad_alg0_engine<float, 128, 6>", "conv"), ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication"),
    ("void cudnn::ops::nchwToNhwcKernel<float>", "layout"), ("batched_transpose_32x16_half", "layout"),
    ("void pytorch_flash::flash_fwd_kernel<>", "attention"), ("Memcpy DtoD (Device -> Device)", "memory"),
    ("Cijk_Alik_Bljk_SB_Bias", "gemm"),
    # ROCm: MIOpen implicit-GEMM and naive convolutions, Composable Kernel, rocBLAS / hipBLASLt (Tensile)
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2", "conv"),
    ("igemm_bwd_gtcx3_nhwc_bf16_bx0_ex1_bt32x128x32_wt16x64x4_ws1x1_wr1x1_mh_gkgs", "conv"),
    ("igemm_wrw_gtcx3_nhwc_bf16_bx0_ex1_bt64x64x64_wt32x32x8_ws1x1_wr1x1_gkgs", "conv"),
    ("naive_conv_fwd_nchw_float_double_float", "conv"), ("naive_conv_wrw_nhwc_half_double_half", "conv"),
    ("MIOpenConv1x1", "conv"), ("miopenSp3AsmConv_v21_1_3_gfx9_fp32_stride1", "conv"),
    ("gridwise_convolution_implicit_gemm_v4r1_nchw_kcyx_nkhw", "conv"),
    ("_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weightINS_47GridwiseGemm", "conv"),
    ("_ZN2ck16tensor_operation6device12_GLOBAL__N_149kernel_grouped_conv_fwd_multiple_abd_xdl_cshuffle", "conv"),
    ("Cijk_Ailk_Bljk_BBS_BH_Bias_HAS_SAV_UserArgs_MT16x16x256_MI16x16x1_SN_LDSB1", "gemm"),
    ("rocblas_gemvt_kernel<float>", "gemm"), ("_ZN2ck16tensor_operation6device24kernel_gemm_xdl_cshuffle_v3", "gemm"),
    ("transpose_CNHW2NCHW_V2_2D_WG_off64", "layout"), ("SubTensorOpWithScalar1d", "other"),
])
def test_kernel_families(name, family):
    assert kernel_family(name) == family


@pytest.mark.parametrize("frame, user", [
    ("train.py(57): train_step", True), ("vllm/v1/attention/backends/utils.py(879): split", True),
    ("torch/nn/modules/module.py(1751): _call_impl", False), ("threading.py(1012): run", False),
    ("logging/__init__.py(1500): info", False), ("<frozen os>(709): __getitem__", False),
    ("<built-in method item of Tensor object at 0x7f>", False), ("/usr/lib/python3.11/json/decoder.py(10): f", False),
    ("/srv/venv/lib/python3.11/site-packages/mylib/x.py(3): g", False),  # issue 24: site-packages is not the user's
    ("/srv/venv/lib/python3.11/site-packages/torch/_tensor.py(3): g", False),
])
def test_user_frames(frame, user):
    assert is_user_frame(frame) is user


def test_parse_frame():
    assert parse_frame("my dir/train (v2).py(57): train_step") == ("my dir/train (v2).py", 57, "train_step")
    assert parse_frame("<built-in function print>") is None


def _iv(*pairs):
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)


def test_intersect_and_overlap():
    a, b = _iv((0, 10), (20, 30), (40, 50)), _iv((5, 25), (30, 45))
    s, e = intersect(a, b)
    assert s.tolist() == [5, 20, 40] and e.tolist() == [10, 25, 45]
    assert overlap_ns(a, b) == 15
    assert overlap_ns(a, _iv((10, 20))) == 0  # half-open: touching is not overlapping
    assert overlap_ns(a, (np.empty(0, np.int64), np.empty(0, np.int64))) == 0


def test_subtract_keeps_what_the_other_does_not_cover():
    a, b = _iv((0, 10), (20, 30), (40, 50)), _iv((5, 25), (30, 45))
    s, e = subtract(a, b)
    assert s.tolist() == [0, 25, 45] and e.tolist() == [5, 30, 50]
    s, e = subtract(a, _iv((0, 50)))
    assert s.size == 0 and e.size == 0
    s, e = subtract(a, (np.empty(0, np.int64), np.empty(0, np.int64)))
    assert s.tolist() == [0, 20, 40] and e.tolist() == [10, 30, 50]


def test_innermost_enclosing_and_last_started():
    spans = pd.DataFrame({"ts": [0, 10, 12, 30, 0], "end": [100, 50, 15, 40, 100], "pid": [1, 1, 1, 1, 2],
                          "tid": [1, 1, 1, 1, 2]})
    points = pd.DataFrame({"ts": [20, 13, 60, 35, 5, 200], "pid": [1, 1, 1, 1, 2, 3], "tid": [1, 1, 1, 1, 2, 3]})
    assert innermost_enclosing(points, spans).tolist() == [1, 2, 0, 3, 4, -1]
    assert last_started(points, spans).tolist() == [2, 2, 3, 3, 4, -1]


def test_fact_values_are_plain_json_types(real_traces):
    import json

    from perfsleuth.api import analyze_file
    from perfsleuth.facts.core import compute_facts

    report = analyze_file(real_traces / "h100_qwen0.5b_inference.json.gz")
    facts = compute_facts(report.trace, report.steps, report.breakdown)
    for name, value in facts.values.items():
        assert type(value) in (int, float, bool, str), (name, type(value))
    json.dumps({"values": facts.values, "tables": facts.tables}, allow_nan=False)
