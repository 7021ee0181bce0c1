"""The memory section as text lines, for the terminal and Markdown (docs/schema.md#memory): per
device the peak (allocated, reserved), headroom to capacity, the end-of-step level and its
growth, what holds the peak and what is kept step after step, out-of-memory events and the
categories at the peak. Bytes in binary units named as such (KiB, MiB, GiB). Every name from a
trace goes through the caller's escape function."""

from __future__ import annotations

from typing import Callable, Optional

from ..report.present import fmt_ibytes  # noqa: F401 (memory_html, memory_diff take it from here too)

CATEGORY_ORDER = (
    "activation",
    "parameter",
    "gradient",
    "optimizer_state",
    "input",
    "temporary",
    "other",
)
TOP_SHOWN = 3
SHOWN_RESERVED_RATIO = 1.1  # reserved / allocated at their peaks shown from this ratio


LEAK_FROM_BYTES = 64 << 10  # the memory-leak rule's default min_bytes_per_step (rules/memory.toml)


def _growth_text(d: dict) -> str:
    g = d.get("growth_bytes_per_step")
    if g is None:
        return "growth: fewer than 2 steady steps"
    n = d.get("growth_steps") or 0
    text = f"growth {fmt_ibytes(g)}/step over {n} steady steps"
    if d.get("growth_monotone") and g > 0:
        text += ", rising every step"
        if g < LEAK_FROM_BYTES:
            # an unseen helper read "growth 4 B/step ..., rising every step" as a leak warning
            text += f" (under the {fmt_ibytes(LEAK_FROM_BYTES)} a step from which memory-leak reports growth)"
        elif d.get("steps_until_full") is not None:
            text += f": full in about {d['steps_until_full']:,} more steps at this rate (forecast)"
    return text


def _kept_text(d: dict, esc: Callable[[str], str]) -> str:
    kept = d.get("kept_across_steps_bytes")
    text = f"kept across steps, never freed: {fmt_ibytes(kept)} (" + _ops(d["kept_across_steps"], esc) + ")"
    if isinstance(kept, (int, float)) and kept < LEAK_FROM_BYTES:
        # an unseen helper read "never freed: 8 B" as a leak warning (the window's total: under it a step, too)
        text += f", under the {fmt_ibytes(LEAK_FROM_BYTES)} a step from which memory-leak reports growth"
    return text


def _ops(rows: list, esc: Callable[[str], str]) -> str:
    return ", ".join(f"{esc(r['op'])} {fmt_ibytes(r['bytes'])}" for r in rows[:TOP_SHOWN])


def categories_text(cats: Optional[dict]) -> str:
    if not cats:
        return ""
    total = sum(int(v or 0) for v in cats.values())
    parts = [
        f"{k.replace('_', ' ')} {fmt_ibytes(cats.get(k) or 0)}"
        + (f" ({(cats.get(k) or 0) / total:.0%})" if total else "")
        for k in CATEGORY_ORDER
        if cats.get(k)
    ]
    return ", ".join(parts)


def categories_total(d: dict) -> str:
    """What the categories at the peak add up to, where the peak above them counts only what was allocated since
    profiling began (CPU levels are relative): "3.68 MiB" peak above "parameter 14.47 MiB (77%)" read as a
    contradiction to an unseen helper (issue 39's DLRM). '' otherwise."""
    cats = d.get("categories_at_peak")
    if d.get("levels") != "relative" or not cats:
        return ""
    total = sum(int(v or 0) for v in cats.values())
    return (f"; {fmt_ibytes(total)} in all, with the tensors made before profiling began (parameters), which the "
            "peak allocated above leaves out")


def device_lines(d: dict, esc: Callable[[str], str]) -> list:
    """The lines of one device: the first a headline, the rest details (indented by the caller)."""
    rel = d.get("levels") == "relative"
    head = f"{esc(d['device'])}: peak allocated {fmt_ibytes(d['peak_allocated_bytes'])}"
    if d.get("peak_step"):
        head += f" (in {esc(d['peak_step'])})"
    if d.get("peak_reserved_bytes") is not None:
        head += f", reserved {fmt_ibytes(d['peak_reserved_bytes'])}"
    if d.get("capacity_bytes") is not None and d.get("headroom_bytes") is not None:
        head += (
            f"; capacity {fmt_ibytes(d['capacity_bytes'])}, headroom"
            f" {fmt_ibytes(d['headroom_bytes'])}"
        )
    head += " (measured" + (", relative: allocated since profiling began)" if rel else ")")
    steps = [s for s in d.get("steps") or [] if s.get("phase") == "steady"]
    ends = [s["end_allocated_bytes"] for s in steps if s.get("end_allocated_bytes") is not None]
    lines = [head]
    level = f"end of step {fmt_ibytes(ends[-1])}; " if ends else ""
    lines.append(level + _growth_text(d))
    if d.get("top_ops_at_peak"):
        lines.append("at the peak: " + _ops(d["top_ops_at_peak"], esc))
    if d.get("kept_across_steps"):
        lines.append(_kept_text(d, esc))
    frag = d.get("fragmentation")
    if frag and (frag.get("peak_reserved_over_allocated") or 0) >= SHOWN_RESERVED_RATIO:
        lines.append(
            f"reserved {frag['peak_reserved_over_allocated']:.2f}x allocated at their peaks "
            f"({fmt_ibytes(frag['reserved_over_allocated_bytes'])} cached, not in use)"
        )
    for o in (d.get("out_of_memory") or [])[:TOP_SHOWN]:
        lines.append(
            f"OUT OF MEMORY asking {fmt_ibytes(o['bytes'])} in {esc(o['op'] or 'no op')}"
            + (f" ({esc(o['step'])})" if o.get("step") else "")
        )
    cats = categories_text(d.get("categories_at_peak"))
    if cats:
        lines.append("at the peak, by category (run): " + cats + categories_total(d))
    for m in d.get("missing") or []:
        lines.append("not in the trace: " + esc(m))
    return lines


def memory_lines(report: dict, esc: Callable[[str], str]) -> list:
    """The terminal's memory section (without a blank line before it)."""
    mem = report.get("memory")
    if not isinstance(mem, dict):
        why = report.get("memory_unavailable")
        return [f"memory: not recorded — {esc(why)}"] if why else []
    lines = [f"memory ({esc(mem.get('source') or 'trace')}):"]
    for d in mem.get("devices") or []:
        first, *rest = device_lines(d, esc)
        lines.append(f"  {first}")
        lines += [f"    {x}" for x in rest]
    return lines


def memory_markdown(report: dict, esc: Callable[[str], str]) -> str:
    """The Markdown memory section: a heading, a bullet per device with its details nested."""
    mem = report.get("memory")
    if not isinstance(mem, dict):
        why = report.get("memory_unavailable")
        return f"#### Memory\n\nNot recorded: {esc(why)}." if why else ""
    lines = [f"#### Memory (from the {esc(mem.get('source') or 'trace')})", ""]
    for d in mem.get("devices") or []:
        first, *rest = device_lines(d, esc)
        lines.append(f"- **{first}**")
        lines += [f"  - {x}" for x in rest]
    return "\n".join(lines)
