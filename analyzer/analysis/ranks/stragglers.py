"""The job across its ranks: the ranks x categories table, stragglers and why they are late, what
matching them to the median rank would buy, exposed communication and the job verdict.

Works on the per-rank summaries and the matched collectives (analysis/ranks/collectives.py). Every number
is per step (of each rank's analysed steps) in µs; see docs/ranks.md for the definitions.

- **Straggler**: a rank that arrives last consistently (analysis/ranks/who_arrives_last.py), makes each other rank
  wait at least `Config.straggler_share` of the job's step time per step (the waits charged to it by
  order of arrival: analysis/ranks/collectives.py), and spends at least that share more than the median rank
  outside communication. Only one rank can be last in more than half the instances: a job has at
  most one straggler by this test.
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
- **No job verdict** when the world size names ranks that have no trace here (their waits cannot be
  told from waits for present ranks), or when the clocks disagree by more than
  `Config.max_clock_offset_s`, or the ends of matched instances still disagree by more than the
  instances last after alignment (their ranks were never inside them together: not one job, or
  matched wrongly): the report says which.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ...config import CATEGORIES, Config
from . import collectives as cr
from .who_arrives_last import consistency
from ..tables import us as _us
from ..verdict import STRAGGLER_BOUND

COMMUNICATION_BOUND = "communication-bound"
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
    m = cr.match(ordered, config.p2p_end_tolerance)
    complete = cr.complete(m, ordered)
    s = cr.split(m, complete)
    pr = cr.per_rank(ordered, m, s)
    arrivals = consistency(m, s, complete, config)
    step = float(np.median([x.median_step_ns for x in ordered]))
    median = {c: float(np.median([x.category_ns[c] for x in ordered])) for c in CATEGORIES}
    rows = [_row(x, labels[i], i, m, pr, median, arrivals[i]) for i, x in enumerate(ordered)]
    matched = len(s.transfer) > 0
    critical = int(np.argmin(pr["wait_ns"])) if matched else int(np.argmax([x.median_step_ns for x in ordered]))
    exposed = ordered[critical].category_ns["communication"]
    warnings = list(m.warnings)
    if any(x.rank is None for x in ordered):
        warnings.append("some traces carry no rank: they are numbered after the others in file order")
    missing = _missing(ordered)
    withheld = [w for w in (_missing_warning(missing, len(ordered), s, pr), _clock_warning(m, s, config)) if w]
    found = [] if withheld else _stragglers(ordered, labels, m, s, pr, median, step, arrivals, config)
    present = _among_present(ordered, labels, m, config) if missing and len(withheld) == 1 else None
    if withheld:
        verdict, reason = None, "withheld: " + "; ".join(short for short, _ in withheld)
    else:
        verdict, reason = _verdict(ordered, labels, found, labels[critical], exposed, step, config)
    collectives = _collectives(m, s, pr, labels)
    world = max((x.world_size or 0 for x in ordered), default=0) or None
    job = {"ranks": len(ordered), "world_size": world, "missing_ranks": missing, "step_time_us": _us(step),
           "median_rank_time_us": {c: _us(v) for c, v in median.items()},
           "critical_rank": labels[critical], "exposed_communication_us_per_step": _us(exposed),
           "absent_wait_us_per_step": _us(s.absent.sum() / pr["job_steps"]) if matched else 0.0,
           "arrivals": _arrivals(labels, arrivals, pr, found, step, config, bool(withheld)) if matched else None,
           "among_present": present, "verdict": verdict, "verdict_reason": reason,
           "rank_verdicts": dict(Counter(x.verdict for x in ordered).most_common())}
    return CrossRank(rows, collectives, found, job, warnings + [full for _, full in withheld])


def _missing(ordered: list) -> list:
    """The ranks the world size names that have no trace here."""
    world = max((x.world_size or 0 for x in ordered), default=0)
    have = {x.rank for x in ordered if x.rank is not None}
    return [r for r in range(world) if r not in have] if world and len(have) == len(ordered) else []


def _ranges(ranks: list) -> str:
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if j == i else f"{ranks[i]}-{ranks[j]}" if j > i + 1 else f"{ranks[i]}, {ranks[j]}")
        i = j + 1
    return ", ".join(out)


def _missing_warning(missing: list, present: int, s: cr.Split, pr: dict) -> tuple:
    """(the verdict's short reason, the warning), or () when every rank has its trace here."""
    if not missing:
        return ()
    head = f"{present} of {present + len(missing)} ranks present"
    absent = float(s.absent.sum() / pr["job_steps"]) if len(s.absent) else 0.0
    amount = f" ({_span(absent)} per step)" if absent > 0 else ""
    return head, (f"{head} (rank(s) {_ranges(missing)} have no trace here): a present rank may have waited for an "
                  f"absent one, so the waits in collectives whose group has absent ranks{amount} are charged to "
                  "ranks not in the folder, not to a present rank; no rank is named a straggler and the job verdict "
                  "is withheld")


def _clock_warning(m: cr.Matched, s: cr.Split, config: Config) -> tuple:
    """(short reason, warning) when the matched instances say the traces are not one job, else ()."""
    if not len(s.transfer):
        return ()
    worst = float(np.max(np.abs(m.offsets_ns)))
    if worst > config.max_clock_offset_s * 1e9:
        return (f"the clocks are {_span(worst)} apart: not one job",
                f"matching their collectives puts the traces' clocks {_span(worst)} apart, more than "
                f"{config.max_clock_offset_s:g} s: they are not one job, and there is no job verdict")
    longest = float(np.median(np.nanmax(m.duration, axis=1)))
    if m.residual_ns > longest:  # most instances' ranks were never inside them at the same time
        return (f"the matched ends still differ by {_span(m.residual_ns)} after clock alignment: not one job, or "
                "matched wrongly",
                f"after clock alignment the ends of a matched instance still differ by {_span(m.residual_ns)} "
                f"(median), more than the instances last ({_span(longest)}, median of the longest duration): the "
                "traces are not one job, or their collectives do not match one to one; there is no job verdict")
    return ()


def _span(ns: float) -> str:
    us = ns / 1000.0
    if abs(us) >= 1e6:
        return f"{us / 1e6:.2f} s"
    return f"{us / 1000:.2f} ms" if abs(us) >= 1000 else f"{us:.0f} µs"


def _arrivals(labels: list, arrivals: list, pr: dict, found: list, step: float, config: Config,
              withheld: bool) -> dict:
    """Who arrived last how often; for a job without a straggler, why none (the renderers' sentence)."""
    consistent = [labels[i] for i, a in enumerate(arrivals) if a["consistent"]]
    lost = float(np.mean(pr["wait_ns"])) if len(pr["wait_ns"]) else 0.0
    why = None
    if not found and not withheld:
        if not consistent:
            why = "alternate"
        else:
            pos = labels.index(consistent[0])
            small = pr["caused_ns"][pos] < config.straggler_share * step
            why = "small" if small else "no excess"
    return {"last": {str(label): a["last"] for label, a in zip(labels, arrivals)},
            "of": {str(label): a["of"] for label, a in zip(labels, arrivals)},
            "consistent_rank": consistent[0] if consistent else None, "no_straggler": why,
            "lost_us_per_step": _us(lost), "straggler_share": config.straggler_share}


def _row(x, label: int, pos: int, m: cr.Matched, pr: dict, median: dict, arrival: dict) -> dict:
    return {"rank": label, "path": x.path, "steps": len(x.steps), "step_time_us": _us(x.median_step_ns),
            "time_us": {c: _us(x.category_ns[c]) for c in CATEGORIES},
            "excess_us": {c: _us(x.category_ns[c] - median[c]) for c in CATEGORIES},
            "verdict": x.verdict, "collective_us_per_step": _us(pr["collective_ns"][pos]),
            "wait_us_per_step": _us(pr["wait_ns"][pos]), "caused_wait_us_per_step": _us(pr["caused_ns"][pos]),
            "last_arrivals": int(pr["last_arrivals"][pos]), "clock_offset_us": _us(m.offsets_ns[pos]),
            "lateness_us": {"per": arrival["unit"], "mean": _us(arrival["mean_ns"]), "sd": _us(arrival["sd_ns"]),
                            "units": arrival["units"]},
            "unmatched_p2p_us_per_step": _us(m.point_to_point["unmatched_ns"][pos] / max(1, len(x.steps)))
            if m.point_to_point else 0.0,
            "collective_source": x.collective_source}


def _excess(ordered: list, pos: int) -> tuple:
    """(the median of the other ranks per category, the rank's excess over it outside communication,
    the category of the largest excess, the sum of the positive excesses)."""
    x = ordered[pos]
    others = [o for i, o in enumerate(ordered) if i != pos]
    typical = {c: float(np.median([o.category_ns[c] for o in others])) for c in CATEGORIES}
    excess = {c: x.category_ns[c] - typical[c] for c in CATEGORIES if c != "communication"}
    cause = max(excess, key=lambda c: (excess[c], -CATEGORIES.index(c)))
    return typical, excess, cause, sum(v for v in excess.values() if v > 0)


def _among_present(ordered: list, labels: list, m: cr.Matched, config: Config) -> dict | None:
    """With ranks missing, the present rank that arrives last consistently among the present ones (the
    job verdict stays withheld: an absent rank may arrive later still)."""
    if not len(m.keys):
        return None
    every = np.ones(len(m.keys), dtype=bool)
    arrivals = consistency(m, cr.split(m), every, config)
    late = [i for i, a in enumerate(arrivals) if a["consistent"]]
    if not late:
        return None
    pos = late[0]
    _, excess, cause, _ = _excess(ordered, pos)
    return {"rank": labels[pos], "last": arrivals[pos]["last"], "of": arrivals[pos]["of"],
            "cause": cause if excess[cause] > 0 else "unknown", "excess_us_per_step": _us(max(0.0, excess[cause]))}


def _stragglers(ordered, labels, m, s, pr, median, step, arrivals: list, config: Config) -> list:
    out = []
    n = len(ordered)
    for pos in np.argsort(-pr["caused_ns"], kind="stable"):
        pos = int(pos)
        wait = float(pr["caused_ns"][pos])
        if n < 2 or step <= 0 or wait < config.straggler_share * step or (n == 2 and out):
            break
        if not arrivals[pos]["consistent"]:
            continue  # last by the chance order of arrival: jitter (analysis/ranks/who_arrives_last.py)
        typical, excess, cause, total = _excess(ordered, pos)
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
            "last_of": arrivals[pos]["of"], "lateness_us": {"mean": _us(arrivals[pos]["mean_ns"]),
                                                            "sd": _us(arrivals[pos]["sd_ns"])},
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
        "collective_instances": int((~m.keys["p2p"].to_numpy(bool)).sum()) if matched else 0,
        "transfer_us_per_step": _us(s.transfer.sum() / steps) if matched else 0.0,
        "wait_us_per_step": _us(np.nansum(s.wait) / steps / max(1, len(labels))) if matched else 0.0,
        "by_kind": kinds,
        "point_to_point": _point_to_point(m, steps),
        "clock": {"reference_rank": labels[m.reference] if labels else None,
                  "offsets_us": {str(label): _us(m.offsets_ns[i]) for i, label in enumerate(labels)},
                  "max_correction_us": _us(np.max(np.abs(m.offsets_ns))) if len(labels) else 0.0,
                  "residual_us": _us(m.residual_ns)},
    }


def _point_to_point(m: cr.Matched, steps: float) -> dict:
    p = m.point_to_point
    if not p or not p.get("operations"):
        return {"operations": 0, "pairs": 0, "matched_by": [], "unmatched": 0, "peer_absent": 0, "ambiguous": 0,
                "unmatched_us_per_step": 0.0}
    return {"operations": p["operations"], "pairs": p["pairs"], "matched_by": list(p["matched_by"]),
            "unmatched": p["unmatched"], "peer_absent": p["peer_absent"], "ambiguous": p["ambiguous"],
            "unmatched_us_per_step": _us(float(np.sum(p["unmatched_ns"])) / steps)}
