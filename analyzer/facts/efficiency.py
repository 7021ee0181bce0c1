"""Facts about compute efficiency: the FLOPs and bytes the steps' ops move, the rate they reach, and
how close each op comes to its roofline (analysis/efficiency, docs/efficiency.md).

Which ops: the cpu ops in the steps that have a FLOPs/bytes model, the outermost of them where two
nest (aten::relu over aten::clamp_min; aten::mm under aten::matmul is counted, aten::matmul has no
model). Their time: on a GPU the device time of the kernels (and memsets) their runtime calls launch
(summed: an op's kernels run one after another on its stream); on a CPU the op's own duration.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..analysis import intervals as iv
from ..analysis.efficiency import flops as fl
from ..analysis.efficiency import peaks as pk
from ..analysis.efficiency.roofline import summarise, with_mfu
from ..analysis.efficiency.shapes import FAMILIES, modelled_names, op_models
from ..trace.lookup import by_id
from ..trace.model import CPU_OP, KERNEL, MEMSET, RUNTIME
from ..trace.selection import of_kind, rows
from .common import Context, innermost_enclosing
from .ops import outermost

NO_SHAPES = "record with record_shapes=True: the trace has no input shapes"

EFFICIENCY_FACTS = {
    "efficiency_known": ("bool", "the steps ran ops with a FLOPs/bytes model and recorded shapes"),
    "efficiency_peak_known": ("bool",
                              "a compute peak is known for the device (datasheet, measured, user-"
                              "given)"),
    "flops_per_step": ("flop/step",
                       "FLOPs of the modelled ops per step (forward and backward as recorded)"),
    "step_flops_per_s": ("flop/s", "flops_per_step / mean step time"),
    "hfu": ("fraction",
            "step_flops_per_s / the peak at the step's precision (0 when the peak is unknown)"),
    "efficiency_modelled_share": ("share",
                                  "share of the ops' time (GPU: kernel time) that has a FLOPs "
                                  "model"),
    "matmul_fp32_flops_share": ("share",
                                "share of matmul, convolution and attention FLOPs computed in "
                                "fp32"),
    "matmul_fp32_us_per_step": ("us/step",
                                "time of the fp32 matmuls, convolutions and attention per step"),
    "matmul_pct_of_roofline": ("fraction",
                               "matmuls' roofline time / their measured time (0 when unknown)"),
    "matmul_misaligned_us_per_step": ("us/step",
                                      "time of 16/8-bit matmuls with M, N or K not a multiple of "
                                      "8"),
    "matmul_misaligned_share": ("share", "matmul_misaligned_us_per_step / step time"),
    "matmul_misaligned_lost_us_per_step": ("us/step",
                                           "those matmuls' time above their roofline time per "
                                           "step"),
    "attention_unfused_us_per_step": ("us/step",
                                      "time of softmaxes over written-out score matrices (..., N,"
                                      " N) and of the batched matmuls beside them, when no fused "
                                      "attention op ran"),
    "attention_unfused_share": ("share", "attention_unfused_us_per_step / step time"),
    "vector_memory_us_per_step": ("us/step",
                                  "time of elementwise, copy, normalisation, softmax and "
                                  "reduction ops"),
    "vector_memory_share": ("share", "vector_memory_us_per_step / step time"),
    "vector_memory_ops_per_step": ("count/step", "calls of those ops per step"),
}


def _gpu(ctx: Context) -> bool:
    return bool(ctx.breakdown.has_device and ctx.trace.device_type in ("cuda", "rocm"))


def _peak(ctx: Context, gpu: bool) -> Optional[dict]:
    if ctx.peak is not None:
        return ctx.peak
    if gpu:
        return pk.datasheet_peak(ctx.trace.device_name)
    meta = ctx.trace.run_metadata
    measured = meta.get("peak") if isinstance(meta, dict) else None
    return pk.checked_peak(measured)


def _device_time(ctx: Context, counted) -> tuple:
    """(ns of device work each counted op launched, ns of device work in the steps no counted op
    launched)."""
    ev = ctx.trace.events
    dev = ctx.kind(KERNEL, MEMSET)
    dur = dev["dur"].to_numpy(np.int64)
    runtime = of_kind(ev, RUNTIME)
    at = by_id(ev, (RUNTIME,), "corr").find(dev["corr"].to_numpy(np.int64))
    found = at >= 0
    launch = runtime.iloc[at[found]]
    owner = np.full(len(dev), -1, dtype=np.int64)
    owner[found] = innermost_enclosing(launch, counted)
    mine = owner >= 0
    per_op = np.bincount(owner[mine], weights=dur[mine], minlength=len(counted)).astype(np.int64)
    return per_op, int(dur[~mine].sum())


def _step_ops(ctx: Context, gpu: bool):
    """The cpu ops of the steady steps: those that start in a step's window or, on a GPU, in its host
    window (the step's own annotation). A host that runs ahead of its device launches step N+1's ops
    while step N's window, extended to the end of its device work, is still open: step N+1's window
    then starts after its ops (fixtures/traces/real/mi300_resnet_act_checkpoint: the host is two steps
    ahead), and only its host window holds them. Their kernels' time counts wherever it runs."""
    if not gpu:
        return ctx.kind(CPU_OP)

    def make():
        fr = ctx.steps.frame[ctx.steps.steady_mask()]
        host = iv.merge(fr["host_start"].to_numpy(np.int64), fr["host_end"].to_numpy(np.int64))
        ev = of_kind(ctx.trace.events, CPU_OP)
        return rows(ev, iv.covers(iv.union(ctx.windows, host), ev["ts"].to_numpy(np.int64)))

    return ctx.cached("efficiency_step_ops", make)


def efficiency(ctx: Context) -> dict:
    """{"efficiency": the section or None, "efficiency_unavailable": why (absent when
    available)}."""
    return ctx.cached("efficiency", lambda: _efficiency(ctx))


def _efficiency(ctx: Context) -> dict:
    if not ctx.trace.has_shapes or "in_shape" not in ctx.trace.events:
        return {"efficiency": None, "efficiency_unavailable": NO_SHAPES}
    gpu = _gpu(ctx)
    ops = _step_ops(ctx, gpu)
    counted = outermost(ops, modelled_names(ops["name"])) if len(ops) else ops
    models = op_models(counted)
    keep = models.signature >= 0
    if not keep.any() or not ctx.n_steps:
        return {"efficiency": None,
                "efficiency_unavailable": "no op with a FLOPs model ran in the analysed steps"}
    if gpu:
        per_op, unmodelled = _device_time(ctx, counted)
        unmodelled += int(per_op[~keep].sum())
    else:
        per_op = counted["dur"].to_numpy(np.int64)
        unmodelled = max(ctx.total_ns - int(per_op[keep].sum()), 0)
    peak = _peak(ctx, gpu)
    section = summarise(models, per_op, ctx.n_steps, ctx.total_ns, unmodelled, peak, gpu, top_n=500)
    meta = ctx.trace.run_metadata
    section = with_mfu(section, meta.get("model_flops") if isinstance(meta, dict) else None)
    if peak is None:
        section["peak_unavailable"] = (
            f"no peak for '{ctx.trace.device_name}': give --peak-tflops" if gpu else
            "no peak measured for this CPU: give --peak-tflops (perfsleuth run measures it)")
    out = {"efficiency": section}
    ctx._cache["efficiency_models"] = (counted, models, per_op)
    return out


def efficiency_facts(ctx: Context) -> tuple[dict, dict]:
    got = efficiency(ctx)
    sec = got["efficiency"]
    v = dict.fromkeys(EFFICIENCY_FACTS, 0.0)
    v.update(efficiency_known=sec is not None,
             efficiency_peak_known=bool(sec and sec["peak_flops_per_s"]))
    if sec is None:
        return v, {}
    v.update(flops_per_step=float(sec["flops_per_step"]),
             step_flops_per_s=float(sec["step_flops_per_s"] or 0.0),
             hfu=round(float(sec["hfu"] or 0.0), 4),
             efficiency_modelled_share=round(float(sec["modelled_time_share"] or 0.0), 4))
    _, models, per_op = ctx._cache["efficiency_models"]
    keep = models.signature >= 0
    t = models.table
    matrix = np.isin(models.family, [FAMILIES.index(f) for f in fl.MATRIX_FAMILIES]) & keep
    dtype = np.full(len(models.family), "", dtype=object)
    dtype[keep] = t.loc[models.signature[keep], "dtype"].to_numpy()
    fp32 = matrix & (dtype == "fp32")
    total = float(models.flops[matrix].sum())
    share = float(models.flops[fp32].sum()) / total if total else 0.0
    v["matmul_fp32_flops_share"] = round(share, 4)
    v["matmul_fp32_us_per_step"] = ctx.per_step_us(per_op[fp32].sum())
    mm = next((f for f in sec["families"] if f["family"] == fl.MATMUL), None)
    v["matmul_pct_of_roofline"] = float(mm["pct_of_roofline"] or 0.0) if mm else 0.0
    v.update(_rule_facts(ctx, models, per_op, keep, sec))
    keys = ("name", "shape", "dtype", "count", "time_us", "pct_of_roofline", "bound")
    table = [{k: r[k] for k in keys} for r in sec["ops"]]
    return v, {"efficiency_ops": table}


def _flag(models, keep: np.ndarray, column: str) -> np.ndarray:
    out = np.zeros(len(models.family), dtype=bool)
    out[keep] = models.table.loc[models.signature[keep], column].to_numpy(bool)
    return out


def _rule_facts(ctx: Context, models, per_op: np.ndarray, keep: np.ndarray, sec: dict) -> dict:
    """The numbers the efficiency rules read (rules/efficiency.toml)."""
    fam = models.family
    low = np.zeros(len(fam), dtype=bool)
    t = models.table
    low[keep] = t.loc[models.signature[keep], "dtype"].isin(["bf16", "fp16", "fp8"]).to_numpy()
    mis = _flag(models, keep, "misaligned") & low
    lost = {(o["name"], o["shape"], o["dtype"]): o for o in sec["ops"]}
    mis_rows = t.loc[np.unique(models.signature[mis])] if mis.any() else t.iloc[:0]
    keys = zip(mis_rows["name"], mis_rows["shape"], mis_rows["dtype"])
    mis_lost = sum(lost[k]["lost_us_per_step"] for k in keys if k in lost)
    scores = _flag(models, keep, "scores")
    fused = bool((fam == FAMILIES.index(fl.ATTENTION)).any())
    unfused = 0
    if scores.any() and not fused:  # the softmaxes and the batched matmuls of the same steps
        bmm = np.isin(fam, [FAMILIES.index(fl.MATMUL)]) & _batched(models, keep)
        unfused = int(per_op[scores].sum() + per_op[bmm].sum())
    memory_bound = (fl.ELEMENTWISE, fl.COPY, fl.NORM, fl.SOFTMAX, fl.REDUCE)
    vector = np.isin(fam, [FAMILIES.index(f) for f in memory_bound])
    return {
        "matmul_misaligned_us_per_step": ctx.per_step_us(per_op[mis].sum()),
        "matmul_misaligned_share": ctx.share(per_op[mis].sum()),
        "matmul_misaligned_lost_us_per_step": round(float(mis_lost), 3),
        "attention_unfused_us_per_step": ctx.per_step_us(unfused),
        "attention_unfused_share": ctx.share(unfused),
        "vector_memory_us_per_step": ctx.per_step_us(per_op[vector].sum()),
        "vector_memory_share": ctx.share(per_op[vector].sum()),
        "vector_memory_ops_per_step": ctx.per_step(int(vector.sum())),
    }


def _batched(models, keep: np.ndarray) -> np.ndarray:
    out = np.zeros(len(models.family), dtype=bool)
    names = models.table.loc[models.signature[keep], "name"]
    out[keep] = names.isin(["aten::bmm", "aten::baddbmm"]).to_numpy()
    return out


def efficiency_section(facts, top_n: int = 20) -> dict:
    """The report's `efficiency` / `efficiency_unavailable` keys (api.py puts them in Report.extra),
    with the `top_n` op groups that lose the most time against their roofline."""
    ctx = facts.context
    out = dict(efficiency(ctx)) if ctx is not None else {}
    if out.get("efficiency"):
        out["efficiency"] = {**out["efficiency"], "ops": out["efficiency"]["ops"][:top_n]}
    return out

