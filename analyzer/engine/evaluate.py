"""Evaluate the compiled rules over `Facts`: a finding dict for every rule whose condition holds, with
the forecast of its fix (engine/forecast.py), rated and ordered by its one number (`rate`, `order`:
report/numbers.py), and the rules that could not be checked for lack of a fact (`not_checked`). The
rule's own saving expression gives the finding's `ceiling` (JSON only: what the fix could buy at
most, never shown as the finding's number). A rule that fails on one trace is logged and skipped,
never fatal."""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any, Callable, Optional

from jinja2 import Undefined

from ..analysis.forecast.withheld import no_forecast
from ..facts.core import REQUIREMENTS, Facts
from ..report import numbers
from . import unseen_record
from .catalog import SEVERITIES, TABLES, Rule, RuleError
from .forecast import Forecasts
from .sandbox import BudgetError, metered, render
from .snippets import forecast_setting_snippet

log = logging.getLogger(__name__)
_RANK = {s: i for i, s in enumerate(SEVERITIES)}


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


def rate(finding: dict) -> dict:
    """Set a finding's `severity` and `severity_from` from its one number (report/numbers.py): the
    measurement (`verified`) when there is one, else the forecast: >= 1.25x high, >= 1.05x medium,
    otherwise low; a measurement that says "no difference beyond noise" no higher than the forecast; a forecast
    of a rule whose forecasts missed on programs the models were not fitted to (engine/unseen_record.py) at most
    medium. Without either, the rule's own severity (`severity_when`), at most medium. Idempotent:
    call it again after attaching `verified` (or call `order`, which does)."""
    h = numbers.headline(finding)
    by_forecast = numbers.forecast_severity(finding.get("forecast"))
    if h["kind"] == "measured":  # an inconclusive measurement rates no higher than the forecast does
        finding["severity"] = numbers.measured_severity(finding["verified"], by_forecast)
        finding["severity_from"] = "measured"
    elif h["kind"] is not None:  # the forecast's number
        finding["severity"], finding["severity_from"] = by_forecast, h["kind"]
    elif finding.get("severity_from") in (None, "rule"):  # the rule's severity is still there: cap it
        finding["severity"] = numbers.capped(str(finding.get("severity") or "low"))
        finding["severity_from"] = "rule"
    else:  # a number it was rated from went away (edited by hand): no number, no severity above low
        finding["severity"], finding["severity_from"] = "low", "rule"
    return finding


def _ceiling_saving(finding: dict) -> float:
    ceiling = finding.get("ceiling")
    value = ceiling.get("saving_us") if isinstance(ceiling, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def sort_key(finding: dict) -> tuple:
    """Findings whose number (measured, else forecast; an inconclusive measurement no more than the
    forecast: numbers.ranked) buys at least numbers.TOP_AT_LEAST (1.05x) first, by that saving per
    step; then findings without a number, medium and high before low, each by their ceiling; then
    those whose number buys less, next to nothing or costs time (a reason not to apply the fix,
    never a lead: numbers.rank_group). A saving is ranked by the share of the step it saves (1 - 1/speedup), then
    by its µs: models state their savings on different steps (batched-ops on the step without the profiler, the
    others on the profiled one; issue 39's unseen helpers saw fused-optimizer's 8.91 ms "per step" of the profiled
    step lead tiny-ops' 6.80 ms of the unprofiled one, 1.10x above 1.15x).
    Ties: severity (high first), then slug. The first finding is the top one only when it earns it
    (numbers.top_finding)."""
    group = numbers.rank_group(finding)
    if group in (1, 2):
        share, amount = 0.0, _ceiling_saving(finding)
    else:
        share, amount = numbers.saving_rank(numbers.ranked(finding))
    return (group, -share, -amount, -_RANK.get(finding.get("severity"), 0), str(finding.get("rule", "")))


def order(findings: list) -> list:
    """Each finding rated again (`rate`: severity follows a `verified` measurement attached since), then
    ranked by `sort_key`: the first finding is the largest saving."""
    return sorted((rate(f) for f in findings), key=sort_key)


finding_order = sort_key  # the sort key alone (order() also re-rates each finding)


def evaluate(rules: list, facts: Facts, forecasts: Optional[Forecasts] = None) -> list:
    """Finding dicts for every rule whose condition holds, each with the forecast of its fix, in `order`."""
    findings = []
    for rule in rules:
        f = evaluate_rule(rule, facts)
        if f is None:
            continue
        if not rule.forecast and rule.no_forecast:  # a ceiling only, and why (rules/efficiency.toml)
            f["forecast"] = {**no_forecast("", rule.no_forecast), "ceiling_only": True}
        else:
            f["forecast"] = forecasts.of(rule.forecast) if forecasts is not None else no_forecast(
                rule.forecast, "evaluated without a replay")
        f["fix"] = forecast_setting_snippet(f["fix"], f["forecast"])
        record = unseen_record.of(rule.slug)
        if record is not None and isinstance(f["forecast"], dict):
            f["forecast"] = {**f["forecast"], "unseen": record}
        findings.append(f)
    return order(findings)


def names_for(rule: Rule, facts: Facts) -> dict:
    return {**facts.values, **{t: facts.tables.get(t, []) for t in TABLES}, **rule.thresholds}


def unmet(rule: Rule, facts: Facts) -> list:
    """The rule's requirements (facts.core.REQUIREMENTS) this trace does not meet."""
    return [r for r in rule.requires if not facts.values.get(REQUIREMENTS[r][0])]


def not_checked(rules: list, facts: Facts, findings: list) -> list:
    """Rules that did not fire, lack a fact they require, and apply to this trace (their `applies`
    expression holds): [{"rule", "title", "missing", "reason"}]. Never skipped silently."""
    fired = {f["rule"] for f in findings}
    out = []
    for rule in rules:
        missing = unmet(rule, facts)
        if rule.slug in fired or not missing:
            continue
        with _bounded(rule):
            applies = _call(rule, "applies", rule.compiled["applies"], names_for(rule, facts))
        if not applies:
            continue
        out.append({"rule": rule.slug, "title": _title(rule, facts), "missing": missing,
                    "reason": "; ".join(REQUIREMENTS[m][1] for m in missing)})
    return out


def _title(rule: Rule, facts: Facts) -> str:
    return rule.cpu.get("title", rule.title) if not facts.values.get("device_is_gpu") else rule.title


def evaluate_rule(rule: Rule, facts: Facts) -> Optional[dict]:
    """The finding of `rule` on `facts`, or None. A rule that goes past the engine's bounds (time,
    size of what it builds or renders: sandbox.py) is a RuleError naming its file."""
    with _bounded(rule):
        return _evaluate_rule(rule, facts)


@contextlib.contextmanager
def _bounded(rule: Rule):
    """Rule code in this block runs against a fresh budget (sandbox.metered); past it, a RuleError."""
    try:
        with metered():
            yield
    except BudgetError as exc:
        raise RuleError(f"{rule.source}: rule '{rule.slug}' {exc}") from None


def rule_severity(rule: Rule, facts: Facts) -> str:
    """The rule's own severity on `facts` (`severity`, or the first `severity_when` that holds): what a
    finding without a forecast or a measurement shows, at most medium (`rate`)."""
    with _bounded(rule):
        return _rule_severity(rule, names_for(rule, facts))


def _rule_severity(rule: Rule, names: dict) -> str:
    return next((s for s, fn in rule.compiled["severity_when"] if _call(rule, f"severity_when.{s}", fn, names)),
                rule.severity)


def _evaluate_rule(rule: Rule, facts: Facts) -> Optional[dict]:
    names = names_for(rule, facts)
    c = rule.compiled
    if not _call(rule, "condition", c["condition"], names):
        return None
    severity = _rule_severity(rule, names)
    step_us = float(facts.values.get("step_us") or 0.0)
    saving = _as_us(rule, _call(rule, "saving_us", c["saving_us"], names), step_us)
    speedup = step_us / (step_us - saving) if step_us > saving else None
    cpu = not facts.values.get("device_is_gpu")
    basis = rule.cpu.get("saving_basis", rule.saving_basis) if cpu else rule.saving_basis
    return rate({
        "rule": rule.slug, "title": _title(rule, facts), "category": rule.category, "severity": severity,
        "ceiling": {"saving_us": round(saving, 3), "speedup": round(speedup, 3) if speedup is not None else None,
                    "basis": basis},
        "message": _render(rule, "message", names),
        "evidence": {e: facts.values[e] for e in rule.evidence},
        "thresholds": dict(rule.thresholds),
        "fix": _render(rule, "fix", names),
        "locations": _locations(rule, facts),
        "docs": f"perfsleuth rules {rule.slug}",
    })


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


LOCATION_KEYS = ("file", "line", "function", "count", "line_kind")


def _locations(rule: Rule, facts: Facts) -> list:
    if not rule.locations:
        return []
    return [{k: r.get(k) for k in LOCATION_KEYS if k in r or k == "count"}
            for r in facts.tables.get(rule.locations, []) if "file" in r]
