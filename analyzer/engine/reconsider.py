"""The verdict, checked against the forecasts (issue 24: the verdict agrees with the forecasts).

The verdict comes from the category shares alone (analysis/verdict.py). Once the findings carry their
numbers (measured, else forecast: report/numbers.py), three things are checked:

- A wait whose removal is forecast to buy nothing is not the headline cause. `sync` and `transfer` are
  the host waiting for the device (scalar reads, synchronize calls, blocking copies), and their
  findings' fixes remove those waits without adding work. When every numbered finding of the verdict's
  category comes to at most `NO_GAIN` (1.02x), the replay says the device would wait elsewhere: the
  verdict is decided again without that category, and the reason says why ("sync takes 33% of the
  step, but removing it is forecast at 1.00× (item-sync): ..."). Repeated while the new verdict is such
  a wait too. A category without a numbered finding keeps its verdict.
- The other stalls are work, not waits: loading data, Python and dispatch, collectives. A fix that does
  not pay (workers on busy cores, CUDA graphs where Python dominates) does not make that work vanish,
  so the verdict stays, and its reason says that no fix found for it is forecast to help.
- When the largest saving (one that buys at least 1.05×) lies in another category than the
  verdict's, the reason says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..analysis.verdict import UNREAD, decide, degree, verdict_text
from ..config import Config
from ..report import numbers
from ..report.present import fmt_us


WAITS = ("sync", "transfer")  # stalls whose findings' fixes remove the wait itself (see the module docstring)
# Findings that say the verdict describes something else than a steady step (issue 37: what the data
# cannot show).
QUALIFY = {"first-calls": "the trace records first calls (start-up), not steady steps: this "
                          "verdict describes start-up (first-calls)"}
# On the CPU an op's own time is the category `kernel` (there is no device to wait for), so a step of many short
# ops reads kernel-bound while tiny-ops says that time is per-op overhead: said beside the verdict (every
# unseen helper of issue 39 read "kernel-bound" above "per-op overhead, not arithmetic, fills the step").
CPU_OVERHEAD = ("on the CPU an op's own time counts as kernel time: tiny-ops finds much of it is each short op's fixed "
                "cost (dispatch, allocation), not arithmetic")


@dataclass
class Verdict:
    verdict: str
    reason: str
    text: str
    degree: str
    ruled_out: list = field(default_factory=list)  # [{"category", "share", "rule", "speedup", "kind"}]
    # What the reason says that `text` does not (issue 37: the verdict said once): why a stall was
    # passed over, why a category under its material share is the verdict, no fix helps, the largest
    # saving lies elsewhere.
    notes: list = field(default_factory=list)


def _best(findings: list, category: str) -> Optional[tuple]:
    """(speedup, rule, kind) of the category's finding with the largest number; None when none has one."""
    best = None
    for f in findings:
        h = numbers.headline(f)
        if f.get("category") != category or h["speedup"] is None:
            continue
        if best is None or h["speedup"] > best[0]:
            best = (h["speedup"], str(f.get("rule") or "?"), h["kind"])
    return best


def _said(kind: str) -> str:
    return "measured" if kind == "measured" else "forecast"


def reconsider(verdict: str, reason: str, share: dict, findings: list, config: Config, gpu: bool,
               device: str = "GPU") -> Verdict:
    """The verdict (and its `reason`, from analysis/verdict.decide) after the findings' numbers have had
    their say (see the module docstring)."""
    excluded: list = []
    why: list = []
    current = verdict
    where = "the device would wait elsewhere" if gpu else "the step would take as long"
    while current.removesuffix("-bound") in WAITS:
        category = current.removesuffix("-bound")
        best = _best(findings, category)
        if best is None or best[0] > numbers.NO_GAIN:
            break
        speedup, rule, kind = best
        excluded.append({"category": category, "share": round(float(share.get(category, 0.0)), 4), "rule": rule,
                         "speedup": speedup, "kind": kind})
        why.append(f"{category} takes {share.get(category, 0.0):.0%} of the step, but removing it is "
                   f"{_said(kind)} at {speedup:.2f}× ({rule}): {where}")
        current, reason = decide(share, config, gpu, exclude=tuple(e["category"] for e in excluded))
    extras = [e for e in (_no_fix_helps(current, findings), _elsewhere(current, findings)) if e] \
        if current != UNREAD else []  # no category is the verdict: nothing is "elsewhere"
    fired = {f.get("rule") for f in findings}
    extras += [said for rule, said in QUALIFY.items() if rule in fired]
    if not gpu and current == "kernel-bound" and "tiny-ops" in fired:
        extras.append(CPU_OVERHEAD)
    notes = why + ([] if _said_by_text(current, share, config) else [reason]) + extras
    reason = "; ".join(why + [reason] + extras)
    return Verdict(verdict=current, reason=reason, text=verdict_text(current, share, gpu, device),
                   degree=degree(current, share), ruled_out=excluded, notes=notes)


def _said_by_text(verdict: str, share: dict, config: Config) -> bool:
    """Does the verdict's text (analysis/verdict.verdict_text) already say what decide's reason
    says: a kernel-bound verdict, or a stall at or above its material share. Not a stall that is the
    verdict only because kernels fill under half the step, nor device-unread (its reason is what the
    trace lacks)."""
    category = verdict.removesuffix("-bound")
    if verdict == "kernel-bound":
        return True
    material = config.material_share.get(category)
    return material is not None and float(share.get(category, 0.0)) >= material


def _no_fix_helps(verdict: str, findings: list) -> str:
    """'no fix found for host is forecast to help (cuda-graphs 0.97×)' when the verdict's category has
    numbered findings and none comes above NO_GAIN; '' otherwise."""
    category = verdict.removesuffix("-bound")
    said = [(f, numbers.headline(f)) for f in findings if f.get("category") == category]
    said = [(f, h) for f, h in said if h["speedup"] is not None]
    if not said or any(h["speedup"] > numbers.NO_GAIN for _, h in said):
        return ""
    kinds = {h["kind"] for _, h in said}
    listed = ", ".join(f"{f.get('rule') or '?'} {h['speedup']:.2f}×" for f, h in said[:4])
    return f"no fix found for {category} is {'measured' if kinds == {'measured'} else 'forecast'} to help ({listed})"


def _elsewhere(verdict: str, findings: list) -> str:
    """'the largest forecast saving is in host: cuda-graphs est. 1.30×, 2.10 ms per step' when the finding
    with the largest saving (one that buys at least TOP_AT_LEAST, 1.05x: the headline's bar) is of
    another category; '' otherwise."""
    category = verdict.removesuffix("-bound")
    top = None
    for f in findings:
        h = numbers.ranked(f)
        if h["speedup"] is None or h["speedup"] < numbers.TOP_AT_LEAST or h["saving_us"] is None:
            continue
        if top is None or numbers.saving_rank(h) > numbers.saving_rank(top[1]):
            top = (f, h)
    if top is None or top[0].get("category") == category:
        return ""
    f, h = top[0], numbers.headline(top[0])  # said with its own number
    number = f"measured {h['speedup']:.2f}×" if h["kind"] == "measured" else f"est. {h['speedup']:.2f}×"
    return (f"the largest {_said(h['kind'])} saving is in {f.get('category') or '?'}, not {category}: "
            f"{f.get('rule') or '?'} {number}, {fmt_us(h['saving_us'])} per step")
