"""Memory in a diff (diff@1 `memory`, docs/ci.md): per device both sides' peak allocated bytes and
growth per step, the peak's change as a fraction of the base's; the lines the terminal and
Markdown show; and the `--fail-on-memory-regression PCT` gate. Peaks are deterministic for a
given program and batch (no noise model: the allocator's levels do not jitter like step times); a
device on one side only is said."""

from __future__ import annotations

from typing import Callable, Optional

from .memory_text import fmt_ibytes


def _devices(report: dict) -> dict:
    mem = report.get("memory")
    return (
        {d["device"]: d for d in (mem or {}).get("devices") or []} if isinstance(mem, dict) else {}
    )


def memory_change(base: dict, head: dict) -> Optional[dict]:
    """diff@1's `memory`: None when neither side recorded memory."""
    b, h = _devices(base), _devices(head)
    if not b and not h:
        return None
    rows = []
    for name in [*b, *(k for k in h if k not in b)]:
        bd, hd = b.get(name), h.get(name)
        row = {"device": name}
        for side, d in (("base", bd), ("head", hd)):
            row[f"{side}_peak_allocated_bytes"] = d["peak_allocated_bytes"] if d else None
            row[f"{side}_growth_bytes_per_step"] = d.get("growth_bytes_per_step") if d else None
        bp, hp = row["base_peak_allocated_bytes"], row["head_peak_allocated_bytes"]
        row["peak_change_bytes"] = hp - bp if bp is not None and hp is not None else None
        row["peak_change"] = round((hp - bp) / bp, 4) if bp and hp is not None else None
        bg, hg = row["base_growth_bytes_per_step"], row["head_growth_bytes_per_step"]
        row["growth_change_bytes"] = hg - bg if bg is not None and hg is not None else None
        rows.append(row)
    return {"base_recorded": bool(b), "head_recorded": bool(h), "devices": rows}


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:+.1%}"


def memory_lines(mem: Optional[dict], esc: Callable[[str], str]) -> list:
    """One line per device: peak base → head (change), growth per step base → head."""
    if not mem:
        return []
    if not (mem["base_recorded"] and mem["head_recorded"]):
        side = "base" if not mem["base_recorded"] else "head"
        return [
            f"memory: the {side} has no memory events (record with profile_memory=True): not"
            " compared"
        ]
    out = []
    for r in mem["devices"]:
        peak = (
            f"peak {fmt_ibytes(r['base_peak_allocated_bytes'])} →"
            f" {fmt_ibytes(r['head_peak_allocated_bytes'])} ({_pct(r['peak_change'])})"
        )
        growth = (
            f"growth {fmt_ibytes(r['base_growth_bytes_per_step'])} → "
            f"{fmt_ibytes(r['head_growth_bytes_per_step'])} per step"
        )
        out.append(f"memory {esc(r['device'])}: {peak}, {growth}")
    return out


def memory_failures(mem: Optional[dict], threshold: Optional[float]) -> list:
    """`--fail-on-memory-regression`: a device whose peak allocated grew by more than `threshold`; a
    side without memory events fails too (the gate cannot check what was not recorded)."""
    if threshold is None:
        return []
    if not mem or not (mem["base_recorded"] and mem["head_recorded"]):
        missing = (
            "neither side has"
            if not mem or not (mem["base_recorded"] or mem["head_recorded"])
            else "the base has no" if not mem["base_recorded"] else "the head has no"
        )
        return [
            f"--fail-on-memory-regression: {missing} memory events (record with"
            " profile_memory=True)"
        ]
    out = []
    for r in mem["devices"]:
        change = r["peak_change"]
        if change is not None and change > threshold:
            out.append(
                f"peak memory on {r['device']} {fmt_ibytes(r['base_peak_allocated_bytes'])} → "
                f"{fmt_ibytes(r['head_peak_allocated_bytes'])} ({change:+.1%}) exceeds "
                f"--fail-on-memory-regression {threshold * 100:g}%"
            )
    return out
