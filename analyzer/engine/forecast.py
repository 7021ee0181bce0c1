"""Forecasts on findings: each finding's fix replayed with the model its rule names (`forecast` in the
rule's TOML), and one combined forecast for the top fixes applied together (savings never add up).

The replay is built once per analysis, and only when a finding has a model. Anything that goes wrong
in it is one finding's "no forecast" with the reason, never a failed report.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

from ..analysis.fc_compile import WINDOW_MODELS, window_forecast
from ..analysis.forecast import Forecaster, no_forecast

log = logging.getLogger(__name__)

COMBINED_TOP = 3  # fixes in the combined forecast


class Forecasts:
    """The forecaster of one analysis, made on first use. Models that are not replays (analysis/fc_compile.py:
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

    def check(self) -> dict:
        f = self.forecaster
        return f.check() if f is not None else {"available": False, "reason": self.error}


def combined(findings: list, forecasts: Forecasts) -> Optional[dict]:
    """The top fixes that have forecasts, replayed together (one model once)."""
    picked, models = [], []
    for f in findings:
        fc = f.get("forecast") or {}
        if fc.get("speedup") is None or fc.get("model") in models or fc.get("model") in WINDOW_MODELS:
            continue  # a window model is no replay edit: it does not combine with the others
        picked.append(f["rule"])
        models.append(fc["model"])
        if len(models) == COMBINED_TOP:
            break
    if len(models) < 2:
        return None
    out = forecasts.of(models)
    return {**out, "rules": picked}


def report_forecast(findings: list, forecasts: Optional[Forecasts]) -> dict:
    """The report's `forecast` object: the replay's self-check and the combined forecast."""
    if forecasts is None or not any((f.get("forecast") or {}).get("model") for f in findings):
        return {}
    return {"replay": forecasts.check(), "combined": combined(findings, forecasts)}
