"""The HTML memory section's view (templates/_memory.html.j2): per device the text lines
(memory_text), an inline SVG of the allocated level over the window (each slice's highest and
lowest level, so no peak is lost) with the step boundaries and the peak marked, and the
categories at the peak as one stacked bar. Plain numbers and strings only: the template
autoescapes every name from a trace."""

from __future__ import annotations

from typing import Optional

from .memory_text import CATEGORY_ORDER, categories_text, categories_total, device_lines, fmt_ibytes

W, H = 720, 210
LEFT, RIGHT, TOP, BOTTOM = 70, 710, 12, 178
BAR_W = 640
MAX_STEP_LINES = 60  # step boundaries drawn (more steps: every k-th)


def _scale(lo: float, hi: float, a: float, b: float):
    span = (hi - lo) or 1.0
    return lambda v: round(a + (float(v) - lo) / span * (b - a), 1)


def plot(d: dict) -> Optional[dict]:
    s = d.get("series")
    if not isinstance(s, dict) or not s.get("t_us"):
        return None
    t, hi_b, lo_b = s["t_us"], s["max_bytes"], s["min_bytes"]
    steps = [st for st in d.get("steps") or [] if st.get("start_us") is not None]
    t0 = min([t[0]] + [st["start_us"] for st in steps])
    t1 = max(
        [s.get("end_us") or t[-1]] + [st["end_us"] for st in steps if st.get("end_us") is not None]
    )
    top = max(max(hi_b), 1) * 1.1
    x, y = _scale(t0, t1, LEFT, RIGHT), _scale(0, top, BOTTOM, TOP)
    upper = " ".join(f"{x(a)},{y(b)}" for a, b in zip(t, hi_b))
    lower = " ".join(f"{x(a)},{y(b)}" for a, b in reversed(list(zip(t, lo_b))))
    every = max(1, -(-len(steps) // MAX_STEP_LINES))
    marks = [
        {
            "x": x(st["start_us"]),
            "name": st["step"],
            "label": st["step"].rsplit("#", 1)[-1] if "#" in st["step"] else "",
        }
        for st in steps[::every]
    ]
    ticks = [{"y": y(top * k / 4), "label": fmt_ibytes(int(top * k / 4))} for k in range(5)]
    peak = {
        "x": x(d["peak_at_us"]),
        "y": y(d["peak_allocated_bytes"]),
        "label": (
            f"peak {fmt_ibytes(d['peak_allocated_bytes'])}"
            + (f" in {d['peak_step']}" if d.get("peak_step") else "")
        ),
    }
    return {
        "width": W,
        "height": H,
        "left": LEFT,
        "right": RIGHT,
        "top": TOP,
        "bottom": BOTTOM,
        "upper": upper,
        "band": f"{upper} {lower}",
        "steps": marks,
        "yticks": ticks,
        "peak": peak,
        "relative": d.get("levels") == "relative",
    }


def category_bar(cats: Optional[dict], total_text: str = "") -> Optional[dict]:
    if not cats:
        return None
    total = sum(int(cats.get(k) or 0) for k in CATEGORY_ORDER)
    if total <= 0:
        return None
    x, segs = 0.0, []
    for k in CATEGORY_ORDER:
        v = int(cats.get(k) or 0)
        if v <= 0:
            continue
        w = v / total * BAR_W
        segs.append(
            {
                "cat": k,
                "x": round(x, 1),
                "w": round(w, 1),
                "title": f"{k.replace('_', ' ')}: {fmt_ibytes(v)} ({v / total:.0%})",
            }
        )
        x += w
    return {"width": BAR_W, "segments": segs, "text": categories_text(cats) + total_text}


def memory_view(report: dict) -> dict:
    mem = report.get("memory")
    if not isinstance(mem, dict):  # a report from before issue 35 has neither key: no section
        why = str(report.get("memory_unavailable") or "")
        return {"show": bool(why), "unavailable": why, "source": "", "devices": []}
    devices = []
    for d in mem.get("devices") or []:
        if not isinstance(d, dict) or d.get("peak_allocated_bytes") is None:
            continue
        head, *lines = device_lines(d, str)
        devices.append(
            {
                "head": head,
                "lines": lines,
                "plot": plot(d),
                "categories": category_bar(d.get("categories_at_peak"), categories_total(d)),
            }
        )
    return {
        "show": True,
        "unavailable": "",
        "source": str(mem.get("source") or "trace"),
        "devices": devices,
    }
