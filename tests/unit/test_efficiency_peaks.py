"""The datasheet peak table (analysis/efficiency/peaks.py): deviceProperties names to rows, dense figures,
one source per row, and the user's peaks."""

import pytest

from perfsleuth.analysis.efficiency.peaks import (bandwidth, compute_peak, datasheet_peak, table_rows,
                                                  user_peak)


@pytest.mark.parametrize("name, label, bf16, bw_gbps", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.5, 3350),
    ("NVIDIA H100 PCIe", "H100 PCIe", 756.5, 2000),
    ("NVIDIA H100 NVL", "H100 NVL", 835.5, 3900),
    ("NVIDIA H200", "H200 SXM", 989.5, 4800),
    ("NVIDIA B200", "B200", 2250, 8000),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB", 312, 2039),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB", 312, 1555),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", 312, 1935),
    ("NVIDIA A100-PG509-200", "A100 (board not identified: memory bandwidth unknown)", 312, None),
    ("NVIDIA L40S", "L40S", 362, 864),
    ("NVIDIA L4", "L4", 121, 300),
    ("NVIDIA A10", "A10", 125, 600),
    ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090", 165.2, 1008),
    ("NVIDIA GeForce RTX 3090", "GeForce RTX 3090", 71, 936),
    ("AMD Instinct MI300X", "Instinct MI300X", 1307.4, 5300),
    ("AMD Instinct MI325X", "Instinct MI325X", 1307.4, 6000),
    ("AMD Instinct MI250X", "Instinct MI250X (one GCD: half the package)", 191.5, 1600),
])
def test_device_names_find_their_dense_row(name, label, bf16, bw_gbps):
    p = datasheet_peak(name)
    assert p["name"] == label and p["kind"] == "datasheet"
    assert compute_peak(p, "matrix", "bf16") == bf16 * 1e12
    assert bandwidth(p) == (bw_gbps * 1e9 if bw_gbps else None)


def test_fp16_only_devices_and_unknown_ones():
    v100 = datasheet_peak("Tesla V100-SXM2-32GB")
    assert compute_peak(v100, "matrix", "fp16") == 125e12 and compute_peak(v100, "matrix", "bf16") is None
    t4 = datasheet_peak("Tesla T4")
    assert compute_peak(t4, "matrix", "fp16") == 65e12
    assert datasheet_peak("Imaginary GPU 9000") is None and datasheet_peak(None) is None


def test_fp32_matmuls_use_the_fp32_units_and_convolutions_tf32():
    h100 = datasheet_peak("NVIDIA H100 80GB HBM3")
    assert compute_peak(h100, "matrix", "fp32") == 67e12  # TF32 is off for matmuls by default
    assert compute_peak(h100, "matrix", "fp32", tf32_convs=True) == 494.5e12  # cuDNN allows TF32
    mi300 = datasheet_peak("AMD Instinct MI300X")
    assert compute_peak(mi300, "matrix", "fp32") == 163.4e12 and compute_peak(mi300, "vector", "bf16") == 81.7e12


def test_every_row_has_a_source_and_no_sparse_figure():
    rows = table_rows()
    assert len(rows) >= 20 and all(r["source"] for r in rows)
    for r in rows:  # dense: fp8 about twice bf16 (L40S's datasheet: 733 against 362.05), never 4x
        t = r["max_achievable_tflops"]
        if "matrix_fp8" in t:
            assert t["matrix_fp8"] <= 2.05 * t["matrix_bf16"], r["name"]
    h100 = datasheet_peak("NVIDIA H100 80GB HBM3")["max_achievable_tflops"]
    assert h100["matrix_bf16"] == 989.5  # not the 1979 of the 2:4-sparsity headline


def test_user_peaks():
    one = user_peak(tflops=2.0)
    assert compute_peak(one, "matrix", "bf16") == 2e12 and compute_peak(one, "vector", "fp32") == 2e12
    assert bandwidth(one) is None
    arch = {"name": "MI300X", "mem_bw_gbps": 5300, "max_achievable_tflops": {"matrix_bf16": 708, "vector_fp32": 81}}
    p = user_peak(arch=arch)
    assert compute_peak(p, "matrix", "bf16") == 708e12 and bandwidth(p) == 5300e9 and p["kind"] == "user"
    assert user_peak() is None
