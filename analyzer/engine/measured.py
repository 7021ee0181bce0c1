"""Findings with a measured fix (`perfsleuth run --verify`, verify/*.py): the measurement becomes
the finding's number, its severity and its rank (report/numbers.py: one number per finding).

`apply_verified(findings, verified_by_rule)` sets `finding["verified"]` with the note its speed-up calls
for, then rates and orders the findings as the engine does (`evaluate.order`: severity from the measured
speed-up, `severity_from = "measured"`, the largest saving first). A fix that measured at most NO_GAIN
is low with "tried: no gain on this machine", one below SLOWER "tried: slower on this machine; don't
apply"; a measurement whose pairs lie on both sides of 1.0 says "no difference beyond noise" and rates
the finding no higher than its forecast does (`rated`).
`api.recheck` does the ordering again and checks the verdict against the new numbers.
"""

from __future__ import annotations

from typing import Optional

from ..report.numbers import NO_GAIN, SLOWER, forecast_severity, measured_severity
from .evaluate import order
from .snippets import best_setting_snippet

NO_GAIN_NOTE = "tried: no gain on this machine"
SLOWER_NOTE = "tried: slower on this machine; don't apply"
NOISE_NOTE = "no difference beyond noise"


def rated(verified: dict, forecast: Optional[dict] = None) -> tuple:
    """(severity, note) of a measurement: the severity `evaluate.rate` gives it, and the words for it.

    A measurement whose pairs lie on both sides of 1.0 ("no difference beyond noise") is inconclusive: it
    cannot rate a finding above what its forecast (`forecast`, the finding's forecast object) rates it, nor above
    medium without one -- the median of such pairs alone made a fix [medium] or [high] that the same
    measurement says may buy nothing."""
    speedup = float(verified["speedup"])
    noise = verified.get("outcome") == "noise"
    if speedup < SLOWER and not noise:  # "don't apply" needs a slowdown beyond noise
        note = SLOWER_NOTE
    elif speedup <= NO_GAIN:
        note = NO_GAIN_NOTE
    else:
        return measured_severity(verified, forecast_severity(forecast)), NOISE_NOTE if noise else ""
    return "low", note + (f" ({NOISE_NOTE})" if noise else "")


def apply_verified(findings: list, verified_by_rule: dict) -> list:
    """The findings, each with its measurement (when the rule has one), rated again and in rank order."""
    for f in findings:
        v = verified_by_rule.get(f.get("rule"))
        if not isinstance(v, dict) or v.get("speedup") is None:
            continue
        f["verified"] = {**v, "note": rated(v)[1]}
        if v.get("outcome") == "faster" and isinstance(f.get("fix"), str):
            f["fix"] = best_setting_snippet(f["fix"], f["verified"])
    return order(findings)
