"""Datasheet peaks of the devices perfsleuth knows, dense (never the 2:4-sparsity figure), per
precision, and the memory bandwidth; one source per row. Keyed by the `deviceProperties` name.

A peak is the shape TraceLens's arch JSON has (TraceLens/Agent/Analysis/utils/arch/*.json), so a
user's file in that format works as it is: `{"name", "mem_bw_gbps", "max_achievable_tflops":
{"matrix_bf16": ..., "vector_fp32": ...}}`, plus `source`. `matrix_*` is the tensor-core /
matrix-unit rate, `vector_fp32` the plain FP32 rate. NVIDIA runs an fp32 matmul on the FP32 units
(TF32 is off for matmuls by default), so `matrix_fp32` is left out of its rows and the FP32 rate is
used. An unknown device has no peak: the report says so and shows no percentages.
"""

from __future__ import annotations

import re
from typing import Optional

NV = "https://www.nvidia.com/"
# (pattern on the device name, label, fp32, tf32, bf16, fp16, fp8, fp32 matrix, bandwidth GB/s,
# source) TFLOP/s, dense. None: the device has no such unit.
_ROWS = (
    (r"H100.*NVL", "H100 NVL", 60, 417.5, 835.5, 835.5, 1670.5, None, 3900,
     NV + "en-us/data-center/h100/ (H100 datasheet, NVL column; sparse figures halved)"),
    (r"H100.*PCIe", "H100 PCIe", 51, 378, 756.5, 756.5, 1513, None, 2000,
     NV + "en-us/data-center/h100/ (H100 datasheet, PCIe column; sparse figures halved)"),
    (r"H100", "H100 SXM", 67, 494.5, 989.5, 989.5, 1979, None, 3350,
     NV + "en-us/data-center/h100/ (H100 datasheet, SXM column; sparse figures halved)"),
    (r"H200", "H200 SXM", 67, 494.5, 989.5, 989.5, 1979, None, 4800,
     NV + "en-us/data-center/h200/ (H200 datasheet, SXM column; sparse figures halved)"),
    (r"B200", "B200", 75, 1100, 2250, 2250, 4500, None, 8000,
     NV + "en-us/data-center/hgx/ (HGX B200 datasheet, per GPU: the 8-GPU sparse figures / 8 / 2)"),
    (r"A100.*(SXM4?-80GB|80GB.*SXM)", "A100 SXM 80GB", 19.5, 156, 312, 312, None, None, 2039,
     NV + "en-us/data-center/a100/ (A100 datasheet, 80GB SXM column)"),
    (r"A100.*(SXM4?-40GB|40GB.*SXM)", "A100 SXM 40GB", 19.5, 156, 312, 312, None, None, 1555,
     NV + "en-us/data-center/a100/ (A100 datasheet, 40GB SXM column)"),
    (r"A100.*80GB.*PCIe|A100.*PCIE-80GB", "A100 PCIe 80GB", 19.5, 156, 312, 312, None, None, 1935,
     NV + "en-us/data-center/a100/ (A100 datasheet, 80GB PCIe column)"),
    (r"A100.*PCIE-40GB|A100.*40GB.*PCIe", "A100 PCIe 40GB", 19.5, 156, 312, 312, None, None, 1555,
     NV + "en-us/data-center/a100/ (A100 datasheet, 40GB PCIe column)"),
    (r"A100", "A100 (board not identified: memory bandwidth unknown)",
     19.5, 156, 312, 312, None, None, None,
     NV + "en-us/data-center/a100/ (A100 datasheet: the compute rates all A100 boards share)"),
    (r"V100.*SXM", "V100 SXM2", 15.7, None, None, 125, None, None, 900,
     "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-11653"
     "01-r5.pdf (V100 SXM2)"),
    (r"V100", "V100 PCIe", 14, None, None, 112, None, None, 900,
     "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-11653"
     "01-r5.pdf (V100 PCIe)"),
    (r"L40S", "L40S", 91.6, 183, 362, 362, 733, None, 864,
     NV + "en-us/data-center/l40s/ (L40S datasheet; sparse figures halved)"),
    (r"\bL4\b", "L4", 30.3, 60, 121, 121, 242.5, None, 300,
     NV + "en-us/data-center/l4/ (L4 datasheet; sparse figures halved)"),
    (r"\bA10\b", "A10", 31.2, 62.5, 125, 125, None, None, 600,
     NV + "en-us/data-center/products/a10-gpu/ (A10 datasheet; sparse figures halved)"),
    (r"\bT4\b", "T4", 8.1, None, None, 65, None, None, 320,
     NV + "en-us/data-center/tesla-t4/ (T4 datasheet, mixed precision FP16/FP32)"),
    (r"RTX 3090", "GeForce RTX 3090", 35.6, 35.6, 71, 71, None, None, 936,
     "NVIDIA Ampere GA102 GPU architecture whitepaper, table 9 (FP16/BF16 tensor with FP32 "
     "accumulate, dense)"),
    (r"RTX 4090", "GeForce RTX 4090", 82.6, 82.6, 165.2, 165.2, 330.3, None, 1008,
     "NVIDIA Ada GPU architecture whitepaper, table 2 (tensor with FP32 accumulate, dense)"),
    (r"MI325X", "Instinct MI325X", 81.7, 653.7, 1307.4, 1307.4, 2614.9, 163.4, 6000,
     "https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html (dense)"),
    (r"MI300X", "Instinct MI300X", 81.7, 653.7, 1307.4, 1307.4, 2614.9, 163.4, 5300,
     "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html (dense)"),
    (r"MI250X", "Instinct MI250X (one GCD: half the package)",
     23.95, None, 191.5, 191.5, None, 47.85, 1600,
     "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html (package figures / "
     "2 GCDs)"),
    (r"MI250", "Instinct MI250 (one GCD: half the package)",
     22.65, None, 181, 181, None, 45.25, 1600,
     "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250.html (package figures / 2 "
     "GCDs)"),
)


def _row_peak(row) -> dict:
    _, label, fp32, tf32, bf16, fp16, fp8, fp32m, bw, source = row
    tflops = {"vector_fp32": fp32, "matrix_tf32": tf32, "matrix_bf16": bf16, "matrix_fp16": fp16,
              "matrix_fp8": fp8, "matrix_fp32": fp32m}
    return {"name": label, "mem_bw_gbps": bw, "source": source, "kind": "datasheet",
            "max_achievable_tflops": {k: float(v) for k, v in tflops.items() if v is not None}}


def datasheet_peak(device_name: Optional[str]) -> Optional[dict]:
    """The datasheet row for a `deviceProperties` name ('NVIDIA H100 80GB HBM3' -> H100 SXM); None
    when the device is not in the table."""
    if not device_name:
        return None
    for row in _ROWS:
        if re.search(row[0], device_name, flags=re.IGNORECASE):
            return _row_peak(row)
    return None


def table_rows() -> list:
    """The table as dicts (docs and tests)."""
    return [_row_peak(r) for r in _ROWS]


def compute_peak(peak: dict, family_kind: str, precision: str,
                 tf32_convs: bool = False) -> Optional[float]:
    """FLOP/s for an op of this kind ("matrix" or "vector") and precision (fp32, bf16, ...); None
    when the peak does not say. An fp32 matrix op runs on the FP32 units unless the device has FP32
    matrix units (AMD); an fp32 convolution on a GPU with TF32 uses TF32 (cuDNN allows it by
    default)."""
    t = peak.get("max_achievable_tflops") or {}
    if family_kind == "vector":
        v = t.get("vector_fp32")
    elif precision == "fp32":
        fp32 = t.get("matrix_fp32", t.get("vector_fp32"))
        v = t.get("matrix_tf32") if tf32_convs and t.get("matrix_tf32") else fp32
    else:
        v = t.get(f"matrix_{precision}")
    return float(v) * 1e12 if v else None


def bandwidth(peak: dict) -> Optional[float]:
    """Bytes/s of the memory (None when unknown)."""
    v = peak.get("mem_bw_gbps")
    return float(v) * 1e9 if v else None


def user_peak(tflops: Optional[float] = None, arch: Optional[dict] = None,
              bandwidth_gbps: Optional[float] = None) -> Optional[dict]:
    """A peak the user gave: one TFLOP/s figure for every precision (`--peak-tflops`), or a
    TraceLens arch JSON (already read), or both (the figure wins for compute)."""
    if tflops is None and arch is None:
        return None
    out = {"name": "user-given", "mem_bw_gbps": bandwidth_gbps, "source": "user-given",
           "kind": "user",
           "max_achievable_tflops": {}}
    if arch is not None:
        keys = ("name", "mem_bw_gbps", "max_achievable_tflops")
        out.update({k: v for k, v in arch.items() if k in keys})
        out["source"] = f"user-given arch file ({arch.get('name', 'unnamed')})"
    if tflops is not None:
        out["max_achievable_tflops"] = {f"{k}_{p}": float(tflops) for k in ("matrix",)
                                        for p in ("fp32", "tf32", "bf16", "fp16", "fp8")}
        out["max_achievable_tflops"]["vector_fp32"] = float(tflops)
        out["source"] = f"user-given: {tflops:g} TFLOP/s"
    return out


def checked_peak(value) -> Optional[dict]:
    """A peak read from a trace's metadata (`perfsleuth run` measured it): kept only when its rates
    and bandwidth are positive numbers (None otherwise: the report then says there is no peak)."""
    if not isinstance(value, dict) or not isinstance(value.get("max_achievable_tflops"), dict):
        return None
    rates = value["max_achievable_tflops"]
    if not rates or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e9
                            for v in rates.values()):
        return None
    bw = value.get("mem_bw_gbps")
    if bw is not None and not (isinstance(bw, (int, float)) and 0 < bw < 1e9):
        return None
    return {"name": str(value.get("name") or "this CPU"), "kind": "measured", "mem_bw_gbps": bw,
            "source": str(value.get("source") or "measured by perfsleuth run"),
            "max_achievable_tflops": {str(k): float(v) for k, v in rates.items()}}
