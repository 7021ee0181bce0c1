"""Evaluate the compiled rules over `Facts`: a finding dict for every rule whose condition holds,
ordered by estimated saving. A rule that fails on one trace is logged and skipped, never fatal."""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Optional

from jinja2 import Undefined

from ..facts.core import Facts
from .catalog import SEVERITIES, TABLES, Rule, RuleError
from .sandbox import BudgetError, metered, render

log = logging.getLogger(__name__)

def _call(rule: Rule, what: str, fn: Callable, names: dict) -> Any:
    try:
        value = fn(**names)
        if isinstance(value, Undefined):  # e.g. `x[y]` on a number: raises only when used, outside this try
            value._fail_with_undefined_error()
        return value
    except BudgetError:
        raise
    except Exception as exc:  # a rule that fails on one trace (e.g. division by zero) must not kill the report
        log.warning("rule %s: %s could not be evaluated (%s: %s)", rule.slug, what, type(exc).__name__, exc)
        return None


def evaluate(rules: list, facts: Facts) -> list:
    """Finding dicts for every rule whose condition holds, ordered by estimated saving (largest first)."""
    findings = [f for f in (evaluate_rule(r, facts) for r in rules) if f is not None]
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (-f["estimated_saving_us"], -rank[f["severity"]], f["rule"]))


def evaluate_rule(rule: Rule, facts: Facts) -> Optional[dict]:
    """The finding of `rule` on `facts`, or None. A rule that goes past the engine's bounds (time,
    size of what it builds or renders: sandbox.py) is a RuleError naming its file."""
    try:
        with metered():
            return _evaluate_rule(rule, facts)
    except BudgetError as exc:
        raise RuleError(f"{rule.source}: rule '{rule.slug}' {exc}") from None


def _evaluate_rule(rule: Rule, facts: Facts) -> Optional[dict]:
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
    except Exception:  # TypeError, ValueError, OverflowError, or whatever a sandbox object raises
        us = math.nan
    if not math.isfinite(us):
        log.warning("rule %s: saving_us is not a finite number (%.40r); counted as 0", rule.slug, value)
        return 0.0
    return min(max(us, 0.0), step_us)


def _render(rule: Rule, what: str, names: dict) -> str:
    try:
        return render(rule.compiled[what], names).strip()
    except BudgetError:
        raise
    except Exception as exc:
        log.warning("rule %s: %s could not be rendered (%s: %s)", rule.slug, what, type(exc).__name__, exc)
        return ""


def _locations(rule: Rule, facts: Facts) -> list:
    if not rule.locations:
        return []
    return [{"file": r["file"], "line": r["line"], "function": r["function"], "count": r.get("count")}
            for r in facts.tables.get(rule.locations, []) if "file" in r]
