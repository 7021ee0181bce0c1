"""Presentation helpers shared by the HTML and Markdown renderers: numbers as text, fix text as blocks.

They read report@1 values (see docs/schema.md) and tolerate what a hand-edited or older report may
hold: missing keys, None, NaN.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

CATEGORY_LABELS = {
    "dataloader": "DataLoader",
    "kernel": "Kernels",
    "sync": "Sync",
    "transfer": "Transfer",
    "host": "Host",
    "communication": "Communication",
    "other": "Other",
}
DASH = "—"
_FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+\-.]*)\s*$")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")


STEADY = "steady"
PHASE_LABELS = {"warmup": "warm-up", "compile": "compiling", "partial": "partial"}


def step_phase(step: Any) -> str:
    """A report step's phase: warmup, steady, compile or partial (steady when the report predates phases)."""
    phase = step.get("phase") if isinstance(step, dict) else None
    return phase if phase in PHASE_LABELS else STEADY


def steady_steps(report: dict) -> list[dict]:
    """The steps that shares, the verdict and the findings rest on (docs/schema.md, `steps[].phase`)."""
    return [s for s in report.get("steps") or [] if isinstance(s, dict) and step_phase(s) == STEADY]


def per_step(steps: list, category: str) -> dict:
    """A category's time per step over `steps`: {"median", "mean"} µs. The median sits beside the median step
    time of the headline; the mean is the one the shares add up to (they are of the steps' summed time)."""
    values = sorted(number((s.get("time_us") or {}).get(category)) or 0.0 for s in steps)
    if not values:
        return {"median": 0.0, "mean": 0.0}
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    return {"median": median, "mean": sum(values) / len(values)}


def set_apart(report: dict) -> list[dict]:
    """The warm-up, compiling and partial steps, shown apart: [{"name", "phase", "label", "duration_us", "reason"}]."""
    return [{"name": str(s.get("name") or "?"), "phase": step_phase(s), "label": PHASE_LABELS[step_phase(s)],
             "duration_us": s.get("duration_us"), "reason": str(s.get("phase_reason") or "")}
            for s in report.get("steps") or [] if isinstance(s, dict) and step_phase(s) != STEADY]


def steps_text(report: dict, short: bool = False) -> str:
    """`5 steady steps + 1 warm-up` / `3 steps` (`short`: `5 steady + 1 warm-up` / `3`): how many steps the
    numbers rest on, and what was set apart."""
    n = len(steady_steps(report))
    apart = set_apart(report)
    text = f"{n}{' steady' if apart else ''}" if short else f"{n} {'steady ' if apart else ''}step{'s' if n != 1 else ''}"
    for phase, label in PHASE_LABELS.items():
        k = sum(1 for a in apart if a["phase"] == phase)
        if k:
            text += f" + {k} {label}"
    return text


def measurement_lines(report: dict) -> tuple[str, str]:
    """(`measured: …` line, the distortion or busy-machine warning or ''), from report@1's `measurement` ('', ''
    without one). A busy machine's note starts "the machine was busy during the run: …" (analysis/measurement.py)."""
    m = report.get("measurement")
    if not isinstance(m, dict):
        return "", ""
    un, pr = (m.get(k) if isinstance(m.get(k), dict) else {} for k in ("unprofiled_step_us", "profiled_step_us"))
    if number(un.get("median")) is None or number(pr.get("median")) is None:
        return (f"measured: {m.get('note')}" if m.get("note") else ""), ""
    line = (f"measured step time: {fmt_us(un.get('median'))} without the profiler (median of {fmt_count(un.get('n'))}), "
            f"{fmt_us(pr.get('median'))} profiled: overhead {fmt_ratio(m.get('overhead'))}")
    flag = (f"PROFILER DISTORTION: {m.get('note')}" if m.get("distorted") else
            str(m.get("note") or "") if m.get("busy") else "")
    return line, flag


def unprofiled_median(report: dict) -> float | None:
    """The median step `perfsleuth run` measured without the profiler (report@1's `measurement`), or None."""
    m = report.get("measurement")
    un = m.get("unprofiled_step_us") if isinstance(m, dict) else None
    return number(un.get("median")) if isinstance(un, dict) else None


def fmt_ratio(x: Any) -> str:
    v = number(x)
    return DASH if v is None else f"{v:.2f}×"


def number(value: Any) -> float | None:
    """A finite float, or None for None, NaN, infinities, booleans and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # numpy scalars, numeric strings
        except (TypeError, ValueError):
            return None
    value = float(value)
    return value if math.isfinite(value) else None


def fmt_us(us: Any) -> str:
    """Microseconds as a human duration: `850 µs`, `2.21 ms`, `1.20 s`."""
    v = number(us)
    if v is None:
        return DASH
    if abs(v) >= 1_000_000:
        return f"{v / 1_000_000:.2f} s"
    if abs(v) >= 1_000:
        return f"{v / 1_000:.2f} ms"
    return f"{v:.0f} µs" if abs(v) >= 10 else f"{v:.1f} µs"


def fmt_pct(share: Any, digits: int = 1) -> str:
    """A fraction in [0, 1] as a percentage: `81.0%`."""
    v = number(share)
    return DASH if v is None else f"{v * 100:.{digits}f}%"


def fmt_speedup(x: Any) -> str:
    v = number(x)
    return DASH if v is None else f"{v:.2f}×"


def fmt_count(n: Any) -> str:
    v = number(n)
    return DASH if v is None else f"{int(v):,}"


def fmt_value(key: str, value: Any) -> str:
    """An evidence value as text: shares as percentages, `_us` as durations, numbers compact."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt_value(key, v) for v in value[:20]) + (" …" if len(value) > 20 else "")
    if isinstance(value, dict):
        return "; ".join(f"{k}: {fmt_value(str(k), v)}" for k, v in list(value.items())[:20])
    v = number(value) if isinstance(value, (int, float)) else None
    if v is None:
        return DASH if isinstance(value, float) else str(value)
    key = key.lower()
    if key.endswith(("share", "_fraction")) and 0.0 <= v <= 1.0:
        return fmt_pct(v)
    if key.endswith(("_us", "_us_per_step")):
        return fmt_us(v) + (" per step" if key.endswith("_per_step") else "")
    if key.endswith("bytes") or key.endswith("_bytes_per_step"):
        return fmt_bytes(v)
    if float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:.4g}"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover


def fix_blocks(text: Any) -> list[dict]:
    """Split a rule's fix text into blocks: `{"kind": "text", "parts": [(is_code, str), ...]}`
    paragraphs with inline code spans, and `{"kind": "code", "lang": ..., "code": ...}` fenced blocks.

    Nothing here is markup yet: each renderer escapes the parts for its own format.
    """
    blocks: list[dict] = []
    lines = ("" if text is None else str(text)).replace("\r\n", "\n").split("\n")
    para: list[str] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i].strip())
        if not m:
            if lines[i].strip():
                para.append(lines[i].strip())
            elif para:
                blocks.append(_paragraph(para))
                para = []
            i += 1
            continue
        if para:
            blocks.append(_paragraph(para))
            para = []
        fence, lang, body = m.group(1), m.group(2), []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        blocks.append({"kind": "code", "lang": lang, "code": "\n".join(body)})
        i += 1
    if para:
        blocks.append(_paragraph(para))
    return blocks


def _paragraph(lines: list[str]) -> dict:
    text = " ".join(lines)
    parts: list[tuple[bool, str]] = []
    pos = 0
    for m in _INLINE_CODE.finditer(text):
        if m.start() > pos:
            parts.append((False, text[pos : m.start()]))
        parts.append((True, m.group(2).strip() or m.group(2)))
        pos = m.end()
    if pos < len(text):
        parts.append((False, text[pos:]))
    return {"kind": "text", "parts": parts}


LINE_KINDS = {"function": "first line of the function",
              "running": "the line it was on when tracing started, not the call",
              "construction": "where the optimizer is constructed", "call": "the call"}


def location_text(loc: Any) -> str:
    """`train.py:57 in train_step (first line of the function)` from a finding location dict."""
    if not isinstance(loc, dict):
        return str(loc)
    where = str(loc.get("file") or "?")
    if loc.get("line") is not None:
        where += f":{loc['line']}"
    if loc.get("function"):
        where += f" in {loc['function']}"
    kind = LINE_KINDS.get(str(loc.get("line_kind")))
    if kind and loc.get("line") is not None:
        where += f" ({kind})"
    return where


# What every output says when no rule fired: "findings: none" and why, the same words everywhere.
NO_FINDINGS = "none"
NO_FINDINGS_WHY = "no rule fired on this trace"
FORECAST_NOTE = ("est. = forecast: the steady step replayed with the fix applied; the range runs from its "
                 "pessimistic to its optimistic assumptions")
# torch.compile's fixes are forecast without a replay (analysis/forecast/models/compile.py WINDOW_MODELS; no import: renderers
# stay light), over the recorded steps: the note says so when one of them gave a number.
COMPILE_MODELS = ("no-recompilation", "no-compile-after-warmup", "compiled-not-eager")
COMPILE_NOTE = "torch.compile's fixes: the recorded steps, compiling ones included, without the time the fix removes"


def forecast_note(findings: list) -> str:
    """FORECAST_NOTE, and COMPILE_NOTE when a torch.compile fix has a forecast."""
    compiled = any(isinstance(f, dict) and isinstance(f.get("forecast"), dict) and f["forecast"].get("model") in
                   COMPILE_MODELS and number(f["forecast"].get("speedup")) is not None for f in findings)
    return FORECAST_NOTE + (f"; {COMPILE_NOTE}" if compiled else "")


def forecast_of(finding: Any) -> dict:
    """A finding's (or the combined) forecast object, {} when there is none or it is malformed."""
    fc = finding.get("forecast") if isinstance(finding, dict) else None
    return fc if isinstance(fc, dict) else {}


def forecast_kind(fc: Any) -> str:
    """forecast | none | unreliable: the forecast's `kind`, or (reports without one) "forecast" when it
    has a speed-up, "none" otherwise."""
    fc = fc if isinstance(fc, dict) else {}
    has_number = number(fc.get("speedup")) is not None
    kind = fc.get("kind")
    if kind == "unreliable":
        return kind
    return "forecast" if has_number else "none"


def fmt_forecast(fc: Any, reason_chars: int = 0) -> str:
    """`est. 1.40× (1.20–1.60×)`, `no forecast`, or `no reliable forecast` (with its reason, cut to
    `reason_chars`, when that is > 0): a forecast, never a ceiling."""
    fc = fc if isinstance(fc, dict) else {}
    kind = forecast_kind(fc)
    if kind == "unreliable":
        reason = unreliable_reason(fc)
        if reason_chars and reason:
            return "no reliable forecast: " + (reason if len(reason) <= reason_chars else reason[: reason_chars - 1] + "…")
        return "no reliable forecast"
    if kind == "none":
        if fc.get("ceiling_only"):  # the rule's saving is a ceiling, and no model is defensible
            reason = " ".join(str(fc.get("reason") or "").split())
            if reason_chars and reason:
                return "no forecast: " + (reason if len(reason) <= reason_chars else reason[: reason_chars - 1] + "…")
            return "no forecast (its saving is a ceiling only)"
        return "no forecast"
    x, lo, hi = number(fc.get("speedup")), number(fc.get("low")), number(fc.get("high"))
    rng = f" ({lo:.2f}–{hi:.2f}×)" if lo is not None and hi is not None else ""
    return f"est. {x:.2f}×{rng}"


UNRELIABLE = "no reliable forecast"


def unreliable_reason(fc: dict) -> str:
    """The reason of a forecast withheld as unreliable, without the label it already starts with
    (the label is said once: "no reliable forecast: no reliable forecast: ..." was printed, issue
    37)."""
    reason = " ".join(str(fc.get("reason") or "").split())
    while reason.lower().startswith(UNRELIABLE + ":"):
        reason = reason[len(UNRELIABLE) + 1:].lstrip()
    return reason


def forecast_details(fc: Any) -> list[tuple[str, str]]:
    """(label, text) rows explaining a forecast: the model, the step after the fix, each assumption,
    or why there is none."""
    fc = fc if isinstance(fc, dict) else {}
    rows = [("model", str(fc.get("model") or "—"))]
    kind = forecast_kind(fc)
    if kind != "forecast":
        label = UNRELIABLE if kind == "unreliable" else "no forecast"
        reason = unreliable_reason(fc) if kind == "unreliable" else str(fc.get("reason") or "")
        rows.append((label, reason or "no model for this fix"))
        lo, hi = number(fc.get("low")), number(fc.get("high"))
        if lo is not None and hi is not None:
            rows.append(("range of the replays", f"{lo:.2f}–{hi:.2f}×"))
        return rows
    if number(fc.get("step_us")) is not None:
        rows.append(("step after the fix", fmt_us(fc.get("step_us"))))
    if number(fc.get("saving_us")) is not None:
        rows.append(("saving per step", fmt_us(fc.get("saving_us"))))
    assumptions = fc.get("assumptions") if isinstance(fc.get("assumptions"), dict) else {}
    rows += [(str(k).replace("_", " "), str(v)) for k, v in list(assumptions.items())[:20]]
    return rows


# --- a directory of traces ------------------------------------------------------------------------
def set_order(reports: list) -> list:
    """The reports of a set by rank (traces without one last), then path: the order of every index."""
    def key(rep: dict) -> tuple:
        t = rep.get("trace") if isinstance(rep.get("trace"), dict) else {}
        rank = t.get("rank")
        ranked = isinstance(rank, int) and not isinstance(rank, bool)
        return (not ranked, rank if ranked else 0, str(t.get("path")))

    return sorted(reports, key=key)


def shown_path(path) -> str:
    """A report's (absolute) path as the terminal and summary.md show it: relative to the working directory when
    it lies below it (no runner's or home folder in a pull-request comment), as given otherwise."""
    text = str(path)
    if not os.path.isabs(text):
        return text
    try:
        rel = os.path.relpath(text)
    except ValueError:  # another drive (Windows)
        return text
    return text if rel == ".." or rel.startswith(".." + os.sep) else rel


def member_path(path: str, root: str) -> str:
    """A trace's path inside its set's folder; as given when it lies elsewhere or either is relative."""
    if not (os.path.isabs(path) and os.path.isabs(root)):
        return path
    try:
        rel = os.path.relpath(path, root)
    except ValueError:  # another drive (Windows)
        return path
    return path if rel == ".." or rel.startswith(".." + os.sep) else rel


def fmt_ibytes(n) -> str:
    """1,536 -> '1.50 KiB'; binary units, named as such (never GB for GiB)."""
    if n is None:
        return "-"
    v, sign = abs(float(n)), "-" if n < 0 else ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if v < 1024 or unit == "TiB":
            return f"{sign}{v:.0f} {unit}" if unit == "B" else f"{sign}{v:.2f} {unit}"
        v /= 1024
    return f"{sign}{v:.2f} TiB"  # pragma: no cover

