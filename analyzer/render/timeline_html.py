"""The HTML page's way into the trace: the timeline of one steady step (inline SVG: host threads and
device streams as lanes, events coloured by breakdown category, the findings' categories outlined;
hover shows name, duration and category) and the button that opens the trace in Perfetto's UI.

The geometry is computed here from the report's `timeline` section (docs/schema.md#timeline); every
name is escaped (html.escape after escape.visible). The page's one script (templates/report.js) adds
the hover box (text only, set with textContent) and the Perfetto button's postMessage exchange.
"""

from __future__ import annotations

import math
import os
from html import escape
from typing import Any, Optional

from ..config import CATEGORIES
from ..report.escape import visible
from ..report.present import CATEGORY_LABELS, fmt_us

PERFETTO_ORIGIN = "https://ui.perfetto.dev"
W = 1000.0  # SVG units
LABEL = 170.0  # the lane names' column
ROW, LANE_GAP, AXIS = 11.0, 9.0, 22.0
MAX_NAME = 120  # characters of an event's name in its tooltip (the JSON keeps up to 300)
MAX_CLIMB = 2  # a trace more than this many folders above the report is named by its file name only


def _e(x: Any) -> str:
    return escape(visible(x), quote=True)


def shown_path(path: Optional[str], base: Optional[str]) -> str:
    """The trace's path as the page shows it: relative to the report's folder (`base`), or its file
    name when it lies more than MAX_CLIMB folders above it, on another drive, or `base` is unknown:
    no absolute path of the machine that wrote the report (a CI runner's) leaks into the page."""
    if not path:
        return ""
    if "://" in path:
        return path
    if base is None:
        return os.path.basename(path)
    try:
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(base))
    except ValueError:  # another drive (Windows)
        return os.path.basename(path)
    parts = rel.replace(os.sep, "/").split("/")
    return (
        os.path.basename(path)
        if parts[: MAX_CLIMB + 1].count("..") > MAX_CLIMB
        else rel.replace(os.sep, "/")
    )


def marks(report: dict) -> dict:
    """category -> the rules of the findings in it (the events the timeline outlines); `other` names
    no kind of event (step outliers, warm-up), so it marks none."""
    out: dict = {}
    for f in report.get("findings") or []:
        if isinstance(f, dict) and f.get("category") in CATEGORIES[:-1] and f.get("rule"):
            out.setdefault(f["category"], []).append(str(f["rule"]))
    return out


def timeline_html(report: dict, pid: str = "", base: Optional[str] = None) -> str:
    """The section ('' when the report has no timeline: older reports, traces without a steady
    step)."""
    tl = report.get("timeline")
    if not isinstance(tl, dict) or not isinstance(tl.get("lanes"), list):
        return ""
    trace_path = str((report.get("trace") or {}).get("path") or "")
    lanes, events = tl["lanes"], [e for e in tl.get("events") or [] if isinstance(e, dict)]
    dur = float(tl.get("duration_us") or 0.0) or 1.0
    top, ys = AXIS, []
    for lane in lanes:
        ys.append(top)
        top += max(int(lane.get("depth") or 0), 1) * ROW + LANE_GAP
    height = top + 4
    by_cat = marks(report)
    scale = (W - LABEL) / dur
    out = [
        f'<section id="{_e(pid)}timeline" class="timeline">',
        "<h2>One step, event by event</h2>",
        f'<p class="hint">{_e(_hint(tl, by_cat))}</p>',
        _perfetto(trace_path, base, pid),
        (
            f'<div class="timeline-wrap"><svg class="timeline" id="{_e(pid)}timeline-svg" '
            f'viewBox="0 0 {W:.0f} {height:.0f}" role="img" '
            f'aria-label="timeline of {_e(tl.get("step"))}">'
        ),
    ]
    for x, label in _ticks(dur):
        px = LABEL + x * scale
        out.append(
            f'<line class="tick" x1="{px:.1f}" x2="{px:.1f}" y1="{AXIS - 4}" y2="{height:.0f}"/>'
            f'<text class="tick" x="{px:.1f}" y="{AXIS - 8}" text-anchor="middle">'
            f"{_e(label)}</text>"
        )
    for i, (lane, y) in enumerate(zip(lanes, ys)):
        h = max(int(lane.get("depth") or 0), 1) * ROW
        out.append(
            f'<g class="lane {_e(lane.get("kind"))}" data-lane="{i}">'
            f'<rect class="lane-bg" x="{LABEL}" y="{y:.1f}" width="{W - LABEL:.0f}" '
            f'height="{h:.0f}"/>'
            f'<text class="lane-name" x="{LABEL - 6}" y="{y + 9:.1f}" text-anchor="end">'
            f"{_e(_short(lane.get('name'), 26))}<title>{_e(lane.get('name'))}</title></text></g>"
        )
    for e in events:
        lane = int(e.get("lane") or 0)
        if not 0 <= lane < len(ys):
            continue
        cat = e.get("category") if e.get("category") in CATEGORIES else "other"
        x = LABEL + float(e.get("start_us") or 0.0) * scale
        w = max(float(e.get("dur_us") or 0.0) * scale, 0.5)
        y = ys[lane] + int(e.get("depth") or 0) * ROW
        rules = by_cat.get(cat)
        tip = f"{_short(e.get('name'), MAX_NAME)} — {fmt_us(e.get('dur_us'))}"
        tip += f" · {CATEGORY_LABELS[cat]}"
        tip += f" · finding: {', '.join(rules)}" if rules else ""
        cls = f"ev c-{cat}" + (" marked" if rules else "")
        out.append(
            f'<rect class="{cls}" x="{x:.1f}" y="{y + 0.5:.1f}" width="{w:.1f}" '
            f'height="{ROW - 1:.0f}">'
            f"<title>{_e(tip)}</title></rect>"
        )
    out.append("</svg></div>")
    out.append('<div class="tl-tip" role="status" aria-live="polite" hidden></div>')
    out.append(
        '<ul class="legend">'
        + "".join(
            f'<li><span class="swatch c-{c}"></span>{_e(CATEGORY_LABELS[c])}</li>'
            for c in CATEGORIES
        )
        + ('<li><span class="swatch marked"></span>a finding\'s category</li>' if by_cat else "")
        + "</ul></section>"
    )
    return "".join(out)


def _hint(tl: dict, by_cat: dict) -> str:
    n = tl.get("steady_steps")
    which = f"the median of {n} steady steps" if n != 1 else "the one steady step"
    kinds = {lane.get("kind") for lane in tl.get("lanes") or [] if isinstance(lane, dict)}
    lanes = ("host threads, then device streams" if "device" in kinds
             else "host threads (the trace holds no device activity in this step)")
    text = (
        f"{tl.get('step')}, {which} ({fmt_us(tl.get('duration_us'))}): "
        f"{lanes}; an event inside another is drawn one row lower. "
        f"Colours are the time breakdown's categories. {tl.get('note') or ''}."
    )
    if by_cat:
        text += (
            " Outlined: events of a category a finding names ("
            + "; ".join(f"{CATEGORY_LABELS[c]}: {', '.join(r)}" for c, r in by_cat.items())
            + ")."
        )
    return text + " Hover an event for its name, duration and category."


def _perfetto(trace_path: str, base: Optional[str], pid: str) -> str:
    """The button: opens ui.perfetto.dev and hands it the trace's bytes by postMessage. The bytes
    come from the trace file beside the report (its path relative to the report's folder) when the
    page is served over HTTP(S); from a file the reader picks otherwise (a file:// page cannot read
    files)."""
    if not trace_path or "://" in trace_path:
        return ""
    rel = shown_path(trace_path, base)
    return (
        f'<div class="perfetto js-only" id="{_e(pid)}perfetto">'
        f'<button type="button" class="perfetto" data-trace="{_e(rel)}" '
        f'data-origin="{PERFETTO_ORIGIN}" data-title="{_e(os.path.basename(trace_path))}">'
        "Open the trace in Perfetto UI (needs the network: loads ui.perfetto.dev)</button>"
        '<label class="perfetto-pick" hidden>This page cannot read '
        f"<code>{_e(rel)}</code> itself (opened as a file, or the trace is not beside it): "
        'choose the trace file to send <input type="file" class="perfetto-file" '
        'accept=".json,.gz,application/json,application/gzip">'
        '</label><span class="perfetto-status"></span>'
        '<p class="muted">The rest of this report loads nothing from the network; the trace goes '
        "only to the Perfetto window this button opens.</p></div>"
    )


def _ticks(dur: float) -> list:
    """Up to six round ticks over [0, dur] µs: (µs, label)."""
    raw = dur / 5
    exp = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * exp for m in (1, 2, 2.5, 5, 10) if m * exp >= raw)
    return [(k * step, fmt_us(k * step) if k else "0") for k in range(int(dur // step) + 1)]


def _short(text: Any, n: int) -> str:
    s = str(text or "")
    return s if len(s) <= n else s[: n - 1] + "…"
