"""Plain-text terminal summary, rendered from a report@1 dict."""

from __future__ import annotations

from ..config import CATEGORIES
from ..report import figures, numbers
from ..report.escape import shorten, terminal
from ..report.present import (NO_FINDINGS, NO_FINDINGS_WHY, fmt_forecast, forecast_note, location_text, measurement_lines,
                      member_path, per_step, set_apart, set_order, shown_path, steady_steps, steps_text)
from .efficiency_text import terminal_lines as efficiency_lines
from .memory_text import memory_lines

BAR_WIDTH = 30
MAX_APART = 10
REASON_CHARS = 160  # of a "no reliable forecast" reason on a finding's line
_BLOCKS = " ▏▎▍▌▋▊▉█"


def bar(share: float, width: int = BAR_WIDTH) -> str:
    cells = max(0.0, min(1.0, share)) * width
    full = int(cells)
    part = _BLOCKS[int((cells - full) * 8)] if full < width else ""
    return ("█" * full + part.strip()).ljust(width)


def _fmt_us(us) -> str:
    if us is None:
        return "-"
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


MAX_TEXT = 1000  # characters of any one piece of text a line shows: a 10 MB frame name is cut, as HTML cuts it


def _clean(text: str) -> str:
    """Names from traces are data: control characters escaped, bidi controls shown (escape.terminal), and cut
    at MAX_TEXT characters."""
    return terminal(shorten(str(text), MAX_TEXT))


def render_terminal(report: dict) -> str:
    t, s = report["trace"], report["summary"]
    rank = "" if t.get("rank") is None else f"  rank {t['rank']}" + (
        f"/{t['world_size']}" if t.get("world_size") is not None else "")
    device = t.get("device") or ("CPU only" if t["device_type"] == "cpu" else "unknown device")
    lines = [
        f"perfsleuth {report['tool']['version']} — {_clean(shown_path(t['path']))}",
        f"device: {_clean(device)} ({t['device_type']}){rank}   events: {t['events']:,}",
        f"steps: {steps_text(report, short=True)} ({report['steps_source']})   step time: median "
        f"{_fmt_us(s['step_time_us']['median'])}, p90 {_fmt_us(s['step_time_us']['p90'])}"
        + ("" if s.get("device_busy") is None else f"   device busy: {s['device_busy']:.0%}"),
        *[_clean(x) for x in measurement_lines(report) if x],
        "",
        f"{'category':<14}{'share':>7}  {'median/step':>11}  {'mean/step':>10}  ",
    ]
    steps = steady_steps(report)
    for c in CATEGORIES:
        share, each = s["time_share"][c], per_step(steps, c)
        lines.append(f"{c:<14}{share:>7.1%}  {_fmt_us(each['median']):>11}  {_fmt_us(each['mean']):>10}  {bar(share)}")
    lines.append("(median/step: like the step time above; share and mean/step: of all the steps' time together)")
    if report.get("verdict") == "device-unread":
        lines.append("(device-unread: the device's time is not in the trace; the host's op time "
                     "is counted as host)")
    elif t["device_type"] == "cpu":
        lines.append("(CPU-only trace: kernel = time inside aten ops on the CPU)")
    apart = set_apart(report)
    if apart:
        lines += ["", "set apart (not in the shares, the verdict or the findings; step-outliers still counts them):"]
        for a in apart[:MAX_APART]:
            lines.append(f"  {a['label']:<8} {_clean(a['name'])}: {_clean(a['reason']) or _fmt_us(a['duration_us'])}")
        if len(apart) > MAX_APART:
            lines.append(f"  … {len(apart) - MAX_APART} more in report.json")
    degree = f" ({_clean(report['degree'])})" if report.get("degree") else ""
    said, notes = figures.verdict_said(report)
    said = f": {_clean(said)}" if said else ""
    lines += ["", f"verdict: {_clean(report['verdict'].upper())}{degree}{said}"]
    lines += [f"  {_clean(n)}" for n in notes]
    statement = (report.get("host_time") or {}).get("statement")
    if statement:
        lines.append(f"  {_clean(statement)}")
    findings = [f for f in report.get("findings") or [] if isinstance(f, dict)]
    best = figures.best_measured(findings)
    if best:
        lines.append(f"  {_clean(best)}")
    if findings:
        top = numbers.top_finding(findings)
        lines += ["", "findings:" if top else f"findings (none is the top one: {numbers.NO_TOP}):"]
        for f in findings[:8]:
            lines.append(f"  [{_clean(f.get('severity', '?'))}] {_clean(f.get('rule', '?'))}: {_clean(f.get('title', ''))}  "
                         f"({_clean(figures.number_text(f, REASON_CHARS))})")
            for loc in (f.get("locations") or [])[:2]:
                lines.append(f"      at {_clean(location_text(loc))}")
        combined = (report.get("forecast") or {}).get("combined")
        if isinstance(combined, dict) and combined.get("speedup") is not None:
            rules = ", ".join(_clean(r) for r in combined.get("rules") or [])
            lines.append(f"  all of {rules} together: {_clean(fmt_forecast(combined))}")
        lines.append(f"  ({forecast_note(findings)}; assumptions in the JSON, HTML and Markdown reports)")
        if any(figures.verified_of(f) for f in findings):
            lines.append(f"  ({figures.MEASURED_NOTE})")
    else:
        lines += ["", f"findings: {NO_FINDINGS} ({NO_FINDINGS_WHY})"]
    memory = memory_lines(report, _clean)
    lines += [""] + memory if memory else []
    lines += efficiency_lines(report, _clean)
    for n in report.get("not_checked") or []:
        lines.append(f"not checked: {_clean(n.get('rule', '?'))} — {_clean(n.get('reason', ''))}")
    for w in figures.shown_warnings(report, measurement_lines(report)):
        lines.append(f"warning: {_clean(w)}")
    return "\n".join(lines)


# --- a directory of traces (report-set@1) ---------------------------------------------------------
def set_index_rows(data: dict) -> list:
    """(rank, verdict, median step time, top finding, file) per report, by rank then path."""
    rows = []
    for rep in set_order(data.get("reports") or []):
        t, findings = rep.get("trace") or {}, rep.get("findings") or []
        first = numbers.top_finding(findings)
        top = f"{first.get('rule', '?')} ({figures.short_text(first)})" if first else (
            f"- ({numbers.NO_TOP})" if any(isinstance(f, dict) for f in findings) else "-")
        rank = "-" if t.get("rank") is None else str(t["rank"])
        median = ((rep.get("summary") or {}).get("step_time_us") or {}).get("median")
        rows.append((rank, str(rep.get("verdict") or "?"), _fmt_us(median), top,
                     member_path(str(t.get("path") or "?"), str(data.get("path") or ""))))
    return rows


def render_set_index(data: dict) -> str:
    """The index of a directory of traces: one row per file with rank, verdict, step time and top finding."""
    rows = [tuple(_clean(c) for c in r) for r in set_index_rows(data)]
    head = ("rank", "verdict", "median step", "top finding", "file")
    widths = [max([len(head[i])] + [len(r[i]) for r in rows]) for i in range(4)]
    fmt = "{:>%d}  {:<%d}  {:>%d}  {:<%d}  {}" % tuple(widths)
    count = len(rows)
    return "\n".join([f"perfsleuth {data['tool']['version']} — {count} trace{'s' if count != 1 else ''} in "
                      f"{_clean(shown_path(data.get('path') or '?'))}", "", fmt.format(*head).rstrip(),
                      *(fmt.format(*r) for r in rows)])


def render_terminal_set(data: dict, details: bool = False) -> str:
    """A directory: the index first; each trace's full report after it with `details` (`--details`)."""
    parts = [render_set_index(data)]
    if details:
        parts += [render_terminal(rep) for rep in set_order(data.get("reports") or [])]
    else:
        parts.append("(perfsleuth analyze DIR --details prints each trace's full report)")
    return "\n\n".join(parts)
