"""Plain-text terminal summary, rendered from a report@1 dict."""

from __future__ import annotations

from ..config import CATEGORIES
from .escape import terminal

BAR_WIDTH = 30
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


def _clean(text: str) -> str:
    """Names from traces are data: control characters escaped, bidi controls shown (escape.terminal)."""
    return terminal(text)


def render_terminal(report: dict) -> str:
    t, s = report["trace"], report["summary"]
    rank = "" if t.get("rank") is None else f"  rank {t['rank']}" + (
        f"/{t['world_size']}" if t.get("world_size") is not None else "")
    device = t.get("device") or ("CPU only" if t["device_type"] == "cpu" else "unknown device")
    lines = [
        f"perfsleuth {report['tool']['version']} — {_clean(t['path'])}",
        f"device: {_clean(device)} ({t['device_type']}){rank}   events: {t['events']:,}",
        f"steps: {len(report['steps'])} ({report['steps_source']})   step time: median "
        f"{_fmt_us(s['step_time_us']['median'])}, p90 {_fmt_us(s['step_time_us']['p90'])}"
        + ("" if s.get("device_busy") is None else f"   device busy: {s['device_busy']:.0%}"),
        "",
        f"{'category':<14}{'share':>7}  {'per step':>10}  ",
    ]
    steps = report["steps"]
    for c in CATEGORIES:
        share = s["time_share"][c]
        mean_us = sum(st["time_us"][c] for st in steps) / len(steps) if steps else 0.0
        lines.append(f"{c:<14}{share:>7.1%}  {_fmt_us(mean_us):>10}  {bar(share)}")
    if t["device_type"] == "cpu":
        lines.append("(CPU-only trace: kernel = time inside aten ops on the CPU)")
    lines += ["", f"verdict: {_clean(report['verdict'].upper())}", f"  {_clean(report.get('verdict_reason', ''))}"]
    findings = report.get("findings") or []
    if findings:
        lines += ["", "findings:"]
        for f in findings[:8]:
            gain = f.get("estimated_speedup")
            gain_txt = f"  (up to {gain:.2f}x)" if isinstance(gain, (int, float)) else ""
            lines.append(f"  [{_clean(f.get('severity', '?'))}] {_clean(f['rule'])}: {_clean(f.get('title', ''))}{gain_txt}")
    for w in report.get("warnings") or []:
        lines.append(f"warning: {_clean(w)}")
    return "\n".join(lines)
