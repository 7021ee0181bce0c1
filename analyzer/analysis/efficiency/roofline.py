"""The roofline per op (grouped by op, shapes and dtype) and per step, from each modelled call's
FLOPs, bytes and measured time, against a peak (peaks.py).

Per group: achieved FLOP/s and bytes/s, arithmetic intensity, the roofline time max(FLOPs / compute
peak, bytes / bandwidth), the percent of it reached (roofline time / measured time) and what bounds
it. Per step: FLOPs, bytes, the step's FLOP/s and its share of the peak at the step's precision
(HFU: every FLOP the hardware ran, recomputation included). All with numpy over the calls; the only
Python loop is over the groups kept for the report.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from . import flops as fl
from . import peaks as pk
from .shapes import FAMILIES, OpModels

VECTOR_KIND, MATRIX_KIND = "vector", "matrix"


def kind_of(family: str) -> str:
    return MATRIX_KIND if family in fl.MATRIX_FAMILIES else VECTOR_KIND


def _group_peaks(table, peak: Optional[dict], gpu: bool) -> tuple:
    """(compute FLOP/s, bandwidth) per row of the signature table (NaN where unknown)."""
    n = len(table)
    comp = np.full(n, np.nan)
    if peak is None:
        return comp, np.nan
    for i, (fam, dtype) in enumerate(zip(table["family"].tolist(), table["dtype"].tolist())):
        name = FAMILIES[fam]
        value = pk.compute_peak(peak, kind_of(name), dtype, tf32_convs=gpu and name == fl.CONV)
        comp[i] = value if value else np.nan
    bw = pk.bandwidth(peak)
    return comp, (bw if bw else np.nan)


def _tf32_where_proven(t, comp: np.ndarray, flops: np.ndarray, busy: np.ndarray,
                       peak) -> np.ndarray:
    """An fp32 matrix op group that ran faster than the FP32 units allow ran on TF32 tensor cores
    (torch.backends.cuda.matmul.allow_tf32, set_float32_matmul_precision): its roof is the TF32
    peak."""
    tf32 = pk.compute_peak(peak, MATRIX_KIND, "tf32") if peak else None
    if not tf32 or not len(t):
        return comp
    matrix = np.isin(t["family"].to_numpy(), [FAMILIES.index(f) for f in fl.MATRIX_FAMILIES])
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(busy > 0, flops / (busy / 1e9), 0.0)
        proven = matrix & (t["dtype"].to_numpy() == "fp32") & (rate > comp * 1.05)
    return np.where(proven, tf32, comp)


def step_precision(models: OpModels) -> str:
    """The precision of the matrix ops that carry the most FLOPs ("fp32" when there are none)."""
    t = models.table
    if t.empty:
        return "fp32"
    sig = models.signature[models.signature >= 0]
    counts = np.bincount(sig, minlength=int(t.index.max()) + 1)[t.index.to_numpy()]
    total = t["flops"].to_numpy(np.float64) * counts
    matrix = np.isin(t["family"].to_numpy(), [FAMILIES.index(f) for f in fl.MATRIX_FAMILIES])
    if not matrix.any() or total[matrix].sum() <= 0:
        return "fp32"
    by = {}
    for d, f in zip(t["dtype"].to_numpy()[matrix].tolist(), total[matrix].tolist()):
        by[d] = by.get(d, 0.0) + f
    return max(by, key=by.get)


def summarise(models: OpModels, time_ns: np.ndarray, n_steps: int, step_ns: int, unmodelled_ns: int,
              peak: Optional[dict], gpu: bool, top_n: int = 20) -> dict:
    """The `efficiency` object of the report (docs/schema.md) from the modelled calls' times."""
    t = models.table
    keep = models.signature >= 0
    sig = models.signature[keep]
    size = int(t.index.max()) + 1 if len(t) else 0
    count = np.bincount(sig, minlength=size)
    total_ns = np.bincount(sig, weights=time_ns[keep].astype(np.float64), minlength=size)
    ids = t.index.to_numpy(np.int64)
    t = t.assign(count=count[ids] if size else 0, time_ns=total_ns[ids] if size else 0.0)
    t = t[t["count"] > 0]
    f_call, b_call = t["flops"].to_numpy(np.float64), t["bytes"].to_numpy(np.float64)
    calls, busy = t["count"].to_numpy(np.float64), t["time_ns"].to_numpy(np.float64)
    comp, bw = _group_peaks(t, peak, gpu)
    comp = _tf32_where_proven(t, comp, f_call * calls, busy, peak)
    with np.errstate(divide="ignore", invalid="ignore"):
        # NaN only where both are unknown
        roof_ns = np.fmax(f_call / comp, b_call / bw) * 1e9 * calls
        pct = np.where(busy > 0, roof_ns / busy, np.nan)
        compute_bound = (f_call / comp) >= (b_call / bw)
    flops_total, bytes_total = float((f_call * calls).sum()), float((b_call * calls).sum())
    busy_total = busy.sum()
    precision = step_precision(models)
    peak_flops = pk.compute_peak(peak, MATRIX_KIND, precision) if peak else None
    peak_bytes = pk.bandwidth(peak) if peak else None
    step_s = step_ns / 1e9 / n_steps if n_steps else 0.0
    per_step_flops = flops_total / n_steps if n_steps else 0.0
    step_rate = per_step_flops / step_s if step_s else None
    lost = np.where(np.isnan(roof_ns), busy, np.clip(busy - roof_ns, 0, None))
    lost = lost / 1000.0 / max(n_steps, 1)
    order = np.argsort(-lost, kind="stable")[:top_n]
    over = np.flatnonzero(pct > 1.05)  # faster than the roofline allows
    ops = [_op_row(t, i, f_call, b_call, calls, busy, pct, compute_bound, roof_ns, lost, n_steps)
           for i in order]
    timed = busy_total + unmodelled_ns
    return {
        "flops_per_step": int(round(per_step_flops)),
        "bytes_per_step": int(round(bytes_total / n_steps)) if n_steps else 0,
        "achieved_flops_per_s": flops_total / (busy_total / 1e9) if busy_total else None,
        "step_flops_per_s": step_rate,
        "step_time_us": round(step_s * 1e6, 3) if step_s else None,
        "peak_flops_per_s": peak_flops,
        "peak_bytes_per_s": peak_bytes,
        "peak_source": peak.get("source") if peak else None,
        "peak_name": peak.get("name") if peak else None,
        "peak_kind": peak.get("kind") if peak else None,
        "precision": precision,
        "hfu": (step_rate / peak_flops) if (step_rate and peak_flops) else None,
        "mfu": None,
        "modelled_time_share": busy_total / timed if timed else None,
        "time_basis": ("device time of the op's kernels" if gpu
                       else "the op's own time on the CPU"),
        "families": _families(t, f_call, b_call, calls, busy, roof_ns, n_steps, comp, bw),
        "ops": ops,
        "warning": (f"{len(over)} op group(s) ran faster than their roofline allows: they moved "
                    "fewer bytes than their shapes say (a broadcast or repeated input, data in "
                    "cache), the peak is too low, or their work ran elsewhere (a device the trace "
                    "does not hold)")
        if len(over) else None,
    }


NOT_RUN = ("no model FLOPs: only `perfsleuth run --record-shapes` counts them (one step under "
           "torch's FlopCounterMode)")


def with_mfu(section: dict, model_flops: Optional[dict]) -> dict:
    """The section with MFU: the model's FLOPs per step (FlopCounterMode's count of one step, from
    `perfsleuth run`'s metadata: record/model_flops.py) / the mean step time / the same peak as HFU.
    `mfu_unavailable` says why it is null."""
    mf = model_flops if isinstance(model_flops, dict) else {}
    flops = mf.get("flops_per_step")
    cost = {"step_s": mf.get("step_s"), "unprofiled_step_s": mf.get("unprofiled_step_s")}
    out = {**section, "model_flops_per_step": flops if flops else None,
           "model_flops_source": mf.get("source") if flops else None,
           "model_flops_cost": cost if flops else None, "mfu": None, "mfu_unavailable": None}
    step_us, peak = section.get("step_time_us"), section.get("peak_flops_per_s")
    if not flops:
        out["mfu_unavailable"] = mf.get("unavailable") or NOT_RUN
    elif not peak:
        out["mfu_unavailable"] = "no peak for the device"
    elif step_us:  # the step time HFU divides by
        out["mfu"] = flops / (step_us / 1e6) / peak
    else:
        out["mfu_unavailable"] = "no step time"
    return out


def _op_row(t, i, f_call, b_call, calls, busy, pct, compute_bound, roof_ns, lost, n_steps) -> dict:
    row = t.iloc[i]
    secs = busy[i] / 1e9
    known = not np.isnan(pct[i])
    return {
        "name": str(row["name"]), "shape": str(row["shape"]), "dtype": str(row["dtype"]),
        "family": FAMILIES[int(row["family"])], "count": int(calls[i]),
        "flops": int(f_call[i]), "bytes": int(b_call[i]),
        "time_us": round(busy[i] / 1000.0 / calls[i], 3),
        "flops_per_s": (f_call[i] * calls[i] / secs) if secs else None,
        "bytes_per_s": (b_call[i] * calls[i] / secs) if secs else None,
        "intensity": (f_call[i] / b_call[i]) if b_call[i] else None,
        "roofline_us": round(roof_ns[i] / 1000.0 / calls[i], 3) if known else None,
        "pct_of_roofline": round(float(pct[i]), 4) if known else None,
        "bound": ("compute" if compute_bound[i] else "memory") if known else None,
        "lost_us_per_step": round(float(lost[i]), 3),
    }


def _families(t, f_call, b_call, calls, busy, roof_ns, n_steps, comp, bw) -> list:
    """Per family: FLOPs and time per step, the share of its roofline reached, and the achieved
    rates."""
    fam = t["family"].to_numpy()
    out = []
    for code in np.unique(fam).tolist():
        m = fam == code
        b = busy[m].sum()
        fl_sum, by_sum = float((f_call[m] * calls[m]).sum()), float((b_call[m] * calls[m]).sum())
        roof = roof_ns[m]
        known = ~np.isnan(roof)
        out.append({
            "family": FAMILIES[code], "flops_per_step": int(round(fl_sum / max(n_steps, 1))),
            "time_us_per_step": round(b / 1000.0 / max(n_steps, 1), 3),
            "flops_per_s": fl_sum / (b / 1e9) if b else None,
            "bytes_per_s": by_sum / (b / 1e9) if b else None,
            "pct_of_roofline": round(float(roof[known].sum() / busy[m][known].sum()), 4)
            if known.any() and busy[m][known].sum() else None,
            "pct_of_bandwidth": (round(by_sum / (b / 1e9) / bw, 4) if b and not np.isnan(bw)
                                 else None),
        })
    return sorted(out, key=lambda r: -r["time_us_per_step"])
