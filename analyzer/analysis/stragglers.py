"""The job across its ranks: the ranks x categories table, stragglers and why they are late, what
matching them to the median rank would buy, exposed communication and the job verdict.

Works on the per-rank summaries and the matched collectives (analysis/crossrank.py). Every number
is per step (of each rank's analysed steps) in µs; see docs/ranks.md for the definitions.

- **Straggler**: a rank that makes each other rank wait at least `Config.straggler_share` of the
  job's step time per step (the waits charged to it by order of arrival: analysis/crossrank.py), and
  that spends at least that share more than the median rank outside communication.
- **Its cause**: the category, communication aside, in which it spends the most time per step more
  than the median rank: the median over the other ranks of each category (with two ranks, the other
  rank; the median over all ranks would put half the straggler's own excess into the reference).
- **Forecast** (not a measurement): the job's step time if the straggler spent the median rank's time
  in each category. Assumptions: its excess lies before the collectives it arrives at last; the other
  ranks' work and the transfers are unchanged; only the wait charged to this rank goes (they still
  wait for the next-to-last arrival). Then every rank's step shrinks by the wait charged to it, at
  most by its total excess.
- **Exposed communication**: on the critical rank (the one that waits least in collectives: the
  others wait for it), the communication time no compute overlaps, from its own attribution.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..config import CATEGORIES, Config
from . import crossrank as cr
from .tables import us as _us

STRAGGLER_BOUND, COMMUNICATION_BOUND = "straggler-bound", "communication-bound"
ASSUMPTIONS = (
    "the straggler's extra time lies before the collectives it reaches last",
    "the other ranks' work and the transfer times stay as measured",
    "only the wait charged to this rank goes (other stragglers stay as they are)",
    "the saving is at most the straggler's total excess over the median rank (communication aside)",
)


@dataclass
class CrossRank:
    """The cross-rank report, JSON-ready (report-set@1 keys `ranks`, `collectives`, `stragglers`, `job`)."""

    ranks: list
    collectives: dict
    stragglers: list
    job: dict
    warnings: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"ranks": self.ranks, "collectives": self.collectives, "stragglers": self.stragglers,
                "job": {**self.job, "warnings": list(self.warnings)}}


def analyze_ranks(summaries: list, config: Config) -> CrossRank:
    ordered, labels = cr.order_ranks(summaries)
    m = cr.match(ordered)
    s = cr.split(m)
    pr = cr.per_rank(ordered, m, s)
    step = float(np.median([x.median_step_ns for x in ordered]))
    median = {c: float(np.median([x.category_ns[c] for x in ordered])) for c in CATEGORIES}
    rows = [_row(x, labels[i], i, m, pr, median) for i, x in enumerate(ordered)]
    matched = len(s.transfer) > 0
    critical = int(np.argmin(pr["wait_ns"])) if matched else int(np.argmax([x.median_step_ns for x in ordered]))
    exposed = ordered[critical].category_ns["communication"]
    found = _stragglers(ordered, labels, m, s, pr, median, step, config)
    verdict, reason = _verdict(ordered, labels, found, labels[critical], exposed, step, config)
    warnings = list(m.warnings)
    if any(x.rank is None for x in ordered) or len(set(x.rank for x in ordered)) < len(ordered):
        warnings.append("some traces carry no rank, or the same rank as another: they are numbered after the "
                        "others in file order")
    collectives = _collectives(m, s, pr, labels)
    job = {"ranks": len(ordered), "step_time_us": _us(step),
           "median_rank_time_us": {c: _us(v) for c, v in median.items()},
           "critical_rank": labels[critical], "exposed_communication_us_per_step": _us(exposed),
           "verdict": verdict, "verdict_reason": reason,
           "rank_verdicts": dict(Counter(x.verdict for x in ordered).most_common())}
    return CrossRank(rows, collectives, found, job, warnings)


def _row(x, label: int, pos: int, m: cr.Matched, pr: dict, median: dict) -> dict:
    return {"rank": label, "path": x.path, "steps": len(x.steps), "step_time_us": _us(x.median_step_ns),
            "time_us": {c: _us(x.category_ns[c]) for c in CATEGORIES},
            "excess_us": {c: _us(x.category_ns[c] - median[c]) for c in CATEGORIES},
            "verdict": x.verdict, "collective_us_per_step": _us(pr["collective_ns"][pos]),
            "wait_us_per_step": _us(pr["wait_ns"][pos]), "caused_wait_us_per_step": _us(pr["caused_ns"][pos]),
            "last_arrivals": int(pr["last_arrivals"][pos]), "clock_offset_us": _us(m.offsets_ns[pos]),
            "collective_source": x.collective_source}


def _stragglers(ordered, labels, m, s, pr, median, step, config: Config) -> list:
    out = []
    n = len(ordered)
    for pos in np.argsort(-pr["caused_ns"], kind="stable"):
        pos = int(pos)
        wait = float(pr["caused_ns"][pos])
        if n < 2 or step <= 0 or wait < config.straggler_share * step:
            break
        x = ordered[pos]
        others = [o for i, o in enumerate(ordered) if i != pos]
        typical = {c: float(np.median([o.category_ns[c] for o in others])) for c in CATEGORIES}
        excess = {c: x.category_ns[c] - typical[c] for c in CATEGORIES if c != "communication"}
        cause = max(excess, key=lambda c: (excess[c], -CATEGORIES.index(c)))
        total = sum(v for v in excess.values() if v > 0)
        if total < config.straggler_share * step:
            continue  # late by chance (the order of arrival varies), not by its own work
        saving = min(wait, total)
        kinds = cr.caused_by_kind(m, s, pos, pr["job_steps"])
        out.append({
            "rank": labels[pos], "cause": cause if excess[cause] > 0 else "unknown",
            "excess_us_per_step": _us(max(0.0, excess[cause])), "total_excess_us_per_step": _us(total),
            "median_rank_time_us": {c: _us(v) for c, v in typical.items()},
            "others_wait_us_per_step": _us(wait), "other_ranks": n - 1,
            "wait_in": next(iter(kinds), None), "last_arrivals": int(pr["last_arrivals"][pos]),
            "forecast": {"kind": "forecast", "step_time_us": _us(step - saving), "saving_us": _us(saving),
                         "speedup": round(step / (step - saving), 3) if step > saving else None,
                         "from_step_time_us": _us(step), "assumptions": list(ASSUMPTIONS)},
        })
    return out


def _verdict(ordered, labels, found: list, critical: int, exposed: float, step: float, config: Config):
    waited = sum(f["others_wait_us_per_step"] for f in found) * 1000.0
    if found:
        names = ", ".join(str(f["rank"]) for f in found)
        return STRAGGLER_BOUND, (f"the other ranks wait {waited / step:.0%} of the step for rank(s) {names} in "
                                 f"collectives (straggler-bound from {config.straggler_share:.0%})")
    comm = config.material_share["communication"]
    if step > 0 and exposed >= comm * step:
        return COMMUNICATION_BOUND, (f"on rank {critical}, the one the others wait for, communication that no "
                                     f"compute overlaps takes {exposed / step:.0%} of the step (material from "
                                     f"{comm:.0%})")
    counts = Counter(x.verdict for x in ordered).most_common()
    top = [v for v, c in counts if c == counts[0][1]]
    crit = next(x.verdict for x, label in zip(ordered, labels) if label == critical)
    verdict = crit if crit in top else top[0]
    share = exposed / step if step > 0 else 0.0
    return verdict, (f"no straggler and {share:.0%} of the step in exposed communication on rank {critical}: "
                     f"the ranks' own verdict ({dict(counts)[verdict]} of {len(ordered)} ranks)")


def _collectives(m: cr.Matched, s: cr.Split, pr: dict, labels: list) -> dict:
    steps = pr["job_steps"]
    kinds = cr.by_kind(m, s, steps)
    for k in kinds:
        for key in ("transfer_ns_per_step", "wait_ns_per_step", "max_start_skew_ns"):
            k[key.replace("_ns", "_us")] = _us(k.pop(key))
        k["per_step"] = round(k["per_step"], 3)
    matched = len(s.transfer)
    return {
        "matched_by": m.matched_by, "instances": matched, "unmatched": m.unmatched,
        "transfer_us_per_step": _us(s.transfer.sum() / steps) if matched else 0.0,
        "wait_us_per_step": _us(np.nansum(s.wait) / steps / max(1, len(labels))) if matched else 0.0,
        "by_kind": kinds,
        "clock": {"reference_rank": labels[m.reference] if labels else None,
                  "offsets_us": {str(label): _us(m.offsets_ns[i]) for i, label in enumerate(labels)},
                  "max_correction_us": _us(np.max(np.abs(m.offsets_ns))) if len(labels) else 0.0,
                  "residual_us": _us(m.residual_ns)},
    }
