"""Efficiency numbers in words, for the verdict (api.py) and every renderer
(render/efficiency_text.py): FLOP/s and bandwidth in decimal units, and the denominator of every
percentage spelled out."""

from __future__ import annotations

from typing import Any, Optional

FAMILY_NAMES = {"matmul": "matmuls", "convolution": "convolutions", "attention": "attention",
                "elementwise": "elementwise", "normalisation": "normalisation",
                "softmax": "softmax", "reduction": "reductions", "embedding": "embedding",
                "copy": "copies"}


def rate(flops_per_s: Optional[float]) -> str:
    """FLOP/s in decimal units (TFLOP/s, GFLOP/s, MFLOP/s)."""
    if flops_per_s is None:
        return "-"
    for scale, unit in ((1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s")):
        if flops_per_s >= scale:
            return f"{flops_per_s / scale:.4g} {unit}"
    return f"{flops_per_s:.3g} FLOP/s"


def count(flops: Optional[float]) -> str:
    """FLOPs in decimal units (TFLOP, GFLOP, ...)."""
    if flops is None:
        return "-"
    for scale, unit in ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP")):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.3g} FLOP"


def bandwidth(bytes_per_s: Optional[float]) -> str:
    """Bytes/s in decimal TB/s or GB/s, as datasheets give memory bandwidth (10^12 and 10^9
    bytes)."""
    if bytes_per_s is None:
        return "-"
    if bytes_per_s >= 1e12:
        return f"{bytes_per_s / 1e12:.3g} TB/s"
    return f"{bytes_per_s / 1e9:.3g} GB/s"


def pct(x: Any) -> str:
    return "-" if x is None else f"{float(x):.1%}"


def peak_text(e: dict) -> str:
    """'the H100 SXM's dense bf16 peak, 990 TFLOP/s (datasheet)' -- the denominator of every
    percentage."""
    if not e.get("peak_flops_per_s"):
        return ""
    kinds = {"datasheet": "datasheet", "measured": "measured on this machine", "user": "user-given"}
    kind = kinds.get(
        str(e.get("peak_kind")), str(e.get("peak_kind") or ""))
    if e.get("peak_kind") == "measured":
        return (f"the measured {e.get('precision')} peak of {e.get('peak_name') or 'this CPU'}, "
                f"{rate(e['peak_flops_per_s'])}")
    if e.get("peak_kind") == "datasheet":
        whose = f"the {e.get('peak_name') or 'device'}'s dense"
    elif e.get("peak_kind") == "user" and e.get("peak_name") in (None, "user-given"):
        whose = "the given"
    else:
        whose = f"the {e.get('peak_name') or 'device'}'s"
    return f"{whose} {e.get('precision')} peak, {rate(e['peak_flops_per_s'])} ({kind})"


def family_summary(e: dict, limit: int = 0) -> str:
    """'matmuls 62 % of roofline, attention 19 %, elementwise at 0.60 of 3.35 TB/s'."""
    parts = []
    families = e.get("families") or []
    for f in families[:limit] if limit else families:
        name = FAMILY_NAMES.get(f.get("family"), str(f.get("family")))
        if f.get("family") in ("matmul", "convolution", "attention"):
            if f.get("pct_of_roofline") is not None:
                parts.append(f"{name} {pct(f['pct_of_roofline'])} of roofline")
        elif f.get("pct_of_bandwidth") is not None and e.get("peak_bytes_per_s"):
            bw = bandwidth(e["peak_bytes_per_s"])
            parts.append(f"{name} at {f['pct_of_bandwidth']:.2f} of {bw}")
    return ", ".join(parts)


def verdict_clause(e: Optional[dict]) -> str:
    """'at 11.8 % of the H100 SXM's dense bf16 peak, 989.5 TFLOP/s (datasheet): matmuls 61.9 % of
    roofline, ...' -- the kernel-bound verdict's degree of efficiency ('' without a known peak)."""
    if not isinstance(e, dict) or e.get("hfu") is None:
        return ""
    fam = family_summary(e, limit=3)
    return f"at {pct(e['hfu'])} of {peak_text(e)}" + (f": {fam}" if fam else "")
