"""report@1 dict -> one self-contained HTML page (inline CSS and SVG, no network, autoescaped).

The page is computed from the report dict alone (docs/schema.md), so it renders reports written by
any version of the analysis. Geometry for the step chart is computed here; the Jinja2 templates in
`perfsleuth.templates` only lay it out. See docs/reports.md for what the page holds and its limits.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import jinja2
from markupsafe import Markup

from ..config import CATEGORIES
from ..report import figures, numbers, present
from ..report.escape import html_id, shorten, visible
from ..report.present import CATEGORY_LABELS, fmt_pct, fmt_us, number
from .efficiency_html import efficiency_html
from .memory_html import memory_view
from .timeline_html import shown_path, timeline_html

MAX_BARS = 600  # more steps than this are averaged in groups, one bar per group
SEGMENT_TITLES_UP_TO = 60  # above this many bars: one path per category + one tooltip box per bar
MAX_FINDINGS = 50
MAX_TABLE_ROWS = 30
MAX_WARNINGS = 50
MAX_NAME = 200  # characters of a kernel/op name shown in a cell; the full name (capped) is its tooltip
MAX_TOOLTIP = 2000
MAX_FIX = 6000
MAX_REASON = 300  # characters of a "no reliable forecast" reason in a finding's summary line
SEVERITY_FROM = {
    "measured": "severity from the measured speed-up: 1.25× or more high, 1.05× or more medium, otherwise low",
    "forecast": "severity from the forecast speed-up: 1.25× or more high, 1.05× or more medium, otherwise low",
    "rule": "no forecast or measurement: the rule's own severity, at most medium",
}

_W, _H = 900.0, 260.0
MAX_BAR_WIDTH = 56.0  # SVG units: a few steps give bars, not slabs
_LEFT, _RIGHT, _TOP, _BOTTOM = 64.0, 12.0, 14.0, 30.0


def _shown(value: Any) -> Any:
    """Every value a template prints: bidi controls and invisible characters made visible (escape.visible);
    our own pre-rendered markup passes as it is."""
    return value if isinstance(value, Markup) or not isinstance(value, str) else visible(value)


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("perfsleuth.templates", "."),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_shown,
    )
    env.filters.update(
        us=fmt_us, pct=fmt_pct, speedup=present.fmt_speedup, count=present.fmt_count, short=shorten,
        ratio=present.fmt_ratio
    )
    return env


def render_html(report: dict, base: str | None = None) -> str:
    """The report as one HTML document (a str); needs nothing but the file to display. `base`: the
    folder the page is written to (trace paths are shown relative to it; None: by file name only).

    A report-set@1 dict (a directory of traces) has its own page (set_page.render_set_html), chosen by
    the output step (outputs.py).
    """
    env = _environment()
    v = view(report, base=base)
    body = Markup(env.get_template("_body.html.j2").render(v))  # our own autoescaped output
    title = f"perfsleuth: {v['verdict']} — {shorten(v['trace_shown'] or 'trace', 80)}"
    return env.get_template("report.html.j2").render(
        page_title=title, bodies=[body], index=None, ranks=None,
        version=str((report.get("tool") or {}).get("version") or ""),
        schema=str(report.get("schema") or "perfsleuth/report@1"))


def view(report: dict, pid: str = "", base: str | None = None) -> dict:
    """Everything the templates show, with defaults for missing keys and numbers made safe.

    `pid` prefixes every element id, so several reports can share one page; `base` is the page's
    folder: the trace's path is shown relative to it (timeline_html.shown_path), never absolute."""
    trace = {k: None for k in ("path", "device", "device_type")} | (report.get("trace") or {})
    summary = report.get("summary") or {}
    step_time = summary.get("step_time_us") or {}
    findings = [f for f in report.get("findings") or [] if isinstance(f, dict)]
    verdict = str(report.get("verdict") or "unknown")
    measured = dict(zip(("line", "flag"), present.measurement_lines(report)))
    warnings = figures.shown_warnings(report, (measured["line"], measured["flag"]))
    return {
        "pid": pid,
        "report": report,
        "trace": trace,
        "trace_shown": shown_path(str(trace.get("path") or ""), base),
        "tool": report.get("tool") or {},
        "verdict": verdict,
        "verdict_class": _verdict_class(verdict),
        # the verdict said once (issue 37)
        "verdict_reason": "; ".join(figures.verdict_said(report)[1]),
        "degree": str(report.get("degree") or ""),
        "verdict_text": figures.verdict_said(report)[0],
        "host_statement": shorten(str((report.get("host_time") or {}).get("statement") or ""), 2000)
        if isinstance(report.get("host_time"), dict) else "",
        "not_checked": [{"rule": str(n.get("rule") or "?"), "title": str(n.get("title") or ""),
                         "reason": shorten(str(n.get("reason") or ""), 500)}
                        for n in (report.get("not_checked") or [])[:MAX_WARNINGS] if isinstance(n, dict)],
        "step_time": {k: step_time.get(k) for k in ("median", "mean", "p90")},
        "measured": measured,
        "best_measured": figures.best_measured(findings),
        "unprofiled": present.unprofiled_median(report),
        "overhead": (report.get("measurement") or {}).get("overhead") if isinstance(report.get("measurement"), dict)
        else None,
        "device_busy": number(summary.get("device_busy")),
        "cpu_only": trace.get("device_type") == "cpu" or not trace.get("device"),
        "top_finding": numbers.top_finding(findings),  # findings[0] when it earns the top
        "no_top": numbers.NO_TOP if findings and numbers.top_finding(findings) is None else "",
        "chart": chart(report.get("steps") or [], step_time.get("median")),
        "shares": shares(summary.get("time_share") or {}, present.steady_steps(report)),
        "apart": [{**a, "reason": shorten(a["reason"], 500)} for a in present.set_apart(report)[:MAX_TABLE_ROWS]],
        "categories": [(c, CATEGORY_LABELS[c]) for c in CATEGORIES],
        "findings": [_finding(i, f) for i, f in enumerate(findings[:MAX_FINDINGS], 1)],
        "combined": _combined(report),
        "no_findings": (present.NO_FINDINGS, present.NO_FINDINGS_WHY),
        "forecast_note": present.forecast_note(findings) + (
            "; " + figures.MEASURED_NOTE if any(figures.verified_of(f) for f in findings) else ""),
        "findings_more": max(0, len(findings) - MAX_FINDINGS),
        "kernels": _rows(report.get("top_kernels")),
        "kernels_more": max(0, len(report.get("top_kernels") or []) - MAX_TABLE_ROWS),
        "ops": _rows(report.get("top_ops")),
        "ops_more": max(0, len(report.get("top_ops") or []) - MAX_TABLE_ROWS),
        "warnings": [shorten(w, 500) for w in warnings[:MAX_WARNINGS]],
        "warnings_more": max(0, len(warnings) - MAX_WARNINGS),
        "meta": _meta(report, {**trace,
                               "path": shown_path(str(trace.get("path") or ""), base) or None}),
        # escaped there (render/timeline_html.py)
        "timeline_html": Markup(timeline_html(report, pid, base)),
        # escaped there (render/efficiency_html.py)
        "efficiency_html": Markup(efficiency_html(report)),
        "memory": memory_view(report),
    }


def _verdict_class(verdict: str) -> str:
    cat = verdict.removesuffix("-bound")
    return cat if cat in CATEGORIES else "other"


def _finding(i: int, f: dict) -> dict:
    evidence = f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
    locations = f.get("locations") if isinstance(f.get("locations"), list) else []
    return {
        "id": f"finding-{i}-" + html_id(f.get("rule")),
        "rule": str(f.get("rule") or ""),
        "title": str(f.get("title") or f.get("rule") or "Finding"),
        "category": str(f.get("category") or ""),
        "category_class": f.get("category") if f.get("category") in CATEGORIES else "other",
        "severity": html_id(f.get("severity") or "info"),
        "severity_title": SEVERITY_FROM.get(str(f.get("severity_from")), ""),
        "number": figures.number_text(f),
        "short": figures.short_text(f),
        "saving": figures.saving_text(f),
        "measured": figures.measured_text(figures.verified_of(f)) if figures.verified_of(f) else "",
        "forecast": present.fmt_forecast(present.forecast_of(f), MAX_REASON),
        "forecast_rows": [(k, shorten(v, 500)) for k, v in present.forecast_details(present.forecast_of(f))],
        "forecast_title": shorten("; ".join(f"{k}: {v}" for k, v in present.forecast_details(present.forecast_of(f))),
                                  MAX_TOOLTIP),
        "evidence": [(str(k), present.fmt_value(str(k), v)) for k, v in list(evidence.items())[:30]],
        "message": present.fix_blocks(shorten(str(f.get("message") or ""), MAX_FIX)),
        "thresholds": _thresholds(f.get("thresholds")),
        "docs": shorten(str(f.get("docs") or ""), 200),
        "fix": present.fix_blocks(shorten(figures.fix_shown(f), MAX_FIX)),
        "locations": [present.location_text(loc) for loc in locations[:20]],
    }


def _combined(report: dict) -> dict | None:
    """The combined forecast of the top fixes, for the findings section (None when there is none)."""
    fc = (report.get("forecast") or {}).get("combined") if isinstance(report.get("forecast"), dict) else None
    if not isinstance(fc, dict) or number(fc.get("speedup")) is None:
        return None
    rows = present.forecast_details(fc)
    return {"text": present.fmt_forecast(fc), "rules": ", ".join(str(r) for r in fc.get("rules") or []),
            "rows": [(k, shorten(v, 500)) for k, v in rows],
            "title": shorten("; ".join(f"{k}: {v}" for k, v in rows), MAX_TOOLTIP)}


def _thresholds(thresholds: Any) -> str:
    """`min_share 10%, high_share 30%`: the rule's thresholds, as the evidence table formats values."""
    if not isinstance(thresholds, dict):
        return ""
    items = list(thresholds.items())[:20]
    return ", ".join(f"{k} {present.fmt_value(str(k), v)}" for k, v in items)


def _rows(rows: Any) -> list[dict]:
    out = []
    for row in (rows or [])[:MAX_TABLE_ROWS]:
        if not isinstance(row, dict):
            continue
        name = str(row.get("name") or "")
        op, src = row.get("op"), row.get("source") if isinstance(row.get("source"), dict) else None
        out.append({**row, "short": shorten(name, MAX_NAME), "full": shorten(name, MAX_TOOLTIP),
                    "op_short": shorten(str(op), MAX_NAME) if op else "",
                    "source_text": present.location_text(src) if src else ""})
    return out


def _meta(report: dict, trace: dict) -> list[tuple[str, str]]:
    def show(v: Any) -> str:
        return present.DASH if v is None or v == "" else str(v)

    rank, world = trace.get("rank"), trace.get("world_size")
    return [
        ("Trace", show(trace.get("path"))),
        ("Device", show(trace.get("device") or "none (CPU only)")),
        ("Device type", show(trace.get("device_type"))),
        ("Compute capability", show(trace.get("compute_capability"))),
        ("Rank / world size", f"{show(rank)} / {show(world)}"),
        ("Events analysed", present.fmt_count(trace.get("events"))),
        ("Python stacks", present.fmt_value("", trace.get("has_stacks"))),
        ("Input shapes", present.fmt_value("", trace.get("has_shapes"))),
        ("Steps from", show(report.get("steps_source"))),
        ("Steps analysed", present.steps_text(report)),
        ("Schema", show(report.get("schema"))),
    ]


def shares(time_share: dict, steps: list) -> list[dict]:
    """One row per category: share, median and mean time per step, and the bar width (percent)."""
    rows = []
    for c in CATEGORIES:
        share = number(time_share.get(c))
        each = present.per_step(steps, c)
        width = min(100.0, max(0.0, (share or 0.0) * 100))
        rows.append({"key": c, "label": CATEGORY_LABELS[c], "share": share, "median_us": each["median"],
                     "mean_us": each["mean"], "width": f"{width:.1f}"})
    return rows


def chart(steps: list, median: Any) -> dict:
    """Geometry of the per-step stacked bar chart in a fixed viewBox (SVG units)."""
    steps = [s for s in steps if isinstance(s, dict)]
    bars_src, group = _group_steps(steps)
    n = len(bars_src)
    ymax, ticks = _axis(max([d for _, d, _ in bars_src] + [number(median) or 0.0, 1.0]))
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    slot = plot_w / max(n, 1)
    bar_w = min(max(slot * (0.8 if n <= 100 else 0.9), 0.3), MAX_BAR_WIDTH)
    scale = plot_h / ymax
    bars = [_bar(i, name, dur, parts, slot, bar_w, scale) for i, (name, dur, parts) in enumerate(bars_src)]
    for b, st in zip(bars, steps if group == 1 else []):  # warm-up / partial steps: drawn faded, set apart
        label = present.PHASE_LABELS.get(present.step_phase(st), "")
        b["apart"], b["title"] = label, (f"{label} (not in the shares): " if label else "") + b["title"]
    compact = n > SEGMENT_TITLES_UP_TO
    med = number(median)
    return {
        "width": _W, "height": _H, "left": _LEFT, "right": _W - _RIGHT, "top": _TOP,
        "bottom": _H - _BOTTOM, "bars": [_fmt_bar(b) for b in bars],
        "compact": compact, "paths": _compact_paths(bars) if compact else [], "count": len(steps), "group": group,
        "apart": sum(1 for b in bars if b.get("apart")),
        "yticks": [(f"{_H - _BOTTOM - v * scale:.1f}", _tick_label(v)) for v in ticks],
        "xticks": _xticks(bars_src, slot, group, step_numbers(steps)),
        "median_y": f"{_H - _BOTTOM - med * scale:.1f}" if med is not None and n else None,
        "median_label": fmt_us(med),
    }


def _group_steps(steps: list) -> tuple[list[tuple[str, float, dict]], int]:
    """(name, duration, time_us) per bar; above MAX_BARS steps, averages of consecutive groups."""
    group = max(1, math.ceil(len(steps) / MAX_BARS))
    out = []
    for start in range(0, len(steps), group):
        chunk = steps[start : start + group]
        parts = {c: sum(number((s.get("time_us") or {}).get(c)) or 0.0 for s in chunk) / len(chunk)
                 for c in CATEGORIES}
        dur = sum(number(s.get("duration_us")) or 0.0 for s in chunk) / len(chunk)
        name = str(chunk[0].get("name") or f"step {start}")
        if group > 1:
            name = f"{name} … {chunk[-1].get('name') or start + len(chunk) - 1} (mean of {len(chunk)})"
        out.append((shorten(name, 120), max(dur, sum(parts.values())), parts))
    return out, group


def _bar(i, name, dur, parts, slot, bar_w, scale) -> dict:
    """One bar: its box, tooltip, and stacked segments (bottom-up in category order)."""
    x = _LEFT + i * slot + (slot - bar_w) / 2
    y = _H - _BOTTOM
    segs = []
    for c in CATEGORIES:
        h = parts[c] * scale
        if h < 0.05:
            continue
        y -= h
        share = fmt_pct(parts[c] / dur if dur else 0)
        segs.append({"cat": c, "y": y, "h": h, "title": f"{CATEGORY_LABELS[c]}: {fmt_us(parts[c])} ({share})"})
    top = sorted(((parts[c], c) for c in CATEGORIES if parts[c] > 0), reverse=True)[:3]
    summary = ", ".join(f"{CATEGORY_LABELS[c]} {fmt_pct(v / dur if dur else 0, 0)}" for v, c in top)
    return {"name": name, "x": x, "w": bar_w, "y": y, "h": _H - _BOTTOM - y, "segments": segs, "apart": "",
            "title": f"{name}: {fmt_us(dur)}" + (f" — {summary}" if summary else "")}


def _compact_paths(bars: list[dict]) -> list[tuple[str, str]]:
    """One SVG path per category drawing that category's segment in every bar (for many bars)."""
    d: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    for b in bars:
        for s in b["segments"]:
            d[s["cat"]].append(f"M{b['x']:.1f} {s['y']:.1f}h{_short(b['w'])}v{s['h']:.1f}h-{_short(b['w'])}z")
    return [(c, "".join(parts)) for c, parts in d.items() if parts]


def _fmt_bar(b: dict) -> dict:
    """Coordinates as short strings for the template."""
    segs = [{**s, "y": f"{s['y']:.1f}", "h": f"{max(s['h'], 0.1):.1f}"} for s in b["segments"]]
    return {**b, "x": f"{b['x']:.1f}", "w": _short(b["w"]),
            "y": f"{b['y']:.1f}", "h": f"{max(b['h'], 0.1):.1f}", "segments": segs}


def _tick_label(us: float) -> str:
    """An axis label: `0`, `250 µs`, `2.5 ms`, `1 s` (no trailing zeros)."""
    if us == 0:
        return "0"
    for unit, div in (("s", 1e6), ("ms", 1e3), ("µs", 1.0)):
        if us >= div:
            return f"{_short(us / div)} {unit}"
    return f"{_short(us)} µs"


def _short(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


def _nice_step(raw_max: float) -> float:
    """A tick step (1, 2, 2.5 or 5 times a power of ten) giving at most 5 intervals."""
    target = raw_max / 4
    exp = 10 ** math.floor(math.log10(target))
    return next(m * exp for m in (1, 2, 2.5, 5, 10) if m * exp >= target)


def _axis(raw_max: float) -> tuple[float, list[float]]:
    """(top of the y axis, tick values) for data up to `raw_max`."""
    step = _nice_step(raw_max)
    top = math.ceil(raw_max / step - 1e-9) * step
    return top, [k * step for k in range(int(round(top / step)) + 1)]


def _xticks(bars_src: list, slot: float, group: int,
            numbers_of: list = ()) -> list[tuple[str, str]]:
    """Labels under the bars: step 1, then round step numbers (5, 10 … or 100, 200 …), at most ~9;
    each said as the trace numbers the step (`numbers_of`: step_numbers) where it does."""
    n = len(bars_src)
    if not n:
        return []
    steps = n * group
    every = next(m for m in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10**4, 10**5, 10**6)
                 if m * 8 >= steps or m == 10**6)
    labels = [1] + [k for k in range(every, steps + 1, every) if k - 1 >= every / 2]
    return [(f"{_LEFT + ((k - 1) // group + 0.5) * slot:.1f}", _step_label(numbers_of, k))
            for k in labels if (k - 1) // group < n]


def _step_label(numbers_of: list, k: int) -> str:
    """The k-th step (from 1) as the trace numbers it (ProfilerStep#8 -> 8, issue 37: one step
    numbering in the evidence, the chart and the text); k itself where the trace gives no number."""
    known = k - 1 < len(numbers_of) and numbers_of[k - 1] is not None
    return str(numbers_of[k - 1]) if known else str(k)


def step_numbers(steps: list) -> list:
    """Each step's own number from its name (`ProfilerStep#8` -> 8), None where the name has none;
    [] unless every step has one."""
    out = []
    for s in steps:
        head, sep, tail = str(s.get("name") or "").rpartition("#")
        out.append(int(tail) if sep and head and tail.isdigit() else None)
    return out if out and all(x is not None for x in out) else []
