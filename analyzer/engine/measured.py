"""Findings with a measured fix (`perfsleuth run --verify`, commands/verify*.py): the measurement becomes
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

import re
from typing import Optional

from ..report.figures import curve_text
from ..report.numbers import NO_GAIN, SLOWER, forecast_severity, measured_severity
from .evaluate import order

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
    if speedup < SLOWER:
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


def best_setting_snippet(fix: str, verified: dict) -> str:
    """The fix's snippet with the setting measured fastest (issue 40): each `key=N` of the best experiment's
    integer parameters (`num_workers=2`) set to its value, the line's comment saying so, and a line that
    names it with the settings tried. Unchanged when the snippet names none of them."""
    changed = False
    out = []
    for line in fix.split("\n"):
        new = line
        for key, value in (verified.get("params") or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                new = re.sub(rf"\b{re.escape(str(key))}=\d+", f"{key}={value}", new)
        if new != line or (verified.get("params") and _names_setting(line, verified)):
            new = re.sub(r"#[^\n]*$", "# measured fastest here by `perfsleuth run --verify`", new)
            changed = True
        out.append(new)
    if not changed:
        return fix
    curve = curve_text(verified)
    said = f" (settings: {curve})" if curve else ""
    return "\n".join(out) + (f"\n\n`{verified.get('variant')}` is the setting measured fastest on this machine by "
                             f"`perfsleuth run --verify`{said}.")


def _names_setting(line: str, verified: dict) -> bool:
    """Does the line already set the best value (`num_workers=2`, the forecast's count too)?"""
    return any(isinstance(v, int) and not isinstance(v, bool) and re.search(rf"\b{re.escape(str(k))}={v}\b", line)
               for k, v in (verified.get("params") or {}).items())
