"""Findings with a measured fix (`perfsleuth run --verify`, commands/verify*.py): the measurement becomes
the finding's number, its severity and its rank (report/numbers.py: one number per finding).

`apply_verified(findings, verified_by_rule)` sets `finding["verified"]`, the severity from the measured
speed-up (`severity_for`) with `severity_from = "measured"`, and re-orders the findings by saving per
step (`saving_of`: measured, else forecast; findings without a number after, by ceiling). A fix that
measured at most NO_GAIN is demoted to low ("tried: no gain on this machine"), one below SLOWER too
("tried: slower on this machine; don't apply"); a measurement whose pairs lie on both sides of 1.0
("noise") is at most medium, whatever its median.
"""

from __future__ import annotations

from typing import Optional

from ..report.numbers import NO_GAIN, SLOWER, capped, saving_of, severity_for

NO_GAIN_NOTE = "tried: no gain on this machine"
SLOWER_NOTE = "tried: slower on this machine; don't apply"


def rated(verified: dict) -> tuple:
    """(severity, note) of a measurement."""
    speedup = float(verified["speedup"])
    note = verified.get("note") or ""
    noise = verified.get("outcome") == "noise"
    if speedup < SLOWER:
        return "low", SLOWER_NOTE + (" (no difference beyond noise)" if noise else "")
    if speedup <= NO_GAIN:
        return "low", NO_GAIN_NOTE + (" (no difference beyond noise)" if noise else "")
    severity = severity_for(speedup)
    return (capped(severity) if noise else severity), note


def _ceiling_saving(finding: dict) -> float:
    for key in ("ceiling", "bound"):
        obj = finding.get(key)
        if isinstance(obj, dict) and isinstance(obj.get("saving_us"), (int, float)):
            return float(obj["saving_us"])
    return float(finding.get("estimated_saving_us") or 0.0)


def rank_key(finding: dict) -> tuple:
    """Findings with a number first, by saving per step (largest first); then the others, by ceiling."""
    saving: Optional[float] = saving_of(finding)
    return (0, -saving) if saving is not None else (1, -_ceiling_saving(finding))


def apply_verified(findings: list, verified_by_rule: dict) -> list:
    """The findings, each with its measurement (when the rule has one) and re-rated, in rank order."""
    for f in findings:
        v = verified_by_rule.get(f.get("rule"))
        if not isinstance(v, dict) or v.get("speedup") is None:
            continue
        severity, note = rated(v)
        f["verified"] = {**v, "note": note}
        f["severity"], f["severity_from"] = severity, "measured"
    return sorted(findings, key=rank_key)
