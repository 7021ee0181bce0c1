"""The GPU generation (compute capability) when a trace lists no device properties.

Kineto writes `deviceProperties` (computeMajor/computeMinor) since 2021; older traces and some
exporters leave it out, and then rules that depend on the hardware (`amp`: tensor cores or not)
could not be checked. The kernels give it away: cuBLAS/cuDNN name kernels after the architecture
they were built for (`volta_sgemm_128x64_nn`, `turing_fp16_s1688gemm…`, `ampere_sgemm…`), CUTLASS and
cuBLASLt carry the SM number (`cutlass_80_tensorop…`, `sm80_xmma_gemm…`, `sm90_xmma…`, `…_sm100f`,
`fmhaSm100aKernel…`), and ROCm's Tensile/hipBLASLt kernels carry the ISA (`…_ISA90a_…`, `ISA942`,
`gfx942`). A kernel built for an architecture runs on it or a newer one, so the newest one named is a
lower bound of the device's generation (exact in practice: libraries pick the newest kernels the
device runs). Order of trust: deviceProperties, then the device name, then kernel names.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

# NVIDIA compute capability -> architecture name.
_NVIDIA = ((10.0, "blackwell"), (9.0, "hopper"), (8.9, "ada"), (8.0, "ampere"), (7.5, "turing"), (7.0, "volta"),
           (6.0, "pascal"), (5.0, "maxwell"), (3.0, "kepler"))
# cuBLAS / cuDNN kernel prefixes (maxwell_ kernels also run on Pascal: a lower bound, as everywhere).
_ARCH_WORDS = {"maxwell": 5.0, "volta": 7.0, "turing": 7.5, "ampere": 8.0, "hopper": 9.0, "blackwell": 10.0}
_ARCH = re.compile(r"(?<![a-z0-9])(maxwell|volta|turing|ampere|hopper|blackwell)_", re.IGNORECASE)
_SM = re.compile(r"(?:(?<![A-Za-z0-9])sm_?|Sm|cutlass_)(\d{2,3})[af]?(?![0-9])")
_KNOWN_SM = {50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121}
_GFX = re.compile(r"(?:ISA|gfx)(9[0-9][0-9a-f]|1[0-2][0-9][0-9a-f])(?![0-9a-z])", re.IGNORECASE)
_AMD = {"908": "cdna1", "90a": "cdna2", "940": "cdna3", "941": "cdna3", "942": "cdna3", "950": "cdna4"}
# Device names (when properties name the device but give no capability).
_NAMES = (
    (r"\bGB?200\b|\bB[12]00\b", 10.0), (r"\bGH200\b|\bH[12]00\b|\bH800\b|\bH20\b", 9.0), (r"\bL40S?\b|\bL4\b", 8.9),
    (r"\bA10G?\b|\bA40\b|\bA16\b|\bA2\b|RTX 30\d0", 8.6), (r"\bA100\b|\bA800\b|\bA30\b", 8.0),
    (r"\bT4\b|RTX 20\d0|Quadro RTX", 7.5), (r"\bV100\b|TITAN V\b", 7.0), (r"\bP100\b|\bP40\b|\bP4\b", 6.0),
)
_AMD_NAMES = ((r"MI3[05]5", "950"), (r"MI30\d", "942"), (r"MI2[05]0|MI210", "90a"), (r"MI100", "908"))


def nvidia_generation(capability: float) -> str:
    return next((name for cap, name in _NVIDIA if capability >= cap), "")


def _sm_capability(digits: str) -> Optional[float]:
    n = int(digits)
    if n not in _KNOWN_SM:
        return None
    return float(f"{n // 10}.{n % 10}")


def _gfx_capability(isa: str) -> float:
    """gfx90a -> 9.0, gfx942 -> 9.4, gfx1100 -> 11.0 (HIP reports gfx major.minor as computeMajor/Minor)."""
    isa = isa.lower()
    return float(f"{int(isa[:-2])}.{int(isa[-2], 16)}")


def from_kernel_names(names: Iterable[str]) -> Optional[tuple]:
    """(capability, generation, the kernel name that showed it) for the newest architecture named, or None."""
    best: Optional[tuple] = None
    for name in names:
        found = []
        for m in _ARCH.finditer(name):
            cap = _ARCH_WORDS[m.group(1).lower()]
            found.append((cap, nvidia_generation(cap)))
        for m in _SM.finditer(name):
            cap = _sm_capability(m.group(1))
            if cap is not None:
                found.append((cap, nvidia_generation(cap)))
        for m in _GFX.finditer(name):
            isa = m.group(1).lower()
            found.append((_gfx_capability(isa), _AMD.get(isa, f"gfx{isa}")))
        for cap, gen in found:
            if best is None or cap > best[0]:
                best = (cap, gen, name)
    return best


def from_device_name(name: str) -> Optional[tuple]:
    """(capability, generation) from a marketing name such as 'Tesla V100-SXM2-32GB', or None."""
    for pattern, isa in _AMD_NAMES:
        if re.search(pattern, name, re.IGNORECASE):
            return _gfx_capability(isa), _AMD[isa]
    for pattern, cap in _NAMES:
        if re.search(pattern, name):
            return cap, nvidia_generation(cap)
    return None


def device_generation(devices: list, vendor: str, kernel_names: Iterable[str]) -> dict:
    """{"compute_capability": float (0.0 unknown), "generation": str ('' unknown), "source": str,
    "evidence": str}: from deviceProperties, else the device name, else the kernel names."""
    names = list(kernel_names)
    for d in devices:
        cap = d.compute_capability
        if cap is not None and cap > 0:
            if vendor == "amd":  # 'AMD Radeon Graphics' says little: the ISA in kernel names names the family
                named = from_device_name(d.name or "") or from_kernel_names(names)
                gen = named[1] if named else ""
            else:
                gen = nvidia_generation(cap)
            return {"compute_capability": cap, "generation": gen, "source": "deviceProperties", "evidence": d.name}
    for d in devices:
        named = from_device_name(d.name or "")
        if named:
            return {"compute_capability": named[0], "generation": named[1], "source": "device name",
                    "evidence": d.name}
    found = from_kernel_names(names)
    if found:
        return {"compute_capability": found[0], "generation": found[1], "source": "kernel names",
                "evidence": found[2]}
    return {"compute_capability": 0.0, "generation": "", "source": "unknown", "evidence": ""}
