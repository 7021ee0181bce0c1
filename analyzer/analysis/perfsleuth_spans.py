"""perfsleuth's own time in a trace: the ranges `run` and `profile()` mark with trace/names.py OWN_SPAN (the
profiler's step and perfsleuth's bookkeeping). An unprofiled run does not spend it, so it is never a step's
time for outliers, never a fix's saving and never the program's (facts/core.py, analysis/forecast/forecaster.py)."""

from __future__ import annotations

import numpy as np

from ..trace.model import ANNOTATION, CPU_OP, Trace
from ..trace.names import OWN_SPAN, name_mask
from ..trace.selection import derived, of_kind
from . import intervals as iv
from .intervals import covered_before


def own_intervals(trace: Trace) -> iv.Intervals:
    """perfsleuth's own ranges (trace ns, merged), found once per analysis."""
    def make() -> iv.Intervals:
        ev = of_kind(trace.events, ANNOTATION, CPU_OP)
        mine = ev[name_mask(ev["name"], lambda n: n == OWN_SPAN)]
        return iv.merge(mine["ts"].to_numpy(np.int64), mine["end"].to_numpy(np.int64))

    return derived(trace.events, ("own intervals",), make)


def own_ns(trace: Trace, starts, ends) -> np.ndarray:
    """Per window [start, end): how much of it is perfsleuth's own time (ns)."""
    ivs = own_intervals(trace)
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    return (covered_before(ivs, ends) - covered_before(ivs, starts)).astype(np.int64)
