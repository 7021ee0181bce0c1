"""Forecasts: the steady step time after a fix, by replaying a few steady steps with the fix applied.

`Forecaster` takes the steps the facts use (steady steps, once steadiness is known), picks a run of
consecutive ones that fits the node budget and lies closest to the median, builds their dependency
graph (`timeline`), and replays it unchanged -- the self-check: how far the replay lands from the
recording -- and with each fix's edits (`plan`). A model (`MODELS`, registry.py: name -> function) edits a plan
and returns its assumptions; it raises `NoForecast` where no model is good enough. Each forecast is
replayed three times: central, and with the model's pessimistic ("low") and optimistic ("high")
assumptions, widened by the self-check error. Speed-up = replayed step before / replayed step after.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import pandas as pd

from ...trace.model import DEVICE_KINDS, RUNTIME, Trace
from ...trace.names import OWN_SPAN
from ...trace.selection import kind_mask
from .. import intervals as iv
from ..machine import Machine
from .models import batched, device, host, loader  # noqa: F401  (registration by import)
from .models.loader import LOADER_MODELS
from .plan import Plan, plan, remove_host, step_ns, window_step
from .profiler_share import profiler_share
from .registry import MODELS, Inputs, NoForecast, model  # noqa: F401  (re-exported)
from .timeline import build_timeline
from .withheld import MAX_RANGE, no_forecast, unreliable  # noqa: F401  (re-exported)

MAX_NODES = 30_000  # host items + device nodes replayed at most (a few steps of a large trace)
MAX_STEPS = 16
VARIANTS = ("central", "low", "high")


def choose_steps(steps: pd.DataFrame, trace: Trace, max_steps: int = MAX_STEPS) -> pd.DataFrame:
    """The run of consecutive steps to replay: as many as the node budget allows (two at least when a
    step fits it: the first of them is the replay's warm-up), the run whose mean step is closest to
    the median step."""
    steps = steps.sort_values("start").reset_index(drop=True)
    n = len(steps)
    ev = trace.events  # the start times only: no selection of whole rows
    ts = np.sort(ev["ts"].to_numpy()[kind_mask(ev, (RUNTIME, *DEVICE_KINDS))])
    lo = np.searchsorted(ts, steps["host_start"].to_numpy(np.int64))
    hi = np.searchsorted(ts, steps["host_end"].to_numpy(np.int64))
    per_step = 2.0 * float(np.median(hi - lo)) if n else 0.0  # runtime calls and about as many device nodes
    fit = MAX_NODES // max(per_step, 1.0)
    k = int(max(1, min(n, max_steps, max(fit, 2 if per_step <= MAX_NODES else 1))))
    dur = steps["duration"].to_numpy(np.float64) if "duration" in steps else (steps["end"] - steps["start"]).to_numpy()
    med = float(np.median(dur))
    means = np.convolve(dur, np.ones(k) / k, mode="valid")
    first = int(np.argmin(np.abs(means - med)))
    return steps.iloc[first: first + k]


class Forecaster:
    """Forecasts for one trace: `forecast(model)` per fix, `combined(models)` for several at once."""

    def __init__(self, trace: Trace, steps: pd.DataFrame, machine: Machine, node_class: Optional[Callable] = None,
                 max_steps: int = MAX_STEPS):
        self.error: Optional[str] = None
        self.inputs: Optional[Inputs] = None
        # (profiled, unprofiled) median steps in µs where profiling distorted the steps (analysis/measurement.py;
        # make_forecaster sets it): a forecast on the profiled step says so
        self.distortion: Optional[tuple[float, float]] = None
        if steps is None or len(steps) == 0:
            self.error = "no steps to replay"
            return
        if "host_start" not in steps or "host_end" not in steps:
            self.error = "the steps have no host windows"
            return
        chosen = choose_steps(steps, trace, max_steps)
        tl = build_timeline(trace, chosen)
        self.inputs = Inputs(trace=trace, tl=tl, machine=machine, all_steps=steps, node_class=node_class)
        raw = plan(tl)
        replayed, sched = step_ns(raw)
        rec = tl.steps
        self.recorded_ns = window_step(rec["end"].to_numpy(np.float64), float(rec["start"].iloc[0]))
        self.self_check = (replayed - self.recorded_ns) / self.recorded_ns if self.recorded_ns else 0.0
        if not sched.converged:
            self.error = f"the replay did not converge in {sched.rounds} rounds"
        # What an unprofiled run does not spend: the profiler's step and perfsleuth's own bookkeeping.
        self.base = raw.copy()
        self.own_ns = remove_host(self.base, self.inputs.spans(OWN_SPAN)) / len(rec)  # and never a fix's saving
        self.before_ns, _ = step_ns(self.base)
        self._memo: dict = {}
        self._replays: dict = {}
        self._touched: dict = {}  # (model, params) -> what its central edits touched

    # --- the replay's own accuracy ------------------------------------------------------------
    def check(self) -> dict:
        if self.inputs is None:
            return {"available": False, "reason": self.error}
        tl = self.inputs.tl
        return {"available": self.error is None, "reason": self.error, "steps": list(map(str, tl.steps["name"])),
                "host_items": tl.n_items, "device_nodes": tl.n_nodes,
                "recorded_step_us": round(self.recorded_ns / 1000, 3), "replayed_step_us": round(self.before_ns / 1000, 3),
                "self_check_error": round(self.self_check, 4),
                "profiler_step_us": round(self.own_ns / 1000, 3),
                "launch_queue_depth": tl.queue_depth, "launch_queue_observed": tl.queue_observed,
                "unexplained_device_wait_us": round(self.unexplained_ns() / 1000, 3)}

    # --- forecasts ---------------------------------------------------------------------------------
    def _replay(self, models: list, variant: str) -> tuple[float, dict, float, Plan]:
        """The replayed step with the fixes applied, their assumptions, and what they act on per step."""
        p = self.base.fresh()
        assumptions: dict = {}
        # the loader model sees the rest
        for name in sorted(models, key=lambda m: m in LOADER_MODELS):
            said = MODELS[name](self.inputs, p, variant) or {}
            assumptions.update(said if len(models) == 1 else {f"{name}: {k}": v for k, v in said.items()})
        key = p.fingerprint()
        if key not in self._replays:  # variants and combinations often edit the same way
            after, sched = step_ns(p)
            if not sched.converged:
                raise NoForecast(f"the replay with the fix did not converge in {sched.rounds} rounds")
            self._replays[key] = after
        # ... and costs at most the work it adds: replayed from the end of the window's first step, a step
        # whose first step got faster while a wait the replay keeps fixed holds the last one can measure
        # longer (a window of two steps, a device node that started long after its launch).
        after = min(self._replays[key], self.before_ns + p.added_per_step(self.base))
        if after > self._replays[key] - 0.5:
            after = self._replays[key]
        else:
            assumptions["no_slower"] = (f"the fix adds {p.added_per_step(self.base) / 1000:.0f} µs of work per step, "
                                        "so the step grows by that at most: the replayed window measured "
                                        f"{self._replays[key] / 1000:.0f} µs per step, taken as {after / 1000:.0f} µs")
        return after, assumptions, p.acted_per_step(), p

    def unexplained_ns(self) -> float:
        """Device waits the trace does not explain, per step of the measured steps (timeline.py)."""
        tl = self.inputs.tl
        w = tl.extra.get("unexplained_wait")
        if w is None or tl.n_nodes == 0:
            return 0.0
        n = len(tl.steps)
        first = 1 if n >= 2 else 0
        m = (tl.step[tl.d_item] >= first) & (w > 0)
        spans = iv.merge((tl.d_start - w)[m].astype(np.int64), tl.d_start[m].astype(np.int64))  # streams wait together
        return float(iv.total(spans)) / max(n - first, 1)

    @property
    def steps(self) -> int:
        return len(self.inputs.tl.steps) if self.inputs is not None else 0

    def touched(self, model: str, params: Optional[dict] = None) -> Optional[tuple]:
        """The host time and device nodes one model's central edits touch (None: it does not apply)."""
        if self.inputs is None or model not in MODELS:
            return None
        key = (model, tuple(sorted((params or {}).items())))
        if key not in self._touched:
            self.inputs.params = dict(params or {})
            try:
                self._touched[key] = self._replay([model], "central")[3].touched()
            except NoForecast:
                self._touched[key] = None
        return self._touched[key]

    def forecast(self, models, mean_step_us: Optional[float] = None, params: Optional[dict] = None) -> dict:
        """The forecast object of a finding (docs/schema.md) for one model or a list applied together;
        `params` set the fix where a model allows it (`{"workers": 1}`)."""
        models = [models] if isinstance(models, str) else list(models)
        key = (tuple(sorted(models)), tuple(sorted((params or {}).items())))
        if key not in self._memo:
            if self.inputs is not None:
                self.inputs.params = dict(params or {})
            self._memo[key] = self._forecast(models, mean_step_us)
        return self._memo[key]

    def _forecast(self, models: list, mean_step_us: Optional[float]) -> dict:
        label = " + ".join(models)
        unknown = [m for m in models if m not in MODELS]
        if unknown:
            return no_forecast(label, f"unknown model {unknown[0]}")
        if self.error is not None:
            return no_forecast(label, self.error)
        try:
            runs = {v: self._replay(models, v) for v in VARIANTS}
        except NoForecast as exc:
            return no_forecast(label, str(exc))
        if len(models) == 1:
            self._touched[(models[0], tuple(sorted(self.inputs.params.items())))] = runs["central"][3].touched()
        after, assumptions, acted, _ = runs["central"]
        if after <= 0:
            return no_forecast(label, "the replay left no step time")
        # A fix saves at most the time it acts on (whatif: the host work, waits and device time its edits
        # touched), per step of the same steps: each replay's step is at least the step less that time.
        floor = {v: max(runs[v][0], self.before_ns - runs[v][2]) for v in VARIANTS}
        capped = [v for v in VARIANTS if floor[v] > runs[v][0] * (1 + 1e-6) + 1.0]  # beyond rounding
        ratios = {v: self.before_ns / floor[v] if floor[v] > 0 else float("inf") for v in VARIANTS}
        speedup = ratios["central"]
        err = abs(self.self_check)
        ceiling = max(self.before_ns / (self.before_ns - runs[v][2]) if runs[v][2] < self.before_ns else float("inf")
                      for v in VARIANTS)  # the widened range stays within what the fix acts on too
        low, high = min(ratios.values()) / (1 + err), min(max(ratios.values()) * (1 + err), ceiling)
        if not np.isfinite(speedup):
            return no_forecast(label, "the fix would leave no step time")
        step_us = mean_step_us if mean_step_us else self.recorded_ns / 1000
        acted_us = acted / 1000
        # a model that took the profiler's cost out (batched-ops) states its step without it: the saving and the
        # step after the fix on that scale (issue 39: "saves 19.55 ms per step" of a step that ran 15.04 ms unprofiled)
        unprofiled = runs["central"][3].notes.get("unprofiled_step_ns")
        x = self.inputs
        share = None if unprofiled or x.tl.n_nodes else profiler_share(x, x.tl.steps["name"])
        if unprofiled:
            acted_us *= unprofiled / 1000 / step_us
            step_us = unprofiled / 1000
        elif share is not None:  # a CPU run's other models, on the same step as batched-ops' (issue 39's helpers:
            # "step after the fix: 64.68 ms" for fused-optimizer beside tiny-ops' 27.63 ms, in one report)
            f, prof, unprof, whose = share
            acted_us, step_us = acted_us * (1 - f), step_us * (1 - f)
            assumptions["profiled_step"] = (
                f"the saving and the step after the fix are stated on the step without the profiler "
                f"({step_us / 1000:.2f} ms: the profiler took {f:.0%} of a recorded step's CPU time, "
                f"{prof / 1000:.1f} ms of CPU time profiled, {unprof / 1000:.1f} ms without, {whose}, perfsleuth "
                "run's clock); the speed-up is the profiled replay's")
        elif self.distortion:  # "step after the fix: 49.58 ms" beside a step that ran 16.75 ms unprofiled
            prof, unprof = self.distortion
            assumptions["profiled_step"] = (
                f"the saving and the step after the fix are the profiled program's: profiling slowed the steps "
                f"{prof / unprof:.2f}x ({prof / 1000:.2f} ms, {unprof / 1000:.2f} ms without it, measured); the ratio "
                "carries over as far as what the fix removes was slowed as much as the rest of the step (waits are "
                "not slowed: removing them is worth more without the profiler)")
        # the mean step holds what the replay leaves out (perfsleuth's own ranges): on its scale the saving is
        # capped too, the ratio stays the replay's
        saving_us = step_us * (1 - 1 / speedup)
        if saving_us > acted_us * (1 + 1e-6) + 0.001:
            saving_us = acted_us
            capped.append("mean step")
        assumptions["replay"] = (f"{len(self.inputs.tl.steps)} steady step(s) replayed; the unchanged replay "
                                 f"lands {self.self_check:+.1%} from the recording")
        waited = self.unexplained_ns()
        if waited > 0.05 * self.before_ns:
            assumptions["device_waits"] = (f"device work started {waited / 1e6:.2f} ms per step after its launch on an "
                                           "idle stream with nothing in the trace to wait for (another rank, an event, a "
                                           "host callback): the replay keeps those waits, and no fix here removes them")
        if self.own_ns > 0:
            assumptions["profiler"] = (f"the profiler's step and perfsleuth's bookkeeping ({self.own_ns / 1000:.0f} µs "
                                       "per step) left out before and after")
        if capped:
            assumptions["cap"] = (f"capped at the time the fix acts on: {acted / 1000:.0f} µs per step of the "
                                  f"replayed steps (the {', '.join(sorted(set(capped)))} saved more)")
        out = {"kind": "forecast", "speedup": round(speedup, 3), "saving_us": round(saving_us, 3),
               "low": round(min(low, speedup), 3), "high": round(max(high, speedup), 3), "model": label,
               "step_us": round(step_us - saving_us, 3), "acts_on_us": round(acted_us, 3),
               "assumptions": assumptions, "reason": None}
        return unreliable(out) if out["high"] > MAX_RANGE * out["low"] else out
