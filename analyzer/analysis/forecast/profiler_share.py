"""The profiler's share of a recorded step's CPU time, from `perfsleuth run`'s clock (record/step_clock.py): the
forecasts state their saving and the step after the fix on the step without the profiler with it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .registry import Inputs


def profiler_share(x: Inputs, replayed: pd.Series) -> tuple | None:
    """The share of a recorded step's CPU time that was the profiler's, from `perfsleuth run`'s clock (the
    process CPU time of every step, with and without the profiler): (share, profiled µs, unprofiled µs), or None
    for a trace without it or whose profiled steps took no more CPU time. Profiled: the mean of the steps the
    replay has (`replayed`: their names; all profiled steps when the clock does not name them), as the replayed
    step is their mean; a median there set a window whose steps slowed down from 8.9 to 16.6 ms 20 % too slow
    without the profiler (issue 39, fifth round). Unprofiled: the median, one slow step among them left out."""
    meta = x.trace.run_metadata
    clock = meta.get("clock") if isinstance(meta, dict) else None
    if not isinstance(clock, dict):
        return None

    def numbers(v):
        return [t for t in (v or []) if isinstance(t, (int, float))]
    cpu, names = clock.get("profiled_cpu_us") or [], clock.get("profiled_steps")
    if isinstance(names, list) and len(names) == len(cpu):
        kept = set(replayed)
        cpu = [t for t, name in zip(cpu, names) if name in kept] or cpu
    cpu = numbers(cpu)
    unprofiled = numbers(clock.get("unprofiled_cpu_us")) + numbers(clock.get("after_cpu_us"))
    prof = float(np.mean(cpu)) if cpu else None
    unprof = float(np.median(unprofiled)) if unprofiled else None
    if not prof or not unprof or unprof >= prof:
        return None
    return 1.0 - unprof / prof, prof, unprof
