"""Vendor datasheet numbers the device forecasts use: dense matrix throughput per dtype, host links.

AMP: a GEMM/convolution kernel that ran with FP32 inputs is forecast to take (its time) x (FP32 or
TF32 peak) / (BF16/FP16 dense tensor peak) of the same device generation. Peaks are dense (no 2:4
sparsity), in TFLOP/s, from the vendor datasheets cited per row. A generation not listed gets no
forecast: nothing here is guessed.

Pinned copies: host-to-device bandwidth of the PCIe generation the GPU generation uses (x16 link,
per direction), from the PCI-SIG specifications: 3.0 = 8 GT/s, 4.0 = 16 GT/s, 5.0 = 32 GT/s per lane
with 128b/130b encoding, i.e. 15.75 / 31.5 / 63 GB/s. A pinned copy reaches about 80 % of it
(NVIDIA, "How to Optimize Data Transfers in CUDA C/C++": pinned ~12 GB/s on PCIe 3.0 x16).
"""

from __future__ import annotations

from typing import Optional

# (name, match) -> {"fp32": dense FP32 (non-tensor) peak, "tf32": TF32 tensor peak, "half": BF16/FP16 dense}
GENERATIONS = (
    # Volta V100 SXM2: FP32 15.7, Tensor (FP16 in, FP32 accumulate) 125.
    # https://images.nvidia.com/content/technologies/volta/pdf/tesla-volta-v100-datasheet-letter-fnl-web.pdf
    {"name": "Volta (V100)", "cc": (7, 0), "fp32": 15.7, "tf32": None, "half": 125.0},
    # Turing T4: FP32 8.1, mixed precision (FP16/FP32) 65.
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf
    {"name": "Turing (T4)", "cc": (7, 5), "fp32": 8.1, "tf32": None, "half": 65.0},
    # Ampere A100: FP32 19.5, TF32 156, BF16/FP16 312.
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
    {"name": "Ampere (A100)", "cc": (8, 0), "fp32": 19.5, "tf32": 156.0, "half": 312.0},
    # Ampere A10: FP32 31.2, TF32 62.5, BF16/FP16 125 (dense).
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf
    {"name": "Ampere (A10)", "cc": (8, 6), "fp32": 31.2, "tf32": 62.5, "half": 125.0},
    # Ada L4: FP32 30.3, TF32 60, BF16/FP16 121 (dense; the datasheet lists 120 / 242 with sparsity).
    # https://www.nvidia.com/en-us/data-center/l4/
    {"name": "Ada (L4)", "cc": (8, 9), "fp32": 30.3, "tf32": 60.0, "half": 121.0},
    # Hopper H100 SXM5: FP32 67, TF32 494.7, BF16/FP16 989.4 (dense; the datasheet lists 989 / 1,979 with sparsity).
    # https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
    {"name": "Hopper (H100)", "cc": (9, 0), "fp32": 67.0, "tf32": 494.7, "half": 989.4},
)
AMD_GENERATIONS = (
    # CDNA2 MI250X: FP32 matrix 95.7, FP16/BF16 383 (rocBLAS runs FP32 GEMMs on the FP32 matrix cores).
    # https://www.amd.com/content/dam/amd/en/documents/instinct-business-docs/product-briefs/instinct-mi250x-brochure.pdf
    {"name": "CDNA2 (MI250X)", "match": ("mi250", "mi210", "aldebaran", "gfx90a"), "fp32": 95.7, "tf32": None, "half": 383.0},
    # CDNA3 MI300X: FP32 matrix 163.4, TF32 653.7, FP16/BF16 1307.4 (dense).
    # https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf
    {"name": "CDNA3 (MI300X)", "match": ("mi300", "gfx942"), "fp32": 163.4, "tf32": 653.7, "half": 1307.4},
)
PCIE_GBPS = {3: 15.75, 4: 31.5, 5: 63.0}  # per direction, x16
PINNED_EFFICIENCY = 0.8
PCIE_OF_CC = ((9, 5), (8, 4), (7, 3))  # (least major compute capability, PCIe generation): Hopper and later 5.0


def generation(device_name: str, cc: Optional[float], vendor: str) -> Optional[dict]:
    """The table row for this device, or None when it is not listed."""
    name = (device_name or "").lower()
    if vendor == "amd" or any(k in name for g in AMD_GENERATIONS for k in g["match"]):
        return next((g for g in AMD_GENERATIONS if any(k in name for k in g["match"])), None)
    if not cc:
        return None
    major, minor = int(cc), int(round((cc - int(cc)) * 10))
    return next((g for g in GENERATIONS if g["cc"] == (major, minor)), None)


def amp_ratio(row: dict, dtype: str) -> Optional[float]:
    """How much faster a dense BF16/FP16 GEMM runs than one in `dtype` (fp32 or tf32) on `row`."""
    base = row.get("tf32") if dtype == "tf32" else row.get("fp32")
    if dtype == "tf32" and base is None:
        base = row.get("fp32")
    if not base or not row.get("half"):
        return None
    return row["half"] / base


def pcie_generation(cc: Optional[float]) -> Optional[int]:
    if not cc:
        return None
    major = int(cc)
    return next((gen for least, gen in PCIE_OF_CC if major >= least), None)
