"""Evaluate the compiled rules over `Facts`: a finding dict for every rule whose condition holds, with
the forecast of its fix (engine/forecast.py), ordered by `finding_order`. A rule that fails on one
trace is logged and skipped, never fatal."""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Optional

from ..facts.core import Facts
from .catalog import SEVERITIES, TABLES, Rule
from ..analysis.forecast import no_forecast
from .forecast import Forecasts

log = logging.getLogger(__name__)

def _call(rule: Rule, what: str, fn: Callable, names: dict) -> Any:
    try:
        return fn(**names)
    except Exception as exc:  # a rule that fails on one trace (e.g. division by zero) must not kill the report
        log.warning("rule %s: %s could not be evaluated (%s: %s)", rule.slug, what, type(exc).__name__, exc)
        return None


_RANK = {s: i for i, s in enumerate(SEVERITIES)}


def finding_order(f: dict) -> tuple:
    """Sort key: the forecast saving (the bound where there is no forecast), then severity, then slug."""
    saving = (f.get("forecast") or {}).get("saving_us")
    if saving is None:
        saving = f["estimated_saving_us"]
    return (-saving, -_RANK[f["severity"]], f["rule"])


def evaluate(rules: list, facts: Facts, forecasts: Optional[Forecasts] = None) -> list:
    """Finding dicts for every rule whose condition holds, each with its forecast, in `finding_order`."""
    findings = []
    for rule in rules:
        f = evaluate_rule(rule, facts)
        if f is None:
            continue
        f["forecast"] = forecasts.of(rule.forecast) if forecasts is not None else no_forecast(
            rule.forecast, "evaluated without a replay")
        findings.append(f)
    return sorted(findings, key=finding_order)


def evaluate_rule(rule: Rule, facts: Facts) -> Optional[dict]:
    names = {**facts.values, **{t: facts.tables.get(t, []) for t in TABLES}, **rule.thresholds}
    c = rule.compiled
    if not _call(rule, "condition", c["condition"], names):
        return None
    severity = next((s for s, fn in c["severity_when"] if _call(rule, f"severity_when.{s}", fn, names)),
                    rule.severity)
    step_us = float(facts.values.get("step_us") or 0.0)
    saving = _as_us(rule, _call(rule, "saving_us", c["saving_us"], names), step_us)
    speedup = step_us / (step_us - saving) if step_us > saving else None
    return {
        "rule": rule.slug, "title": rule.title, "category": rule.category, "severity": severity,
        "estimated_saving_us": round(saving, 3),
        "estimated_speedup": round(speedup, 3) if speedup is not None else None,
        "saving_basis": rule.saving_basis,
        "bound": {"saving_us": round(saving, 3), "speedup": round(speedup, 3) if speedup is not None else None,
                  "basis": rule.saving_basis},
        "message": _render(rule, "message", names),
        "evidence": {e: facts.values[e] for e in rule.evidence},
        "thresholds": dict(rule.thresholds),
        "fix": _render(rule, "fix", names),
        "locations": _locations(rule, facts),
        "docs": f"perfsleuth rules {rule.slug}",
    }


def _as_us(rule: Rule, value: Any, step_us: float) -> float:
    """A saving in [0, step]: anything that is not a finite number counts as 0 (with a warning)."""
    try:
        us = float(value or 0.0)
    except (TypeError, ValueError):
        us = math.nan
    if not math.isfinite(us):
        log.warning("rule %s: saving_us is not a finite number (%r); counted as 0", rule.slug, value)
        return 0.0
    return min(max(us, 0.0), step_us)


def _render(rule: Rule, what: str, names: dict) -> str:
    try:
        return rule.compiled[what].render(**names).strip()
    except Exception as exc:
        log.warning("rule %s: %s could not be rendered (%s: %s)", rule.slug, what, type(exc).__name__, exc)
        return ""


def _locations(rule: Rule, facts: Facts) -> list:
    if not rule.locations:
        return []
    return [{"file": r["file"], "line": r["line"], "function": r["function"], "count": r.get("count")}
            for r in facts.tables.get(rule.locations, []) if "file" in r]
