"""The compute-efficiency section as text: lines for the terminal and a Markdown section, from the
report dict's `efficiency` object (docs/schema.md). Every percentage names its denominator (the
peak, its precision and where it comes from); names from the trace are escaped by the caller's
escaper."""

from __future__ import annotations

from typing import Any, Callable

from ..analysis.efficiency.words import (bandwidth, count, family_summary, pct,  # noqa: F401
                                         peak_text, rate)
from ..report.present import fmt_us

TOP_OPS = 5


def headline(e: dict) -> list:
    """The step's FLOPs, rate and share of the peak, and how much of the time has a model."""
    lines = [f"FLOPs/step {count(e.get('flops_per_step'))} (measured shapes; "
             f"{e.get('time_basis')}), "
             f"rate {rate(e.get('step_flops_per_s'))} over the step"]
    if e.get("hfu") is not None:
        lines.append(f"HFU {pct(e['hfu'])} of {peak_text(e)}: the FLOPs counted from the "
                     f"trace's shapes / the mean step time{_step(e)}")
    elif e.get("peak_unavailable"):
        lines.append(f"no percentages: {e['peak_unavailable']}")
    lines.append(mfu_line(e))
    if e.get("modelled_time_share") is not None:
        lines.append(f"ops with a FLOPs model: {pct(e['modelled_time_share'])} of the time; "
                     "the rest is unknown")
    fam = family_summary(e)
    if fam:
        lines.append(f"by family: {fam}")
    if e.get("warning"):
        lines.append(f"warning: {e['warning']}")
    return lines


def _step(e: dict) -> str:
    return f" ({fmt_us(e['step_time_us'])})" if e.get("step_time_us") else ""


def _cost(e: dict) -> str:
    """'; the counted step took 2.24 s, an unprofiled one 3.96 s' ('' when not recorded)."""
    c = e.get("model_flops_cost") if isinstance(e.get("model_flops_cost"), dict) else {}
    if not isinstance(c.get("step_s"), (int, float)):
        return ""
    plain = c.get("unprofiled_step_s")
    than = (f", an unprofiled one {fmt_us(plain * 1e6)}" if isinstance(plain, (int, float)) else "")
    return f"; the counted step took {fmt_us(c['step_s'] * 1e6)}{than}"


def mfu_line(e: dict) -> str:
    """MFU beside HFU: the model's FLOPs (FlopCounterMode's count of one step) over the same step
    time and peak; or why there is none."""
    if e.get("mfu") is not None:
        return (f"MFU {pct(e['mfu'])} of the same peak: the model's FLOPs, "
                f"{count(e.get('model_flops_per_step'))}/step counted by FlopCounterMode on one "
                f"step (matmul, convolution, attention) / the mean step time{_cost(e)}")
    if e.get("model_flops_per_step"):
        return (f"model FLOPs {count(e['model_flops_per_step'])}/step (FlopCounterMode); "
                f"no MFU: {e.get('mfu_unavailable') or 'no peak'}")
    return f"MFU not available: {e.get('mfu_unavailable') or 'the model FLOPs were not counted'}"


def op_line(o: dict, esc: Callable[[Any], str]) -> str:
    roof = (f"{pct(o.get('pct_of_roofline'))} of roofline ({o.get('bound')}-bound)"
            if o.get("pct_of_roofline") is not None else "roofline unknown")
    return (f"{esc(o.get('name'))} {esc(o.get('shape'))} {esc(o.get('dtype'))}: "
            f"{o.get('count')} calls, "
            f"{fmt_us(o.get('time_us'))} each, {rate(o.get('flops_per_s'))}, {roof}, "
            f"{fmt_us(o.get('lost_us_per_step'))}/step lost")


def terminal_lines(report: dict, esc: Callable[[Any], str]) -> list:
    """The terminal section ([] when the report has no efficiency object and says nothing about
    it)."""
    e = report.get("efficiency")
    if not isinstance(e, dict):
        why = report.get("efficiency_unavailable")
        return ["", f"compute efficiency: not available ({esc(why)})"] if why else []
    lines = ["", "compute efficiency:"] + [f"  {esc(x)}" for x in headline(e)]
    ops = [o for o in e.get("ops") or [] if isinstance(o, dict)][:TOP_OPS]
    if ops:
        lines.append("  top ops by time lost against their roofline "
                     "(measured time - roofline time):")
        lines += [f"    {op_line(o, esc)}" for o in ops]
    return lines


def markdown_section(report: dict, cell: Callable[..., str], text: Callable[[Any], str]) -> str:
    """`## Compute efficiency` with the headline and a table of the top op groups ('' when
    absent)."""
    e = report.get("efficiency")
    if not isinstance(e, dict):
        why = report.get("efficiency_unavailable")
        return f"## Compute efficiency\n\nNot available: {text(why)}." if why else ""
    out = ["## Compute efficiency", "", *[f"- {text(x)}" for x in headline(e)]]
    ops = [o for o in e.get("ops") or [] if isinstance(o, dict)][:10]
    if ops:
        out += ["", "| op | shapes | dtype | calls | µs each | FLOP/s | % of roofline | bound "
                "| lost µs/step |",
                "|---|---|---|---:|---:|---:|---:|---|---:|"]
        for o in ops:
            out.append(f"| {cell(o.get('name'), code=True)} | {cell(o.get('shape'))} | "
                       f"{cell(o.get('dtype'))} | "
                       f"{o.get('count')} | {o.get('time_us')} | {rate(o.get('flops_per_s'))} | "
                       f"{pct(o.get('pct_of_roofline'))} | {cell(o.get('bound') or '-')} | "
                       f"{o.get('lost_us_per_step')} |")
    return "\n".join(out)


def efficiency_change(base: dict, head: dict) -> dict:
    """diff@1's `efficiency`: each side's FLOPs per step, rate and HFU, and the changes (None where
    a side has no efficiency object)."""
    sides = {}
    for label, r in (("base", base), ("head", head)):
        e = r.get("efficiency") if isinstance(r.get("efficiency"), dict) else None
        sides[label] = None if e is None else {k: e.get(k) for k in (
            "flops_per_step", "step_flops_per_s", "hfu", "model_flops_per_step", "mfu",
            "precision", "peak_name", "peak_flops_per_s")}
    b, h = sides["base"], sides["head"]
    both = b is not None and h is not None
    ratio = (h["flops_per_step"] / b["flops_per_step"]) if both and b["flops_per_step"] else None
    hfu = (h["hfu"] - b["hfu"]) if both and b["hfu"] is not None and h["hfu"] is not None else None
    mfu = (h["mfu"] - b["mfu"]) if both and b["mfu"] is not None and h["mfu"] is not None else None
    return {**sides, "flops_per_step_ratio": ratio, "hfu_change": hfu, "mfu_change": mfu}


def diff_lines(d: dict) -> list:
    """The terminal diff's efficiency lines ([] when neither side has one)."""
    e = d.get("efficiency")
    if not isinstance(e, dict) or (e.get("base") is None and e.get("head") is None):
        return []
    b, h = e.get("base") or {}, e.get("head") or {}
    line = (f"compute: FLOPs/step {count(b.get('flops_per_step'))} → "
            f"{count(h.get('flops_per_step'))}")
    if e.get("flops_per_step_ratio") is not None:
        line += f" (×{e['flops_per_step_ratio']:.3f})"
    line += f", rate {rate(b.get('step_flops_per_s'))} → {rate(h.get('step_flops_per_s'))}"
    if e.get("hfu_change") is not None:
        line += (f", HFU {pct(b.get('hfu'))} → {pct(h.get('hfu'))} of the {h.get('peak_name')}'s "
                 f"{h.get('precision')} peak")
    if e.get("mfu_change") is not None:
        line += (f", MFU {pct(b.get('mfu'))} → {pct(h.get('mfu'))} (model FLOPs/step "
                 f"{count(b.get('model_flops_per_step'))} → {count(h.get('model_flops_per_step'))},"
                 " FlopCounterMode)")
    elif b.get("mfu") is not None or h.get("mfu") is not None:
        line += f", MFU {pct(b.get('mfu'))} → {pct(h.get('mfu'))}"
    return ["", line]
