"""The number a finding shows, as text, the same in every output (issue 24: one finding, one number).

Every renderer (terminal, HTML, Markdown, the directory indexes, diff) words a finding's number here:
the measurement of `perfsleuth run --verify` when there is one ("measured 1.41× (1.35–1.52×, 3 pairs)"),
beside the forecast ("est. 1.30× (1.20–1.40×)"), or the forecast alone, or why there is none. The
finding's `ceiling` is never shown. Which number counts is report/numbers.py's `headline`; these are
plain strings, escaped by each renderer for its format.
"""

from __future__ import annotations

from typing import Any, Optional

from . import numbers
from .present import fmt_forecast, fmt_ibytes, fmt_us, forecast_kind, forecast_of, number

MEASURED_NOTE = ("measured = the fix tried on this machine by `perfsleuth run --verify`: the median of the "
                 "baseline/fix pair ratios, and their range")
OUTCOME_WORDS = {
    "no gain": "tried: no gain on this machine",
    "slower": "tried: slower on this machine; don't apply",
    "noise": "no difference beyond noise",
}


def verified_of(finding: Any) -> Optional[dict]:
    """A finding's `verified` object when it holds a measured speed-up; None otherwise."""
    v = finding.get("verified") if isinstance(finding, dict) else None
    return v if isinstance(v, dict) and number(v.get("speedup")) is not None else None


def outcome(verified: dict) -> str:
    """faster | no gain | slower | noise: the measurement's `outcome`, or worked out from its numbers
    (numbers.SLOWER, numbers.NO_GAIN, a pair range that covers 1.0) when a report lacks it."""
    said = verified.get("outcome")
    if said in ("faster", "no gain", "slower", "noise"):
        return said
    x, lo, hi = (number(verified.get(k)) for k in ("speedup", "low", "high"))
    if x is None:
        return "noise"
    if x < numbers.SLOWER:
        return "slower"
    if x <= numbers.NO_GAIN:
        return "no gain"
    if lo is not None and hi is not None and lo <= 1.0 <= hi:
        return "noise"
    return "faster"


def measured_text(verified: dict) -> str:
    """`measured 1.41× (1.35–1.52×, 3 pairs)`, followed by what the outcome means when it is
    not a gain; when several settings were tried (`tried`, issue 40) the best one's name and the curve:
    `measured 1.71× (1.60–1.80×, 3 pairs) with num_workers=2; settings: num_workers 1: 0.80×,
    2: 1.71×, 3: 1.62×`."""
    x, lo, hi, pairs = (number(verified.get(k)) for k in ("speedup", "low", "high", "pairs"))
    inside = []
    if lo is not None and hi is not None:
        inside.append(f"{lo:.2f}–{hi:.2f}×")
    if pairs is not None:
        inside.append(f"{int(pairs)} pair{'s' if int(pairs) != 1 else ''}")
    text = f"measured {x:.2f}×" + (f" ({', '.join(inside)})" if inside else "")
    curve = curve_text(verified)
    if curve and verified.get("variant"):
        text += f" with {verified['variant']}"
    words = OUTCOME_WORDS.get(outcome(verified))
    text = f"{text}: {words}" if words else text
    peak = peak_text(verified)
    text = f"{text}; {peak}" if peak else text
    return f"{text}; settings: {curve}" if curve else text


PEAK_WORDS = {"cuda_allocated_bytes": "torch.cuda.max_memory_allocated",
              "rss_bytes": "process resident-set high-water mark"}


def peak_text(verified: dict) -> str:
    """A fix that frees memory (verify/peaks.py): `peak 812.00 MiB → 640.00 MiB (-21.2%, measured:
    process resident-set high-water mark, median of 3 pairs)`; '' without a measured peak."""
    p = verified.get("peak")
    if not isinstance(p, dict):
        return ""
    base, variant = number(p.get("baseline_bytes")), number(p.get("variant_bytes"))
    if base is None or variant is None:
        return ""
    change = number(p.get("change"))
    pairs = len(p.get("pairs") or [])
    inside = ([f"{change:+.1%}"] if change is not None else []) + [
        f"measured: {PEAK_WORDS.get(str(p.get('measure')), str(p.get('measure')))}"
        + (f", median of {pairs} pair{'s' if pairs != 1 else ''}" if pairs else "")]
    return f"peak {fmt_ibytes(base)} → {fmt_ibytes(variant)} ({', '.join(inside)})"


def curve_text(verified: dict) -> str:
    """The settings tried (`verified.tried`), '' for fewer than two: `num_workers 1: 0.80×,
    2: 1.71×, 3: not tried` for a fix with one numeric parameter, else `variant: 1.10×; …`."""
    tried = [t for t in verified.get("tried") or [] if isinstance(t, dict)]
    if len(tried) < 2:
        return ""
    groups: dict = {}
    for t in tried:
        groups.setdefault(str(t.get("fix")), []).append(t)
    parts = []
    for items in groups.values():
        keys = {tuple((t.get("params") or {}).keys()) for t in items}
        one = len(keys) == 1 and len(next(iter(keys))) == 1
        if one:
            key = next(iter(keys))[0]
            values = [(t.get("params") or {})[key] for t in items]
            one = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in values)
        if one:
            shown = (f"{(t.get('params') or {})[key]:g}: {_setting(t)}" for t in items)
            parts.append(f"{key} " + ", ".join(shown))
        else:
            parts.extend(f"{t.get('variant') or '?'}: {_setting(t)}" for t in items)
    return "; ".join(parts)


def _setting(t: dict) -> str:
    x = number(t.get("speedup"))
    return f"{x:.2f}×" if x is not None else str(t.get("status") or "not measured")


def number_text(finding: Any, reason_chars: int = 0) -> str:
    """The finding's number in full: `measured 1.41× (1.35–1.52×, 3 pairs) · est. 1.30× (1.20–1.40×)`,
    `est. 1.30× (1.20–1.40×)`, `no forecast` or `no reliable forecast[: reason]` (see present.fmt_forecast)."""
    est = fmt_forecast(forecast_of(finding), reason_chars)
    v = verified_of(finding)
    return f"{measured_text(v)} · {est}" if v else est + unseen_text(finding)


def unseen_text(finding: Any) -> str:
    """` · forecasts of this rule missed on 4 of 4 checks on programs the models were not fitted to: `perfsleuth
    run --verify` measures it`, for a rule whose forecasts missed there (engine/unseen_record.py,
    docs/accuracy.md); '' otherwise."""
    fc = forecast_of(finding)
    if forecast_kind(fc) != "forecast" or not numbers.missed_unseen(fc):
        return ""
    checked, right = int(fc["unseen"]["checked"]), int(fc["unseen"]["right"])
    return (f" · forecasts of this rule missed on {checked - right} of {checked} checks on programs the "
            "models were not fitted to: `perfsleuth run --verify` measures it")


def short_text(finding: Any) -> str:
    """The number in a few characters, for index rows: `measured 1.41×`, `est. 1.30×`, `no forecast`,
    `no reliable forecast`."""
    v = verified_of(finding)
    if v:
        return f"measured {number(v.get('speedup')):.2f}×"
    fc = forecast_of(finding)
    if forecast_kind(fc) == "forecast":
        return f"est. {number(fc.get('speedup')):.2f}×"
    return fmt_forecast(fc)


def saving_text(finding: Any) -> str:
    """`saves 2.10 ms per step` / `costs 300 µs per step` for the headline number's saving; '' without one."""
    saving = numbers.headline(finding)["saving_us"]
    if saving is None:
        return ""
    return f"saves {fmt_us(saving)} per step" if saving >= 0 else f"costs {fmt_us(-saving)} per step"


def best_measured(findings: Any) -> str:
    """The headline's line about measured fixes ('' when no finding was measured):
    `best measured fix: num-workers, measured 1.41× (1.35–1.52×, 3 pairs), saves 2.10 ms per step`, or, when
    none helped, `fixes tried on this machine: none helped (num-workers: tried: slower …; …)`."""
    measured = [f for f in findings or [] if isinstance(f, dict) and verified_of(f)]
    if not measured:
        return ""
    faster = [f for f in measured if outcome(verified_of(f)) == "faster"]
    if faster:
        best = max(faster, key=lambda f: (numbers.saving_of(f) or 0.0, number(verified_of(f).get("speedup"))))
        saving = saving_text(best)
        return (f"best measured fix: {best.get('rule') or '?'}, {measured_text(verified_of(best))}"
                + (f", {saving}" if saving else ""))
    tried = "; ".join(f"{f.get('rule') or '?'}: {measured_text(verified_of(f))}" for f in measured[:5])
    more = f"; {len(measured) - 5} more" if len(measured) > 5 else ""
    return f"fixes tried on this machine: none helped ({tried}{more})"


def shown_warnings(report: dict, headline: tuple = ()) -> list:
    """The report's warnings, each once, without those the headline already shows (the distortion flag
    is printed at the top of every output: it is not repeated in the list below). `headline`: the texts
    the renderer shows above its warnings list."""
    shown = [str(h) for h in headline if h]
    out: list = []
    for w in report.get("warnings") or []:
        text = str(w)
        if text in out or any(text and text in h for h in shown):
            continue
        out.append(text)
    return out


def fix_shown(finding: Any) -> str:
    """What stands where a finding's fix block would be: the fix, except for a fix measured slower
    on this machine, which is not advised again (issue 37): `tried: slower on this machine; don't
    apply (measured 0.79× (0.75–0.82×, 3 pairs))`. The fix that was tried stays in the JSON."""
    v = verified_of(finding)
    if v is not None and outcome(v) == "slower":
        x, lo, hi = (number(v.get(k)) for k in ("speedup", "low", "high"))
        rng = f" ({lo:.2f}–{hi:.2f}×)" if lo is not None and hi is not None else ""
        return f"{OUTCOME_WORDS['slower']} (measured {x:.2f}×{rng})"
    return str(finding.get("fix") or "") if isinstance(finding, dict) else ""


_ADVERBS = ("slightly ", "moderately ", "")


def verdict_said(report: dict) -> tuple[str, list]:
    """(what the verdict says, the notes that add to it): the verdict once (issue 37: it repeated
    itself in two lines). The first is `verdict_text` without its leading "moderately
    dataloader-bound: " (the heading says it); the notes are `verdict_notes` (engine/reconsider.py),
    or the whole `verdict_reason` for a report written before them."""
    verdict, text = str(report.get("verdict") or ""), str(report.get("verdict_text") or "")
    for adverb in _ADVERBS:
        head = f"{adverb}{verdict}: "
        if verdict and text.startswith(head):
            text = text[len(head):]
            break
    notes = report.get("verdict_notes")
    if not isinstance(notes, list):
        notes = [report["verdict_reason"]] if report.get("verdict_reason") else []
    return text, [str(n) for n in notes if n]
