"""From timed windows to a measurement (`perfsleuth run --verify`): pure functions, no torch.

A window's time is the mean of its timed steps (a loader with workers makes some steps wait and not
others: the mean is the throughput). Windows alternate A B A B ...; each A with the B after it is a pair,
and its ratio is A's mean step over B's: above 1 the variant is faster. The measured speed-up is the
median of the pair ratios; low and high are the smallest and largest. When they lie on both sides of
1.0 the outcome is "noise" (no difference beyond noise); else faster / no gain / slower by
report/numbers.py's NO_GAIN and SLOWER. `verified_by_rule`: the best setting of each rule's fixes.
"""

from __future__ import annotations

import statistics
from typing import Optional

from ..report.numbers import NO_GAIN, SLOWER

NOISE_NOTE = "no difference beyond noise"


def window_mean(w: dict) -> Optional[float]:
    steps = [float(x) for x in w.get("step_us") or []]
    return sum(steps) / len(steps) if steps else None


def pairs(windows: list) -> list:
    """[(A window, B window)] in order: each baseline window with the variant window right after it."""
    out, pending = [], None
    for w in sorted(windows, key=lambda w: w["window"]):
        if w["variant"] == "A":
            pending = w
        elif pending is not None and w["window"] == pending["window"] + 1 and window_mean(w) and window_mean(pending):
            out.append((pending, w))
            pending = None
    return out


def ratio(pair: tuple) -> float:
    a, b = pair
    return round(window_mean(a) / window_mean(b), 4)


def outcome(ratios: list) -> tuple:
    """(outcome, note) of a list of pair ratios."""
    low, high, mid = min(ratios), max(ratios), statistics.median(ratios)
    if low <= 1.0 <= high and low < high:
        return "noise", NOISE_NOTE
    if mid < SLOWER:
        return "slower", "tried: slower on this machine; don't apply"
    if mid <= NO_GAIN:
        return "no gain", "tried: no gain on this machine"
    return "faster", ""


def _median(values: list) -> Optional[float]:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def measured(windows: list, *, variant: str, how: str, steps: int, forecast: Optional[float],
             step_us: Optional[float], peak: bool = False) -> Optional[dict]:
    """The `verified` object of an experiment's windows (None without a complete pair). `step_us`:
    the run's unprofiled median step, for the saving; `forecast`: the finding's forecast speed-up;
    `peak`: the fix frees memory, and the windows' peaks go into `peak` (peak_change)."""
    done = pairs(windows)
    if not done:
        return None
    ratios = [ratio(p) for p in done]
    speedup = round(statistics.median(ratios), 4)
    kind, note = outcome(ratios)
    variants = [b for _, b in done]
    bases = [a for a, _ in done]
    first = min((w for w in windows if w["variant"] == "B"), key=lambda w: w["window"])
    return {
        "speedup": speedup, "low": min(ratios), "high": max(ratios), "pairs": len(ratios), "pair_ratios": ratios,
        "steps_per_window": steps, "variant": variant, "how": how,
        "forecast_ratio": round(forecast / speedup, 3) if forecast and speedup else None,
        "outcome": kind, "note": note,
        "load": [[a.get("load", [None])[0], b.get("load", [None, None])[-1]] for a, b in done],
        "others_cores": [[a.get("others_cores"), b.get("others_cores")] for a, b in done],
        "warmup_us": {"baseline": _median([w.get("warmup_us") for w in bases]),
                      "variant": _median([w.get("warmup_us") for w in variants]),
                      "first_variant": first.get("warmup_us")},
        "step_us": {"baseline": _median([window_mean(a) for a in bases]),
                    "variant": _median([window_mean(b) for b in variants])},
        "saving_us": round(step_us * (1 - 1 / speedup), 3) if step_us else None,
        **({"peak": peak_change(done)} if peak else {}),
    }


def verified_by_rule(extra: dict, findings: list) -> dict:
    """The best measurement of each rule's fixes (`_rank`), its forecast ratio against that
    rule, and `tried`: every setting of the rule's fixes that was tried, measured or not, in the
    order of its parameter ("num_workers 1: 0.80x, 2: 1.71x, 3: 1.62x": report/figures.py). The
    best is the finding's number: "don't apply" only when every setting measured was slower
    (issue 40)."""
    forecasts = {f.get("rule"): (f.get("forecast") or {}).get("speedup") for f in findings}
    best: dict = {}
    tried: dict = {}
    for e in extra["experiments"]:
        if e.get("variant") is None:
            continue
        v = e.get("verified")
        for rule in e["rules"]:
            tried.setdefault(rule, []).append(tried_entry(e))
            if not v:
                continue
            if rule not in best or _rank(v) > _rank(best[rule]):
                fc = forecasts.get(rule)
                ratio = round(fc / v["speedup"], 3) if fc and v["speedup"] else None
                best[rule] = {**v, "params": dict(e.get("params") or {}), "forecast_ratio": ratio}
    for rule, v in best.items():
        v["tried"] = sorted(tried[rule], key=_setting_order)
    return best


OUTCOME_RANK = {"faster": 3, "noise": 2, "no gain": 1, "slower": 0}


def _rank(v: dict) -> tuple:
    """The best setting: a conclusive gain (outcome "faster"), then an inconclusive one ("noise"),
    then "no gain", then "slower", each by the larger speed-up -- the largest median of several
    noisy settings alone favours the noisiest; "don't apply" needs every setting slower."""
    return (OUTCOME_RANK.get(v.get("outcome"), 1), v["speedup"])


def tried_entry(e: dict) -> dict:
    """One setting of `verified.tried` (docs/schema.md)."""
    v = e.get("verified") or {}
    status = "measured" if v else e.get("status")
    if status == "measured" and not v:
        status = "too few pairs"
    return {"fix": e["fix"], "variant": e["variant"], "params": dict(e.get("params") or {}),
            "status": status, **{k: v.get(k) for k in ("speedup", "low", "high", "pairs",
                                                        "outcome")}}


def _setting_order(t: dict) -> tuple:
    values = list(t["params"].values())
    n = values[0] if len(values) == 1 and isinstance(values[0], (int, float)) else 0
    return (t["fix"], n, t["variant"])


PEAK_MEASURES = {  # a window's peak (verify/peaks.py), the most exact first
    "cuda_allocated_bytes": "torch.cuda.max_memory_allocated in each window",
    "rss_bytes": ("the process's resident-set high-water mark (Linux VmHWM) in each window: the "
                  "whole process in pages, not its DataLoader workers; memory the C allocator "
                  "keeps after a free stays counted"),
}


def peak_change(done: list) -> Optional[dict]:
    """The fix's effect on peak memory over the pairs (a measurement): the median peak of the
    baseline windows and of the variant windows, each pair's change; None when no pair has a peak on
    both sides."""
    for key, what in PEAK_MEASURES.items():
        both = [(a.get("peak", {}).get(key), b.get("peak", {}).get(key)) for a, b in done
                if isinstance(a.get("peak"), dict) and isinstance(b.get("peak"), dict)]
        both = [(int(x), int(y)) for x, y in both if isinstance(x, int) and isinstance(y, int)]
        if not both:
            continue
        base = int(statistics.median(x for x, _ in both))
        variant = int(statistics.median(y for _, y in both))
        return {"measure": key, "what": what, "baseline_bytes": base, "variant_bytes": variant,
                "change_bytes": variant - base,
                "change": round(variant / base - 1, 4) if base else None,
                "pairs": [[x, y] for x, y in both]}
    return None
