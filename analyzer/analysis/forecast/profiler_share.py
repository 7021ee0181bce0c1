"""The profiler's share of a recorded step's CPU time, from `perfsleuth run`'s clock (record/step_clock.py): the
forecasts state their saving and the step after the fix on the step without the profiler with it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .registry import Inputs


def profiler_share(x: Inputs, replayed: pd.Series) -> tuple | None:
    """The share of a recorded step's CPU time that was the profiler's, from `perfsleuth run`'s clock (the
    stepping thread's CPU time of every step, with and without the profiler; the process's in older traces):
    (share, profiled µs, unprofiled µs, whose CPU time in words), or None for a trace without it or whose profiled
    steps took no more CPU time. Profiled: the mean of the steps the
    replay has (`replayed`: their names; all profiled steps when the clock does not name them), as the replayed
    step is their mean; a median there set a window whose steps slowed down from 8.9 to 16.6 ms 20 % too slow
    without the profiler (issue 39, fifth round). Unprofiled: the median, one slow step among them left out."""
    meta = x.trace.run_metadata
    clock = meta.get("clock") if isinstance(meta, dict) else None
    if not isinstance(clock, dict):
        return None

    def numbers(v):
        return [t for t in (v or []) if isinstance(t, (int, float))]
    # the stepping thread's CPU time where recorded: with several intra-op threads the others spin between parallel
    # regions, process CPU time the profiler does not cost, and the process's share came out too small (issue 39:
    # an ensemble at 2 threads, 18 % of the process's CPU time where the unprofiled steps were 25 % shorter)
    column = "thread" if clock.get("profiled_thread_us") and clock.get("unprofiled_thread_us") else "cpu"
    cpu, names = clock.get(f"profiled_{column}_us") or [], clock.get("profiled_steps")
    if isinstance(names, list) and len(names) == len(cpu):
        kept = set(replayed)
        cpu = [t for t, name in zip(cpu, names) if name in kept] or cpu
    cpu = numbers(cpu)
    unprofiled = numbers(clock.get(f"unprofiled_{column}_us")) + numbers(clock.get(f"after_{column}_us"))
    prof = float(np.mean(cpu)) if cpu else None
    unprof = float(np.median(unprofiled)) if unprofiled else None
    if not prof or not unprof or unprof >= prof:
        return None
    return 1.0 - unprof / prof, prof, unprof, WHOSE[column]


WHOSE = {"thread": "the stepping thread", "cpu": "all threads"}  # whose CPU time the share is of, in words
