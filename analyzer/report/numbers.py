"""The one number of a finding, and the severity that follows it (issue 24: one finding, one number).

A finding may carry three speed-ups, each of a different kind, and never shown as another kind:

- `verified`: measured by `perfsleuth run --verify` on the user's machine (verify/*.py);
- `forecast`: the steady step replayed with the fix applied (analysis/forecast/forecaster.py), a hypothesis;
- `ceiling`: what the fix could buy at most (the whole time it acts on): kept in the JSON, never
  printed as the finding's number, never used for its severity or its rank.

`headline` picks the number every output shows: the measurement when there is one, else the
forecast, else none ("no forecast"). Severity and rank come from it: `severity_for` (>= 1.25x high,
>= 1.05x medium, otherwise low); a finding without a number keeps its rule's severity, at most
medium. Pure functions over report dicts: renderers and the engine share them.
"""

from __future__ import annotations

import math
from typing import Any, Optional

HIGH_SPEEDUP = 1.25  # a fix that buys this much (forecast or measured) is high severity
MEDIUM_SPEEDUP = 1.05  # ... this much, medium; anything less is low
NO_GAIN = 1.02  # a measured fix at or below this bought nothing on this machine
SLOWER = 0.97  # ... below this, it made the program slower
WITHOUT_NUMBER_AT_MOST = "medium"  # a finding without forecast or measurement is never high
SEVERITIES = ("low", "medium", "high")


def _num(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def severity_for(speedup: Optional[float]) -> str:
    """high from HIGH_SPEEDUP, medium from MEDIUM_SPEEDUP, low otherwise (and without a number)."""
    x = _num(speedup)
    if x is None:
        return "low"
    return "high" if x >= HIGH_SPEEDUP else "medium" if x >= MEDIUM_SPEEDUP else "low"


def capped(severity: str, at_most: str = WITHOUT_NUMBER_AT_MOST) -> str:
    """`severity`, lowered to `at_most` when above it."""
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    return severity if rank.get(severity, 0) <= rank[at_most] else at_most


def forecast_severity(forecast: Any) -> Optional[str]:
    """The severity a forecast gives its finding (None without a forecast speed-up): from the speed-up, at most
    WITHOUT_NUMBER_AT_MOST for a rule whose forecasts missed on programs the models were not fitted to
    (`forecast.unseen`, engine/unseen_record.py)."""
    x = headline({"forecast": forecast})["speedup"]
    if x is None:
        return None
    return capped(severity_for(x)) if missed_unseen(forecast) else severity_for(x)


def missed_unseen(forecast: Any) -> bool:
    """Did forecasts of this finding's rule miss on programs the models were not fitted to (`forecast.unseen`)?"""
    rec = forecast.get("unseen") if isinstance(forecast, dict) else None
    return isinstance(rec, dict) and int(rec.get("right", 0)) < int(rec.get("checked", 0))


def measured_severity(verified: dict, bound: Optional[str] = None) -> str:
    """The severity a measured fix (`verified`) gives its finding: from its speed-up, except that a measurement
    whose pairs lie on both sides of 1.0 (outcome "noise") is inconclusive and rates the finding no higher than
    its forecast does (`bound`: `forecast_severity`), nor above WITHOUT_NUMBER_AT_MOST without one."""
    severity = severity_for(verified.get("speedup"))
    if verified.get("outcome") == "noise":
        severity = capped(severity, bound or WITHOUT_NUMBER_AT_MOST)
    return severity


def headline(finding: Any) -> dict:
    """{"kind": "measured" | "forecast" | None, "speedup", "low", "high", "saving_us"} of a finding:
    the number all outputs show for it."""
    f = finding if isinstance(finding, dict) else {}
    for kind, key in (("measured", "verified"), ("forecast", "forecast")):
        obj = f.get(key)
        if isinstance(obj, dict) and _num(obj.get("speedup")) is not None:
            return {"kind": kind, "speedup": _num(obj.get("speedup")), "low": _num(obj.get("low")),
                    "high": _num(obj.get("high")), "saving_us": _num(obj.get("saving_us"))}
    return {"kind": None, "speedup": None, "low": None, "high": None, "saving_us": None}


def ranked(finding: Any) -> dict:
    """The headline (`headline`) a finding is ranked by: its own, except that an inconclusive measurement (outcome
    "noise": pairs on both sides of 1.0) counts for no more than the finding's forecast, as its severity does
    (`measured_severity`) -- else a fix measured 1.09x (0.93-1.20x) against a 1.02x forecast, rated low, led the
    report above a medium one."""
    h = headline(finding)
    v = finding.get("verified") if isinstance(finding, dict) else None
    if h["kind"] != "measured" or not isinstance(v, dict) or v.get("outcome") != "noise":
        return h
    fc = headline({"forecast": finding.get("forecast")})
    if fc["speedup"] is None or fc["speedup"] >= h["speedup"]:
        return h
    return {**h, "speedup": fc["speedup"], "saving_us": fc["saving_us"] if fc["saving_us"] is not None
            and (h["saving_us"] is None or fc["saving_us"] < h["saving_us"]) else h["saving_us"]}


def share_saved(h: dict) -> float:
    """The share of the step a headline (`headline`, `ranked`) saves, 1 - 1/speedup: on every model's step alike
    (a saving in µs is on the step its model states); 0.0 without a speedup above 1."""
    s = h.get("speedup")
    return 1.0 - 1.0 / float(s) if isinstance(s, (int, float)) and not isinstance(s, bool) and s > 1.0 else 0.0


def saving_rank(h: dict) -> tuple:
    """What a headline that saves time is ranked by, larger first: the share of the step it saves (`share_saved`,
    scale-free: the models state their µs on different steps), then its saving per step (µs)."""
    return share_saved(h), h["saving_us"] if h.get("saving_us") is not None else 0.0


def saving_of(finding: Any) -> Optional[float]:
    """The saving per step (µs) a finding is ranked by: measured, else forecast; None without either."""
    h = headline(finding)
    if h["saving_us"] is not None:
        return h["saving_us"]
    return None


TOP_AT_LEAST = MEDIUM_SPEEDUP  # the top finding buys at least this much (measured, else forecast)
NO_TOP = "no finding buys more than 5 %"  # said where the top finding would be when none earns it
_SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}


def rank_group(finding: Any) -> int:
    """Where a finding stands in the report's order (issue 37: the headline is earned):
    0 its number (`ranked`) buys at least TOP_AT_LEAST with a saving; 1 no number, medium or high;
    2 no number, low; 3 a number that buys less than TOP_AT_LEAST, nothing, or costs time (a
    measured slowdown never leads). Groups 0 and 1 may be the top finding (`earns_top`), the others
    never."""
    h = ranked(finding)
    if h["kind"] is None:
        severity = finding.get("severity") if isinstance(finding, dict) else None
        return 1 if _SEVERITY_RANK.get(str(severity), 0) >= _SEVERITY_RANK["medium"] else 2
    saving = h["saving_us"] if h["saving_us"] is not None else 0.0
    return 0 if saving > 0 and (h["speedup"] or 0.0) >= TOP_AT_LEAST else 3


def earns_top(finding: Any) -> bool:
    """May this finding be the report's top finding: the largest saving that buys at least 1.05x, or
    a medium/high finding without a number."""
    return rank_group(finding) in (0, 1)


def top_finding(findings: Any) -> Optional[dict]:
    """The first finding (the report's order: engine/evaluate.order) that earns the top; None when
    none does (then every output says NO_TOP instead of a top finding)."""
    for f in findings or []:
        if isinstance(f, dict):
            return f if earns_top(f) else None
    return None
