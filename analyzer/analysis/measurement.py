"""The report's `measurement`: step times measured with and without the profiler (docs/run.md#measurement).

`perfsleuth run` and `profile()` time every step with a cheap clock and record the times in the trace
(`perfsleuth.clock`, commands/step_clock.py): the `wait` steps run before the profiler starts, the
`active` steps are the recorded ones. Here they become

    {"unprofiled_step_us": {median, p90, n, values}, "profiled_step_us": {median, p90, n, values},
     "overhead": profiled median / unprofiled median, "distorted": bool, "note": str}

Unprofiled steps in which torch.compile compiled are left out (`unprofiled_compile_steps` says how many:
`perfsleuth run` records them, commands/compile_facts.py), and so are leading unprofiled steps that are far
slower than the rest, with the rule of the steady state (`phases.py`); profiled steps count when their
ProfilerStep is steady in the trace. When the medians
differ by more than `max_distortion`, `distorted` is true: the shares, the verdict and the savings were
measured on a program the profiler slowed (or sped up) that much, and every report says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .compiling import compiling_unprofiled
from .phases import SteadyRule, leading_warmup
from .steps import Steps


@dataclass(frozen=True)
class MeasurementRule:
    max_distortion: float = 0.25  # profiled and unprofiled medians further apart than this: say so


def _numbers(values) -> list:
    if not isinstance(values, list):
        return []
    out = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return [v for v in out if math.isfinite(v) and v > 0]


def _summary(values: list) -> Optional[dict]:
    if not values:
        return None
    v = np.asarray(values, dtype=np.float64)
    return {"median": round(float(np.median(v)), 3), "p90": round(float(np.percentile(v, 90)), 3),
            "n": int(v.size), "values": [round(float(x), 3) for x in v]}


def _steady_profiled(clock: dict, steps: Steps) -> list:
    """The clock's profiled step times whose ProfilerStep is a steady step of the trace (all of them when
    the names cannot be matched)."""
    values, names = clock.get("profiled_us"), clock.get("profiled_steps")
    if not isinstance(values, list):
        return []
    if not isinstance(names, list) or len(names) != len(values) or "phase" not in steps.frame:
        return _numbers(values)
    phase = dict(zip(steps.frame["name"].astype(str), steps.frame["phase"]))
    if not any(str(n) in phase for n in names):
        return _numbers(values)
    return _numbers([v for v, n in zip(values, names) if phase.get(str(n)) == "steady"])


def measure(run_metadata: dict, steps: Steps, rule: MeasurementRule = MeasurementRule()) -> Optional[dict]:
    """The measurement for a trace recorded by perfsleuth (None for other traces)."""
    clock = run_metadata.get("clock") if isinstance(run_metadata, dict) else None
    if not isinstance(clock, dict) or run_metadata.get("role") == "stacks":  # a stacks companion measures nothing
        return None
    compiled = compiling_unprofiled(run_metadata)  # torch.compile's steps are no measure of the program's step
    values = clock.get("unprofiled_us")
    raw = _numbers([v for i, v in enumerate(values) if not (i < len(compiled) and compiled[i])]
                   if isinstance(values, list) else values)
    lead = leading_warmup(np.asarray(raw, np.float64), np.zeros(len(raw)), SteadyRule()) if raw else 0
    unprofiled, profiled = _summary(raw[lead:]), _summary(_steady_profiled(clock, steps))
    out = {"unprofiled_step_us": unprofiled, "profiled_step_us": profiled, "overhead": None, "distorted": False,
           "unprofiled_warmup_steps": lead}
    if any(compiled):
        out["unprofiled_compile_steps"] = sum(compiled)
    if not unprofiled or not profiled:
        out["note"] = ("no profiled step was timed" if unprofiled else
                       f"every unprofiled step compiled ({sum(compiled)}, torch.compile): no unprofiled step time to "
                       f"compare with (record more --wait steps)" if any(compiled) else
                       "no unprofiled step was timed (the schedule's --wait leaves none after the first)")
        return out
    ratio = profiled["median"] / unprofiled["median"]
    out["overhead"] = round(ratio, 3)
    out["distorted"] = bool(abs(ratio - 1.0) > rule.max_distortion)
    if out["distorted"]:
        out["note"] = (f"profiling changed the step time {ratio:.2f}x (median {profiled['median'] / 1e3:.2f} ms "
                       f"profiled, {unprofiled['median'] / 1e3:.2f} ms without the profiler): the shares, the "
                       f"verdict and the savings describe the profiled program; check them with fewer recorded "
                       f"details (--no-shapes) or larger steps")
    return out
