"""Event times as read (float µs) to the int64 nanoseconds of the event table (model.py).

Times are made relative to the earliest usable event; events without a numeric timestamp, or absurdly far
from the rest (one `ts: 1e308` must not push every other event out of range), are dropped and said; the
resolution the timestamps carry as read is kept (`Trace.time_resolution_ns`), and said when it is a
microsecond or coarser (1e17 µs: 16 µs), so that rounding is not taken for time.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

_FAR_US = 4e15  # an event this far (127 years) from the trace's median time is absurd: it is dropped
_LONG_NS = 1e18  # and so is a duration this long (31 years): ts + dur stays inside int64 nanoseconds


def normalise(cols: dict, trace) -> Optional[np.ndarray]:
    """Turn ts/dur into int64 ns from the earliest event (in place) and return the rows to keep, in
    start order; None when no event has a usable timestamp. The origin is taken among the events near
    the median time, so one absurd timestamp (1e308, -1e300) is dropped instead of pushing every
    other event out of range."""
    warnings = trace.warnings
    ts, dur = cols["ts"], cols["dur"]
    missing = np.isnan(ts)
    if missing.any():
        warnings.append(f"{int(missing.sum())} events without a numeric timestamp were dropped")
    finite = np.isfinite(ts)
    if not finite.any():
        if (~missing).any():
            warnings.append(f"{int((~missing).sum())} events with absurd timestamps or durations were dropped "
                            f"(e.g. ts {ts[~missing][0]:g} µs)")
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        far = ~missing & ~(np.abs(ts - np.median(ts[finite])) <= _FAR_US)
        bad_dur = (~np.isfinite(dur) | (dur < 0)) & ~missing & ~far
        if bad_dur.any():
            warnings.append(f"{int(bad_dur.sum())} events with a missing, negative or non-numeric duration "
                            "were counted as zero-length")
        long = ~missing & ~far & ~bad_dur & (dur * 1000.0 > _LONG_NS)
    huge = far | long
    if huge.any():
        i = int(np.flatnonzero(huge)[0])
        example = f"ts {ts[i]:g} µs" if far[i] else f"dur {dur[i]:g} µs"
        warnings.append(f"{int(huge.sum())} events with absurd timestamps or durations were dropped "
                        f"(e.g. {example}: more than a century away from the rest of the trace)")
    keep = ~(missing | huge)
    if not keep.any():
        return None
    t0 = float(ts[keep].min())
    _resolution(trace, float(np.abs(ts[keep]).max()))
    with np.errstate(invalid="ignore", over="ignore"):  # the dropped rows may overflow
        ts_ns = np.rint((ts - t0) * 1000.0)
        dur_ns = np.rint(np.where(np.isfinite(dur) & (dur > 0), dur, 0.0) * 1000.0)
    cols["ts"] = np.where(keep, ts_ns, 0).astype(np.int64)
    cols["dur"] = np.where(keep, dur_ns, 0).astype(np.int64)
    trace.t0_us = t0
    rows = np.flatnonzero(keep)
    return rows[np.argsort(cols["ts"][rows], kind="stable")]


def _resolution(trace, largest_us: float) -> None:
    """The finest time step the trace's timestamps carry as read (double precision, µs): 0.25 µs around the
    1.7e15 µs of Kineto's epoch times, 16 µs around 1e17. Differences finer than that are rounding, not
    time: the step finder does not call them overlaps (`time_resolution_ns`), and from 1 µs on it is said."""
    step_us = float(np.spacing(largest_us))
    trace.time_resolution_ns = int(np.ceil(step_us * 1000.0))
    if step_us >= 1.0:
        trace.warnings.append(f"timestamps around {largest_us:.3g} µs are resolved to only {step_us:g} µs as read "
                              "(double precision): durations and gaps shorter than that are not exact")
