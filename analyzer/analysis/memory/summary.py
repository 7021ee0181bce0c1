"""The memory section of a report (docs/schema.md#memory): per device, the peak allocated and
reserved, overall and per step, the end-of-step level and its growth over the steady steps, what
the allocator did in each step, the ops holding the peak, what is kept from step to step and
never freed, fragmentation, headroom to the device's capacity and out-of-memory events.
JSON-ready dicts, bytes as integers.

`summarize` also returns, per device, the rows of the allocations behind its tables (`Detail`): the
fact provider (facts/memory.py) names their source lines where the trace has Python stacks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...config import MEMORY_TOP_OPS
from ...trace.model import Trace
from ..steps import Steps
from .attribution import OUTSIDE, by_op, enclosing_ops, frees_of
from .events import DeviceEvents, per_device
from .levels import Levels, levels

CPU_NOTE = (
    "CPU levels are relative: they count what was allocated after profiling began (tensors made "
    "before, such as parameters, are not seen)"
)
SERIES_POINTS = 300  # slices of the window in the level series (the HTML plot)
CATEGORY_KEYS = (
    "parameter",
    "gradient",
    "optimizer_state",
    "activation",
    "input",
    "temporary",
    "other",
)


@dataclass
class Detail:
    """The rows (into the device's events) behind a device's tables, for source lines."""

    device: DeviceEvents
    at_peak: np.ndarray  # allocations alive at the peak
    kept: np.ndarray  # allocations kept past their step's end and never freed in the window


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def _capacity(trace: Trace, d: DeviceEvents) -> Optional[int]:
    if d.is_cpu:
        return None
    for i, dev in enumerate(trace.devices):
        if (dev.id if dev.id is not None else i) == d.device_id and dev.memory_bytes:
            return int(dev.memory_bytes)
    return None


def series(d: DeviceEvents, buckets: int = SERIES_POINTS) -> dict:
    """The allocated level over the window for a plot: the highest and lowest level in each of
    `buckets` equal slices of time (so no peak is lost), at the slices' starts (µs from the
    trace's origin)."""
    ts, level = d.events.ts, d.level
    lo, hi = int(ts[0]), int(ts[-1])
    width = max((hi - lo) / buckets, 1.0)
    b = np.minimum(((ts - lo) / width).astype(np.int64), buckets - 1)
    edges = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    return {
        "t_us": [_us(int(lo + k * width)) for k in b[edges].tolist()],
        "max_bytes": np.maximum.reduceat(level, edges).tolist(),
        "min_bytes": np.minimum.reduceat(level, edges).tolist(),
        "end_us": _us(hi),
    }


def _steps(lv: Levels, frame) -> list:
    st = lv.steps

    def ints(col):
        return [
            None if v is None else int(v)
            for v in st[col].astype(object).where(st[col].notna(), None)
        ]

    cols = {k: ints(k) for k in ("peak_allocated", "end_allocated", "peak_reserved")}
    rows = zip(
        st["step"].tolist(),
        st["phase"].tolist(),
        cols["peak_allocated"],
        cols["end_allocated"],
        cols["peak_reserved"],
        st["allocations"].tolist(),
        st["allocated_bytes"].tolist(),
        st["freed_bytes"].tolist(),
    )
    starts = (frame["start"].to_numpy(np.int64) / 1000.0).tolist() if len(frame) else []
    ends = (frame["end"].to_numpy(np.int64) / 1000.0).tolist() if len(frame) else []
    return [
        {
            "step": s,
            "phase": p,
            "peak_allocated_bytes": pa,
            "end_allocated_bytes": ea,
            "peak_reserved_bytes": pr,
            "allocations": int(a),
            "allocated_bytes": int(ab),
            "freed_bytes": int(fb),
            "start_us": t0,
            "end_us": t1,
        }
        for (s, p, pa, ea, pr, a, ab, fb), t0, t1 in zip(rows, starts, ends)
    ]


def _at_peak(trace: Trace, d: DeviceEvents, lv: Levels, frees: np.ndarray) -> tuple:
    """(ops table, basis, rows, bytes allocated before the window) of what holds the peak."""
    ev, p = d.events, lv.peak_index
    upto = np.arange(p + 1)
    if d.has_addr:
        alive = upto[(ev.bytes[upto] > 0) & ((frees[upto] < 0) | (frees[upto] > p))]
        names = enclosing_ops(trace, ev.take(alive))
        seen = int(ev.bytes[alive].sum())
        before = max(lv.peak_allocated - seen, 0) if not d.relative else 0
        return (
            by_op(names, ev.bytes[alive], MEMORY_TOP_OPS),
            "alive at the peak (paired by Addr)",
            alive,
            before,
        )
    step = lv.step_of_event[p]
    first = int(np.flatnonzero(lv.step_of_event == step)[0]) if step >= 0 else 0
    rows = np.arange(first, p + 1)
    names = enclosing_ops(trace, ev.take(rows))
    return (
        by_op(names, ev.bytes[rows], MEMORY_TOP_OPS),
        "net bytes from the peak step's start to the peak (no Addr)",
        rows[ev.bytes[rows] > 0],
        None,
    )


def _kept(trace: Trace, d: DeviceEvents, lv: Levels, frees: np.ndarray) -> tuple:
    """Allocations made inside a step, never freed in the window, and made before the last step with
    allocator events began: they outlive their step (a leak keeps them step after step)."""
    if not d.has_addr:
        return [], np.zeros(0, np.int64), 0
    si = lv.step_of_event
    stepped = np.flatnonzero(si >= 0)
    if not stepped.size:
        return [], np.zeros(0, np.int64), 0
    last = si[stepped[-1]]
    rows = stepped[(d.events.bytes[stepped] > 0) & (frees[stepped] < 0) & (si[stepped] < last)]
    names = enclosing_ops(trace, d.events.take(rows))
    return (
        by_op(names, d.events.bytes[rows], MEMORY_TOP_OPS, si[rows]),
        rows,
        int(d.events.bytes[rows].sum()),
    )


def _oom(trace: Trace, d: DeviceEvents, lv: Levels, frame) -> list:
    rows = np.flatnonzero(d.events.oom)
    if not rows.size:
        return []
    names = enclosing_ops(trace, d.events.take(rows))
    ev = d.events
    step_names = frame["name"].astype(str).tolist() if len(frame) else []
    return [
        {
            "at_us": _us(int(ev.ts[r])),
            "step": step_names[lv.step_of_event[r]] if lv.step_of_event[r] >= 0 else None,
            "op": None if n == OUTSIDE else str(n),
            "bytes": int(ev.bytes[r]),
            "allocated_bytes": int(ev.allocated[r]) if ev.allocated[r] >= 0 else None,
            "reserved_bytes": int(ev.reserved[r]) if ev.reserved[r] >= 0 else None,
        }
        for r, n in zip(rows.tolist(), names)
    ]


def device_summary(trace: Trace, steps: Steps, d: DeviceEvents) -> tuple:
    """(the device's JSON dict, Detail)."""
    lv = levels(d, steps.frame)
    frees = frees_of(d.events) if d.has_addr else np.full(len(d.events), -1)
    top, basis, alive, before = _at_peak(trace, d, lv, frees)
    kept, kept_rows, kept_bytes = _kept(trace, d, lv, frees)
    capacity = _capacity(trace, d)
    high = max(lv.peak_allocated, lv.peak_reserved or 0)
    headroom = capacity - high if capacity is not None and not d.relative else None
    growth = lv.growth
    until_full = (
        headroom // growth
        if headroom is not None and growth and growth > 0 and lv.monotone
        else None
    )
    peak_step = lv.step_of_event[lv.peak_index]
    frag = None
    if lv.peak_reserved is not None:
        frag = {
            "peak_reserved_over_allocated": (
                round(lv.peak_reserved / lv.peak_allocated, 4) if lv.peak_allocated else None
            ),
            "reserved_unused_at_peak_bytes": int(lv.reserved_at_peak - lv.peak_allocated),
            "reserved_over_allocated_bytes": int(lv.peak_reserved - lv.peak_allocated),
        }
    out = {
        "device": d.label,
        "levels": "relative" if d.relative else "absolute",
        "caching_allocator": bool(d.has_reserved),
        "events": len(d.events),
        "peak_allocated_bytes": lv.peak_allocated,
        "peak_reserved_bytes": lv.peak_reserved,
        "peak_at_us": _us(int(d.events.ts[lv.peak_index])),
        "peak_step": str(steps.frame["name"].iloc[peak_step]) if peak_step >= 0 else None,
        "capacity_bytes": capacity,
        "headroom_bytes": headroom,
        "growth_bytes_per_step": growth,
        "growth_steps": lv.growth_steps,
        "growth_monotone": lv.monotone,
        "steps_until_full": int(until_full) if until_full is not None else None,
        "steps": _steps(lv, steps.frame),
        "series": series(d),
        "top_ops_at_peak": top,
        "top_ops_at_peak_basis": basis,
        "allocated_before_window_bytes": before,
        "kept_across_steps": kept,
        "kept_across_steps_bytes": kept_bytes,
        "fragmentation": frag,
        "out_of_memory": _oom(trace, d, lv, steps.frame),
        "categories_at_peak": None,
        "missing": list(d.missing),
        "notes": [CPU_NOTE] if d.is_cpu else [],
    }
    return out, Detail(d, alive, kept_rows)


def summarize(trace: Trace, steps: Steps) -> tuple:
    """(memory dict or None, memory_unavailable or None, [Detail]) of a trace's own events."""
    devices = per_device(trace.memory)
    if not devices:
        return None, None, []
    dicts, details = zip(*(device_summary(trace, steps, d) for d in devices))
    return {"source": "trace", "devices": list(dicts)}, None, list(details)
