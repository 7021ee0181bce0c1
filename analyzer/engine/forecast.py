"""Forecasts on findings: each finding's fix replayed with the model its rule names (`forecast` in the
rule's TOML), and one combined forecast for the top fixes applied together (savings never add up).

The replay is built once per analysis, and only when a finding has a model. Anything that goes wrong
in it is one finding's "no forecast" with the reason, never a failed report.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

from ..analysis import intervals as iv
from ..analysis.forecast.models.compile import WINDOW_MODELS, window_forecast
from ..analysis.forecast.forecaster import Forecaster
from ..analysis.forecast.withheld import no_forecast

log = logging.getLogger(__name__)

COMBINED_TOP = 3  # fixes in the combined forecast


class Forecasts:
    """The forecaster of one analysis, made on first use. Models that are not replays (analysis/forecast/models/compile.py:
    torch.compile's fixes act where the steady steps are not) are answered from the facts."""

    def __init__(self, make: Callable[[], Forecaster], step_us: float, facts=None):
        self._make, self.step_us = make, step_us
        self.facts = facts  # facts.core.Facts, for the window models
        self._forecaster: Optional[Forecaster] = None
        self.error: Optional[str] = None

    @property
    def forecaster(self) -> Optional[Forecaster]:
        if self._forecaster is None and self.error is None:
            try:
                self._forecaster = self._make()
            except Exception as exc:  # a trace the replay cannot read is a "no forecast", not a crash
                log.warning("replay unavailable: %s: %s", type(exc).__name__, exc)
                self.error = f"the replay could not be built ({type(exc).__name__})"
        return self._forecaster

    def of(self, models) -> dict:
        label = models if isinstance(models, str) else " + ".join(models)
        if not models:
            return no_forecast("", "no forecast model for this fix")
        if isinstance(models, str) and models in WINDOW_MODELS:
            facts = self.facts
            return window_forecast(models, getattr(facts, "values", None), getattr(facts, "tables", None))
        f = self.forecaster
        if f is None:
            return no_forecast(label, self.error or "no replay")
        try:
            return f.forecast(models, self.step_us)
        except Exception as exc:
            log.warning("forecast %s failed: %s: %s", label, type(exc).__name__, exc)
            return no_forecast(label, f"the model failed on this trace ({type(exc).__name__})")

    def overlaps(self, models: list) -> list:
        """Pairs of models whose edits touch the same host items or device nodes of the replay."""
        f = self.forecaster
        if f is None:
            return []
        touched = {m: f.touched(m) for m in models}
        out = []
        for i, a in enumerate(models):
            for b in models[i + 1:]:
                if touched[a] is None or touched[b] is None:
                    continue
                host = iv.total(iv.subtract(iv.intersect(touched[a][0], touched[b][0]), f.base.cut))
                nodes = int((touched[a][1] & touched[b][1]).sum())
                if host or nodes:
                    out.append({"models": [a, b], "host_us_per_step": round(host / 1000 / f.steps, 1),
                                "device_nodes": nodes})
        return out

    def check(self) -> dict:
        f = self.forecaster
        return f.check() if f is not None else {"available": False, "reason": self.error}


def combined(findings: list, forecasts: Forecasts) -> Optional[dict]:
    """The top fixes that have forecasts, replayed together (one model once). Never below the best of
    them alone unless they change the same host work or device nodes, and then it says so."""
    picked, models, singles = [], [], []
    for f in findings:
        fc = f.get("forecast") or {}
        if fc.get("speedup") is None or fc.get("model") in models or fc.get("model") in WINDOW_MODELS:
            continue  # a window model is no replay edit: it does not combine with the others
        picked.append(f["rule"])
        models.append(fc["model"])
        singles.append(fc)
        if len(models) == COMBINED_TOP:
            break
    if len(models) < 2:
        return None
    out = {**forecasts.of(models), "rules": picked}
    best = max(singles, key=lambda fc: fc["speedup"])
    shared = forecasts.overlaps(models)
    out["overlap"] = shared
    if shared:
        said = "; ".join(f"{o['models'][0]} and {o['models'][1]} change the same {_what(o)}" for o in shared)
        out["assumptions"] = {**out.get("assumptions", {}),
                              "overlap": f"{said}: together they save less than their savings added up"
                                         + (f", and less than {best['model']} alone" if out.get("speedup") is not None
                                            and out["speedup"] < best["speedup"] else "")}
    elif out.get("speedup") is not None and out["speedup"] < best["speedup"]:
        # Fixes that touch different work cannot undo each other: the replay of the set fell below the best
        # single fix through interactions it does not model (e.g. workers slowing the main thread)
        together = out["speedup"]
        out.update({k: best[k] for k in ("speedup", "saving_us", "step_us")})
        out["low"], out["high"] = min(out["low"] or best["low"], best["low"]), max(out["high"] or 0, best["high"])
        out["assumptions"] = {**out.get("assumptions", {}),
                              "floor": f"at least {best['model']} alone: the fixes change different work, and "
                                       f"replayed together they came to {together:.3f}x"}
    return out


def _what(o: dict) -> str:
    parts = []
    if o["host_us_per_step"]:
        parts.append(f"host work ({o['host_us_per_step']:g} µs per step)")
    if o["device_nodes"]:
        parts.append(f"device work ({o['device_nodes']} kernels or copies)")
    return " and ".join(parts)


def report_forecast(findings: list, forecasts: Optional[Forecasts]) -> dict:
    """The report's `forecast` object: the replay's self-check and the combined forecast."""
    if forecasts is None or not any((f.get("forecast") or {}).get("model") for f in findings):
        return {}
    return {"replay": forecasts.check(), "combined": combined(findings, forecasts)}
