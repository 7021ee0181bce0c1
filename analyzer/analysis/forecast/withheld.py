"""The forecast object of a finding (docs/schema.md) when there is none, or none worth showing: pure
dicts, no numpy or pandas, so that what only words a forecast (`perfsleuth rules`) need not load the
replay (analysis/forecast/forecaster.py re-exports these)."""

from __future__ import annotations

MAX_RANGE = 3.0  # a forecast whose optimistic end is over this many times its pessimistic end is no forecast


def no_forecast(model: str, reason: str) -> dict:
    """The forecast object when there is none: the reason instead of numbers (never a bound)."""
    return {"kind": "none", "speedup": None, "saving_us": None, "low": None, "high": None, "model": model or None,
            "assumptions": {}, "reason": reason}


def unreliable(fc: dict) -> dict:
    """A forecast whose assumptions span more than MAX_RANGE (high / low) tells the user nothing: no
    speed-up and no saving, the range kept, and the reason naming it."""
    return {**fc, "kind": "unreliable", "speedup": None, "saving_us": None, "step_us": None,
            "reason": (f"no reliable forecast: its assumptions give {fc['low']:.2f}-{fc['high']:.2f}x "
                       f"(more than {MAX_RANGE:g}x apart; the central one {fc['speedup']:.2f}x)")}
