"""Memory facts (rules/memory.toml) from the report's memory section (analysis/memory/), of the
device that matters: the first accelerator with allocator events, else the CPU. Source lines of
what is kept across steps and of what holds the peak come from the Python stacks of the trace the
events were read from.

Bytes are integers; 0 stands for "not known" where a fact cannot be None (the `*_known` facts say
which)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from ..analysis.memory import Memory, analyze_memory
from ..analysis.memory.summary import CATEGORY_KEYS
from .common import Context
from .locations import location_rows, startup_names, user_frames

MEMORY_FACTS = {
    "memory_recorded": (
        "bool",
        (
            "the trace (or the memory companion a run recorded beside it) has allocator events "
            "([memory]; profile_memory=True)"
        ),
    ),
    "memory_device": (
        "text",
        "the device the memory facts describe (cuda:0, cpu, ...); '' without allocator events",
    ),
    "memory_on_cpu": (
        "bool",
        "that device is the CPU: levels are relative (what was allocated after profiling began)",
    ),
    "memory_peak_bytes": ("bytes", "highest allocated level (Total Allocated) in the window"),
    "memory_peak_reserved_bytes": (
        "bytes",
        "highest reserved level (caching allocator; 0 without one)",
    ),
    "memory_capacity_bytes": (
        "bytes",
        "the device's memory (deviceProperties totalGlobalMem); 0 when unknown",
    ),
    "memory_headroom_bytes": (
        "bytes",
        (
            "capacity minus the higher of peak allocated and peak reserved; 0 when "
            "unknown (memory_headroom_known)"
        ),
    ),
    "memory_headroom_known": ("bool", "capacity and absolute levels are known"),
    "memory_used_share": (
        "share",
        "peak (the higher of allocated and reserved) / capacity; 0 when unknown",
    ),
    "memory_growth_bytes_per_step": (
        "bytes/step",
        (
            "slope of the end-of-step allocated level over the steady steps "
            "(least squares); 0 with fewer than 2 steady steps"
        ),
    ),
    "memory_growth_steps": ("count", "steady steps the growth was fitted over"),
    "memory_growth_monotone": (
        "bool",
        "the end-of-step level never falls over the steady steps and rises overall",
    ),
    "memory_growth_share": ("share", "growth per step / peak allocated"),
    "memory_steps_until_full": (
        "count",
        (
            "headroom / growth per step, a forecast at a steady growth; -1 when not "
            "known (no capacity, no growth)"
        ),
    ),
    "memory_kept_bytes": (
        "bytes",
        (
            "bytes allocated inside steps, kept past their step's end and never freed in the "
            "window (paired by Addr)"
        ),
    ),
    "memory_kept_op": ("text", "the op that allocated most of those bytes ('' when none)"),
    "memory_kept_op_bytes": ("bytes", "bytes that op allocated and never freed"),
    "memory_kept_op_steps": ("count", "steps in which that op allocated bytes never freed"),
    "memory_caching_allocator": (
        "bool",
        "the device reports Total Reserved (a caching allocator: CUDA, ROCm)",
    ),
    "memory_reserved_ratio": (
        "ratio",
        "peak reserved / peak allocated (0 without a caching allocator)",
    ),
    "memory_reserved_gap_bytes": (
        "bytes",
        "peak reserved minus peak allocated (0 without a caching allocator)",
    ),
    "memory_oom_events": ("count", "out-of-memory events ([OutOfMemory]) in the trace"),
    "memory_oom_op": ("text", "the op that hit the first of them ('' when none or outside any op)"),
    "memory_oom_bytes": ("bytes", "the allocation that failed first"),
    "memory_categories_known": (
        "bool",
        "the run measured categories at the peak (perfsleuth run / profile())",
    ),
    "memory_categories_total_bytes": ("bytes", "the categories at the peak, summed"),
    "memory_activation_share": ("share", "activations' share of the categories at the peak"),
    "memory_optimizer_share": ("share", "optimizer state's share of the categories at the peak"),
    "memory_batch_fits_factor": (
        "ratio",
        (
            "how many times today's activations fit in the headroom plus themselves "
            "(capacity - peak + activations) / activations, a forecast; 0 when not known"
        ),
    ),
}
for _k in CATEGORY_KEYS:
    MEMORY_FACTS[f"memory_{_k}_bytes"] = (
        "bytes",
        f"{_k.replace('_', ' ')} bytes at the peak (the run's categories; 0 when not measured)",
    )
TABLES = ("memory_kept_sites", "memory_peak_sites")


def memory_of(ctx: Context) -> Memory:
    """The memory analysis of the context's trace, once per analysis."""
    return ctx.cached("memory", lambda: analyze_memory(ctx.trace, ctx.steps))


def primary(section: Optional[dict]) -> Optional[dict]:
    """The device the facts describe: the first accelerator, else the CPU."""
    devices = section["devices"] if section else []
    return devices[0] if devices else None


def memory_facts(ctx: Context) -> tuple[dict, dict]:
    mem = memory_of(ctx)
    d = primary(mem.section)
    v = {k: 0 for k in MEMORY_FACTS}
    v.update(
        {
            "memory_recorded": d is not None,
            "memory_device": "",
            "memory_on_cpu": False,
            "memory_kept_op": "",
            "memory_oom_op": "",
            "memory_headroom_known": False,
            "memory_growth_monotone": False,
            "memory_caching_allocator": False,
            "memory_categories_known": False,
            "memory_steps_until_full": -1,
        }
    )
    if d is None:
        return v, {t: [] for t in TABLES}
    peak, reserved, cap = (
        d["peak_allocated_bytes"],
        d["peak_reserved_bytes"] or 0,
        d["capacity_bytes"] or 0,
    )
    kept = d["kept_across_steps"]
    oom = d["out_of_memory"]
    v.update(
        {
            "memory_device": d["device"],
            "memory_on_cpu": d["device"] == "cpu",
            "memory_peak_bytes": peak,
            "memory_peak_reserved_bytes": reserved,
            "memory_capacity_bytes": cap,
            "memory_headroom_known": d["headroom_bytes"] is not None,
            "memory_headroom_bytes": d["headroom_bytes"] or 0,
            "memory_used_share": (
                round(max(peak, reserved) / cap, 4)
                if d["headroom_bytes"] is not None and cap
                else 0
            ),
            "memory_growth_bytes_per_step": d["growth_bytes_per_step"] or 0,
            "memory_growth_steps": d["growth_steps"],
            "memory_growth_monotone": d["growth_monotone"],
            "memory_growth_share": (
                round((d["growth_bytes_per_step"] or 0) / peak, 6) if peak else 0
            ),
            "memory_steps_until_full": (
                d["steps_until_full"] if d["steps_until_full"] is not None else -1
            ),
            "memory_kept_bytes": d["kept_across_steps_bytes"],
            "memory_kept_op": kept[0]["op"] if kept else "",
            "memory_kept_op_bytes": kept[0]["bytes"] if kept else 0,
            "memory_kept_op_steps": kept[0]["steps"] if kept else 0,
            "memory_caching_allocator": d["caching_allocator"],
            "memory_reserved_ratio": (
                (d["fragmentation"] or {}).get("peak_reserved_over_allocated") or 0
            ),
            "memory_reserved_gap_bytes": (
                (d["fragmentation"] or {}).get("reserved_over_allocated_bytes") or 0
            ),
            "memory_oom_events": len(oom),
            "memory_oom_op": (oom[0]["op"] or "") if oom else "",
            "memory_oom_bytes": oom[0]["bytes"] if oom else 0,
        }
    )
    _categories(v, d)
    tables = _sites(mem, d)
    d["kept_across_steps_sites"] = tables["memory_kept_sites"]
    d["top_sites_at_peak"] = tables["memory_peak_sites"]
    return v, tables


def _categories(v: dict, d: dict) -> None:
    cats = d.get("categories_at_peak")
    if not cats:
        return
    total = sum(cats.values())
    v["memory_categories_known"] = True
    v["memory_categories_total_bytes"] = total
    for k in CATEGORY_KEYS:
        v[f"memory_{k}_bytes"] = cats[k]
    v["memory_activation_share"] = round(cats["activation"] / total, 4) if total else 0
    v["memory_optimizer_share"] = round(cats["optimizer_state"] / total, 4) if total else 0
    act = cats["activation"]
    if act > 0 and v["memory_headroom_known"]:
        v["memory_batch_fits_factor"] = round((v["memory_headroom_bytes"] + act) / act, 2)


def _sites(mem: Memory, d: dict) -> dict:
    """Source lines (with bytes) of the kept allocations and of those alive at the peak, where the
    trace the events came from has Python stacks."""
    out = {t: [] for t in TABLES}
    trace = mem.trace
    detail = next((x for x in mem.details if x.device.label == d["device"]), None)
    if trace is None or detail is None or not trace.has_stacks:
        return out
    n = int(mem.steps.steady_mask().sum()) if mem.steps is not None else 0
    for table, rows in (("memory_kept_sites", detail.kept), ("memory_peak_sites", detail.at_peak)):
        out[table] = _bytes_sites(trace, detail.device.events, rows, n)
    return out


def _bytes_sites(trace, ev, rows: np.ndarray, n_steps: int) -> list:
    if not rows.size:
        return []
    pts = pd.DataFrame({"ts": ev.ts[rows], "pid": ev.pid[rows], "tid": ev.tid[rows]})
    frames = user_frames(trace, pts).to_numpy()
    keep = frames != ""
    if not keep.any():
        return []
    df = pd.DataFrame(
        {"name": frames[keep], "count": 1, "bytes": ev.bytes[rows][keep].astype(np.int64)}
    )
    agg = df.groupby("name").sum().sort_values("bytes", ascending=False, kind="stable")
    out = location_rows(agg[["count"]], n_steps, startup_names(trace))
    for row, b in zip(out, agg["bytes"].tolist()):
        row["bytes"] = int(b)
    return out
