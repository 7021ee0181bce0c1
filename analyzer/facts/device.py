"""Facts about device work: GEMM/convolution dtypes, kernel families, layouts, launch statistics.

GEMM input dtype: the `Input type` of the cpu_op that launched the kernel wins (kernel correlation ->
runtime call -> its External id -> the cpu_op with that External id, checked to enclose the call in
time on the same thread; older traces where the runtime External id is the correlation fall back to
the innermost cpu_op enclosing the runtime call). Without recorded input types the kernel name
decides, by the first matching row of `KERNEL_DTYPE_HINTS` (documented in docs/rules.md).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..trace.lookup import by_id
from ..trace.model import CPU_OP, KERNEL, RUNTIME
from ..trace.names import is_comm, is_memory_kernel, used_categories
from ..trace.selection import of_kind
from .common import Context, innermost_enclosing

# GEMM: cuBLAS/cuBLASLt/CUTLASS names; ROCm: rocBLAS/hipBLASLt (Tensile `Cijk_…`), Composable Kernel.
_GEMM = re.compile(r"(?<!fb)gemm|gemv|xmma|hmma|imma|nvjet|cublas|Cijk_|matmul|_mm_|bmm|rocblas|hipblaslt|tensile",
                   re.IGNORECASE)
# Convolutions: cuDNN names; MIOpen's implicit-GEMM convolutions (`igemm_fwd|bwd|wrw_…`), naive and
# assembly kernels, and Composable Kernel's grouped convolutions and backward-weight GEMMs.
_CONV = re.compile(r"conv(?!ert)|implicit_convolve|fprop|dgrad|wgrad|winograd|igemm_(?:fwd|bwd|wrw)|"
                   r"(?:^|_)wrw_|xdlops_bwd_weight|bwd_weight_xdl", re.IGNORECASE)
_ATTENTION = re.compile(r"flash|attention|fmha|sdpa", re.IGNORECASE)
_LAYOUT = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|batched_transpose|transpose_(?:nchw|cnhw|nhwc)",
                     re.IGNORECASE)
SHORT_KERNEL_NS = 10_000  # a "short" kernel runs under 10 µs

# Kernel-name dtype hints, first match wins (case-insensitive). FP32 inputs running on TF32 tensor
# cores are "tf32"; plain FP32 (SIMT) GEMMs are "fp32". Both count as FP32 GEMMs for the amp rule.
KERNEL_DTYPE_HINTS = (
    ("fp8", r"fp8|e4m3|e5m2|float8"),
    ("bf16", r"bf16|bfloat16|_bbs_|_bss_|_bb_"),
    ("fp16", r"fp16|f16|half|h884|h1688|h16816|hmma|s884|_hhs_|_hss_|_hh_"),
    ("int8", r"int8|i8816|imma|i8i8"),
    ("tf32", r"tf32|s1688|s16816"),
    ("fp32", r"sgemm|f32f32|<float|simt|scudnn|_sb_|float"),
)
_HINTS = [(d, re.compile(p, re.IGNORECASE)) for d, p in KERNEL_DTYPE_HINTS]
# cpu_op "Input type" (first tensor argument) -> dtype
INPUT_TYPE_DTYPES = {
    "float": "fp32", "double": "fp64", "c10::Half": "fp16", "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8", "signed char": "int8", "int8_t": "int8",
}
FP32_DTYPES = ("fp32", "tf32")
REDUCED_DTYPES = ("fp16", "bf16", "fp8", "int8")

DEVICE_FACTS = {
    "kernels_per_step": ("count/step", "kernels launched (compute, collectives and memory kernels)"),
    "kernel_median_us": ("us", "median kernel duration"),
    "short_kernel_share": ("fraction", "fraction of kernels that run under 10 µs"),
    "gemm_share": ("share", "GEMM and convolution kernel time / step time"),
    "gemm_us_per_step": ("us/step", "device time of GEMM and convolution kernels"),
    "gemm_fp32_share": ("fraction", "fraction of GEMM/conv time with FP32 inputs (including TF32 tensor-core kernels)"),
    "gemm_fp32_us_per_step": ("us/step", "device time of GEMM/conv kernels with FP32 inputs"),
    "gemm_tf32_share": ("fraction", "fraction of GEMM/conv time on TF32 tensor-core kernels"),
    "gemm_reduced_share": ("fraction", "fraction of GEMM/conv time in fp16, bf16, fp8 or int8"),
    "gemm_dtype_from_inputs": ("fraction", "fraction of GEMM/conv time whose dtype came from the cpu_op Input type "
                               "(the rest from kernel names)"),
    "conv_share": ("share", "convolution kernel time / step time"),
    "conv_us_per_step": ("us/step", "device time of convolution kernels"),
    "layout_transform_us_per_step": ("us/step", "device time of NCHW<->NHWC layout transform kernels"),
    "layout_transform_share": ("share", "layout transform kernel time / step time"),
    "attention_share": ("share", "attention kernel time (flash / fmha / sdpa) / step time"),
}


def kernel_family(name: str) -> str:
    if is_comm(name):
        return "communication"
    if is_memory_kernel(name):
        return "memory"
    if _LAYOUT.search(name):
        return "layout"
    if _CONV.search(name):
        return "conv"
    if _ATTENTION.search(name):
        return "attention"
    if _GEMM.search(name):
        return "gemm"
    return "other"


def dtype_from_name(name: str) -> str:
    for dtype, rx in _HINTS:
        if rx.search(name):
            return dtype
    return "unknown"


def dtype_from_input_type(in_type: str) -> str:
    first = next((t for t in in_type.split(",") if t), "")
    return INPUT_TYPE_DTYPES.get(first, "unknown" if first else "")


def _map_categories(col: pd.Series, fn) -> np.ndarray:
    """Apply `fn` once per category of a categorical column and map back to rows."""
    codes, used = used_categories(col)  # only the names the rows use (a trace may hold 300,000 step names)
    table = np.full(len(col.cat.categories) + 1, "", dtype=object)  # the last entry: missing names (-1)
    table[used] = [fn(c) for c in col.cat.categories.take(used).tolist()]
    return table[codes]


def launching_ops(ctx: Context, kernels: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """For each kernel: the launching cpu_op's positional index in `ops` (-1 if unknown), and `ops` (a
    copy of the cpu ops with a fresh index, made once per context: the GEMM facts, the forecasts'
    dtypes and the top kernels' launches (report/launches.py) each ask; do not modify it)."""
    ev = ctx.trace.events
    rt = of_kind(ev, RUNTIME)
    row = by_id(ev, (RUNTIME,), "corr").find(kernels["corr"].to_numpy())  # the kernel's first runtime call
    ops = ctx.cached(("launching ops",), lambda: of_kind(ev, CPU_OP).reset_index(drop=True))
    found = row >= 0
    if ops.empty:
        return pd.DataFrame({"op": np.full(len(kernels), -1, dtype=np.int64)}), ops
    calls = pd.DataFrame({c: rt[c].to_numpy(np.int64)[row[found]] for c in ("ts", "pid", "tid", "ext")})
    idx = by_id(ev, (CPU_OP,), "ext").find(calls["ext"].to_numpy())  # the first op with the call's External id
    c = np.clip(idx, 0, None)
    ok = (idx >= 0) & (ops["ts"].to_numpy()[c] <= calls["ts"].to_numpy()) & (
        ops["end"].to_numpy()[c] >= calls["ts"].to_numpy()) & (ops["tid"].to_numpy()[c] == calls["tid"].to_numpy())
    idx = np.where(ok, idx, -1)
    miss = idx < 0
    if miss.any():
        idx[miss] = innermost_enclosing(calls[miss], ops)
    out = np.full(len(kernels), -1, dtype=np.int64)
    out[found] = idx
    return pd.DataFrame({"op": out}), ops


def gemm_dtypes(ctx: Context, gemm: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per GEMM/conv kernel: dtype, and whether it came from the launching op's Input type."""
    by_name = _map_categories(gemm["name"], dtype_from_name)
    if gemm.empty:
        return by_name, np.zeros(0, bool)
    link, ops = launching_ops(ctx, gemm)
    op = link["op"].to_numpy()
    op_types = _map_categories(ops["in_type"], dtype_from_input_type) if len(ops) else np.array([], object)
    from_op = np.where(op >= 0, op_types[np.clip(op, 0, None)] if len(ops) else "", "")
    use_op = np.isin(from_op, list(INPUT_TYPE_DTYPES.values()))
    # An FP32 op whose kernel name says TF32 ran on TF32 tensor cores: keep the finer name answer.
    tf32 = use_op & (from_op == "fp32") & (by_name == "tf32")
    return np.where(use_op & ~tf32, from_op, by_name), use_op


def _gemm_facts(ctx: Context, kern: pd.DataFrame, family: np.ndarray) -> tuple[dict, list]:
    gemm = kern[np.isin(family, ("gemm", "conv"))]
    dtypes, from_inputs = gemm_dtypes(ctx, gemm)
    dur = gemm["dur"].to_numpy(np.float64)
    total = float(dur.sum())

    def frac(mask) -> float:
        return round(float(dur[mask].sum()) / total, 4) if total else 0.0

    fp32 = np.isin(dtypes, FP32_DTYPES)
    table = (pd.DataFrame({"dtype": dtypes, "dur": dur}).groupby("dtype")["dur"].agg(["size", "sum"])
             .sort_values("sum", ascending=False))
    rows = [{"dtype": str(d), "kernels": int(r["size"]), "us_per_step": ctx.per_step_us(r["sum"]),
             "fraction": round(float(r["sum"]) / total, 4) if total else 0.0} for d, r in table.iterrows()]
    return {
        "gemm_share": ctx.share(total),
        "gemm_us_per_step": ctx.per_step_us(total),
        "gemm_fp32_share": frac(fp32),
        "gemm_fp32_us_per_step": ctx.per_step_us(dur[fp32].sum()),
        "gemm_tf32_share": frac(dtypes == "tf32"),
        "gemm_reduced_share": frac(np.isin(dtypes, REDUCED_DTYPES)),
        "gemm_dtype_from_inputs": frac(from_inputs),
    }, rows


def device_facts(ctx: Context) -> tuple[dict, dict]:
    kern = ctx.kind(KERNEL)
    family = _map_categories(kern["name"], kernel_family)
    dur = kern["dur"].to_numpy(np.int64)
    v, dtype_rows = _gemm_facts(ctx, kern, family)
    conv = dur[family == "conv"].sum()
    layout = dur[family == "layout"].sum()
    v.update({
        "kernels_per_step": ctx.per_step(len(kern)),
        "kernel_median_us": round(float(np.median(dur)) / 1000.0, 3) if len(dur) else 0.0,
        "short_kernel_share": round(float((dur < SHORT_KERNEL_NS).mean()), 4) if len(dur) else 0.0,
        "conv_share": ctx.share(conv),
        "conv_us_per_step": ctx.per_step_us(conv),
        "layout_transform_us_per_step": ctx.per_step_us(layout),
        "layout_transform_share": ctx.share(layout),
        "attention_share": ctx.share(dur[family == "attention"].sum()),
    })
    fam = pd.DataFrame({"family": family, "dur": dur}).groupby("family")["dur"].agg(["size", "sum"])
    families = [{"family": str(f), "kernels": int(r["size"]), "us_per_step": ctx.per_step_us(r["sum"]),
                 "share": ctx.share(r["sum"])} for f, r in fam.sort_values("sum", ascending=False).iterrows()]
    return v, {"gemm_dtypes": dtype_rows, "kernel_families": families}

