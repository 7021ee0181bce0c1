"""Levels of one device's memory: the peak, per step (peak, end-of-step level, allocations and
bytes), and the growth from step to step over the steady steps (a least-squares slope of the
end-of-step levels).

Each event belongs to the step whose window [start, end) holds it (analysis/steps.py: disjoint
windows). A step's peak also counts the level it starts with (what the previous steps left
allocated); its end level is the level after the last event before its end, wherever that event
lies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from ..phases import STEADY
from .events import DeviceEvents


@dataclass
class Levels:
    peak_index: int  # row (in the device's events) of the highest allocated level, the first such
    peak_allocated: int
    peak_reserved: Optional[int]  # None without a caching allocator (CPU: Total Reserved is 0)
    reserved_at_peak: Optional[int]  # Total Reserved at the moment of the allocated peak
    steps: (
        pd.DataFrame
    )  # per step: step, phase, peak_allocated, end_allocated, peak_reserved, allocations,
    #   allocated_bytes, freed_bytes (nullable ints: a step without a level is <NA>)
    growth: Optional[int]  # bytes per step over the steady steps (None with fewer than 2 of them)
    growth_steps: int  # steady steps the growth was fitted over
    monotone: bool  # the steady steps' end levels never fall, and rise overall
    step_of_event: np.ndarray  # the step (row of the frame) each event lies in, -1 outside steps


def step_of(ts: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The step window (row) holding each time, -1 outside every window (sorted, disjoint)."""
    si = np.searchsorted(starts, ts, side="right") - 1
    inside = (si >= 0) & (ts < ends[np.clip(si, 0, None)])
    return np.where(inside, si, -1)


def levels(d: DeviceEvents, frame: pd.DataFrame) -> Levels:
    ts, level = d.events.ts, d.level
    peak = int(np.argmax(level))
    reserved = d.events.reserved
    starts = frame["start"].to_numpy(np.int64) if len(frame) else np.zeros(0, np.int64)
    ends = frame["end"].to_numpy(np.int64) if len(frame) else np.zeros(0, np.int64)
    si = step_of(ts, starts, ends) if len(frame) else np.full(ts.size, -1)
    steps = _per_step(d, frame, starts, ends, si)
    growth, n, monotone = _growth(steps)
    return Levels(
        peak_index=peak,
        peak_allocated=int(level[peak]),
        peak_reserved=int(reserved.max()) if d.has_reserved else None,
        reserved_at_peak=int(reserved[peak]) if d.has_reserved else None,
        steps=steps,
        growth=growth,
        growth_steps=n,
        monotone=monotone,
        step_of_event=si,
    )


def _level_before(ts: np.ndarray, level: np.ndarray, t: np.ndarray, relative: bool) -> np.ndarray:
    """The level just before each time in `t` (float, NaN where unknown: no event yet on an absolute
    device; a relative level starts at 0)."""
    idx = np.searchsorted(ts, t, side="left") - 1
    before = np.where(
        idx >= 0, level[np.clip(idx, 0, None)].astype(np.float64), 0.0 if relative else np.nan
    )
    return before


def _per_step(d: DeviceEvents, frame: pd.DataFrame, starts, ends, si: np.ndarray) -> pd.DataFrame:
    ev = d.events
    n = len(frame)
    cols = {
        "step": frame["name"].astype(str).to_numpy() if n else np.zeros(0, object),
        "phase": (
            frame["phase"].astype(str).to_numpy() if n and "phase" in frame else np.full(n, STEADY)
        ),
    }
    if not n:
        return pd.DataFrame(cols)
    g = _segments(si, n, d.level, ev.reserved, ev.bytes)
    start_level = _level_before(ev.ts, d.level, starts, d.relative)
    peak = np.fmax(g["level"], start_level)
    end = _level_before(ev.ts, d.level, ends, d.relative)
    cols.update(
        {
            "peak_allocated": _nullable(peak),
            "end_allocated": _nullable(end),
            "peak_reserved": (
                _nullable(np.fmax(g["reserved"], _level_before(ev.ts, ev.reserved, starts, False)))
                if d.has_reserved
                else pd.array([pd.NA] * n, dtype="Int64")
            ),
            "allocations": g["alloc"],
            "allocated_bytes": g["alloc_bytes"],
            "freed_bytes": g["freed"],
        }
    )
    return pd.DataFrame(cols)


def _segments(si: np.ndarray, n: int, level, reserved, nbytes) -> dict:
    """Per step (row of the frame): the highest level and reserved level (NaN without events),
    allocations, bytes allocated and freed. Events are in time order and steps disjoint, so each
    step's events are one contiguous run: reduceat over the runs' starts, no sort."""
    rows = np.flatnonzero(si >= 0)
    out = {"level": np.full(n, np.nan), "reserved": np.full(n, np.nan)}
    out.update({k: np.zeros(n, np.int64) for k in ("alloc", "alloc_bytes", "freed")})
    if not rows.size:
        return out
    s = si[rows]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    step = s[starts]
    b = nbytes[rows]
    out["level"][step] = np.maximum.reduceat(level[rows], starts)
    out["reserved"][step] = np.maximum.reduceat(reserved[rows], starts)
    out["alloc"][step] = np.add.reduceat((b > 0).astype(np.int64), starts)
    out["alloc_bytes"][step] = np.add.reduceat(np.where(b > 0, b, 0), starts)
    out["freed"][step] = np.add.reduceat(np.where(b < 0, -b, 0), starts)
    return out


def _nullable(values: np.ndarray) -> pd.arrays.IntegerArray:
    """Whole bytes, <NA> where NaN."""
    missing = np.isnan(values)
    out = pd.array(np.where(missing, 0, values).astype(np.int64), dtype="Int64")
    out[missing] = pd.NA
    return out


def _growth(steps: pd.DataFrame) -> tuple:
    """(bytes per step, steady steps fitted, monotone) from the steady steps' end levels."""
    if not len(steps):
        return None, 0, False
    ok = (steps["phase"] == STEADY).to_numpy() & steps["end_allocated"].notna().to_numpy()
    y = steps["end_allocated"].to_numpy(dtype=np.float64, na_value=np.nan)[ok]
    x = np.flatnonzero(ok).astype(np.float64)  # the steps' positions: a step set apart leaves a gap
    if y.size < 2:
        return None, int(y.size), False
    slope = float(np.polyfit(x, y, 1)[0])
    rises = np.diff(y)
    return int(round(slope)), int(y.size), bool((rises >= 0).all() and y[-1] > y[0])
