"""Which traces of a folder are the ranks of one job (docs/ranks.md, "One job at a time").

Takes one `RankSummary` per trace, never an event table. Traces are grouped by what they say about
themselves, never relabelled:

- **What the trace says.** Device type and model, world size and backend (distributedInfo) must be
  equal; process groups that two traces both list must hold the same ranks. A trace of world size 1
  is a single process: it belongs to no job.
- **When.** The ranks of one job run together, so their time windows overlap, up to the clock offset
  between hosts: traces whose windows lie more than `Config.max_clock_offset_s` apart are different
  jobs.
- **Distinct ranks.** Two traces with the same rank are not one job. When the windows of the traces
  that repeat ranks do not overlap at all, they are jobs recorded one after the other; otherwise the
  duplicates are named and the traces are analysed each alone (no cross-rank report over them).
- **Without ranks.** Traces that carry no rank (or no world size) are one job only when their
  collectives match (analysis/ranks/collectives.py).

Every split or refusal is said in a warning that names the traces and why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ...config import Config
from . import collectives as cr


@dataclass
class Grouping:
    jobs: list = field(default_factory=list)  # lists of positions into the summaries, 2+ traces each
    warnings: list = field(default_factory=list)


def _signature(s) -> tuple:
    return (s.device_type, s.device_name, s.world_size, s.backend)


_FIELDS = ("device type", "device", "world size", "backend")


def _claims_a_job(s) -> bool:
    """A trace that says it is one rank of several (a world size of 2 or more, or a rank without one)."""
    return (s.world_size or 0) >= 2 or (s.rank is not None and s.world_size is None)


def group_jobs(summaries: list, config: Config) -> Grouping:
    out = Grouping()
    names = _names([s.path for s in summaries])
    candidates = [i for i, s in enumerate(summaries) if s.world_size != 1]
    by_signature: dict = {}
    for i in candidates:
        by_signature.setdefault(_signature(summaries[i]), []).append(i)
    clusters = []
    slack = config.max_clock_offset_s * 1e9
    for members in by_signature.values():
        clusters += _by_time(summaries, members, slack)
    jobs = []
    for members in clusters:
        jobs += _distinct(summaries, members, names, out.warnings)
    claiming = [j for j in jobs if any(_claims_a_job(summaries[i]) for i in j)]
    if len(claiming) > 1:
        out.warnings.append(_split_warning(summaries, claiming, names))
    for j in jobs:
        if len(j) >= 2 and _one_job(summaries, j, names, out.warnings):
            out.jobs.append(j)
    return out


def _by_time(summaries: list, members: list, slack: float) -> list:
    """Members in runs of time windows that overlap, windows widened by `slack` on each side."""
    order = sorted(members, key=lambda i: summaries[i].window_ns)
    runs, end = [], None
    for i in order:
        start, stop = summaries[i].window_ns
        if end is None or start > end + slack:
            runs.append([])
            end = stop
        runs[-1].append(i)
        end = max(end, stop)
    return runs


def _distinct(summaries: list, members: list, names: dict, warnings: list) -> list:
    ranks = [summaries[i].rank for i in members if summaries[i].rank is not None]
    if len(set(ranks)) == len(ranks):
        return [members]
    runs = _by_time(summaries, members, 0.0)  # jobs recorded one after the other
    if len(runs) > 1 and all(len({summaries[i].rank for i in r if summaries[i].rank is not None})
                             == sum(summaries[i].rank is not None for i in r) for r in runs):
        return runs
    seen: dict = {}
    for i in members:
        if summaries[i].rank is not None:
            seen.setdefault(summaries[i].rank, []).append(i)
    dups = "; ".join(" and ".join(names[i] for i in idx) + f" both say rank {rank}"
                     for rank, idx in sorted(seen.items()) if len(idx) > 1)
    warnings.append(f"duplicate ranks: {dups}, recorded at the same time: ranks are not relabelled, so these "
                    f"{len(members)} traces are analysed each alone, with no cross-rank report")
    return []


def _one_job(summaries: list, members: list, names: dict, warnings: list) -> bool:
    group = [summaries[i] for i in members]
    clash = _group_clash(group)
    if clash:
        warnings.append(f"not one job: {clash}; no cross-rank report over "
                        + ", ".join(names[i] for i in members))
        return False
    ranks = [s.rank for s in group]
    if None not in ranks and None not in {s.world_size for s in group}:
        return True
    return len(cr.match(group).keys) > 0  # no rank to go by: one job when collectives match


def _group_clash(group: list) -> str:
    """Process groups that two traces both list with different ranks."""
    known: dict = {}
    for s in group:
        for name, ranks in s.process_groups.items():
            if name in known and known[name] != list(ranks):
                return f"process group {name} holds ranks {known[name]} in one trace and {list(ranks)} in another"
            known.setdefault(name, list(ranks))
    return ""


def _split_warning(summaries: list, jobs: list, names: dict) -> str:
    heads = [summaries[j[0]] for j in jobs]
    differ = []
    for k, label in enumerate(_FIELDS):
        values = [_signature(h)[k] for h in heads]
        if len(set(values)) > 1:
            differ.append(f"{label} ({', '.join('?' if v is None else str(v) for v in dict.fromkeys(values))})")
    starts = sorted(min(summaries[i].window_ns[0] for i in j) for j in jobs)
    if len(starts) > 1 and starts[-1] - starts[0] > 0:
        differ.append(f"time (their recordings start as much as {_span(starts[-1] - starts[0])} apart)")
    parts = [f"job {n + 1}: " + ", ".join(_who(summaries[i]) + f" ({names[i]})" for i in j)
             for n, j in enumerate(jobs)]
    return (f"{len(jobs)} jobs in one folder, not one: they differ in {', '.join(differ) or 'their ranks'}; "
            + "; ".join(parts) + ". Each job of two or more traces gets its own cross-rank report")


def _who(s) -> str:
    rank = "rank ?" if s.rank is None else f"rank {s.rank}"
    return rank + (f" of {s.world_size}" if s.world_size else "")


def _span(ns: float) -> str:
    s = ns / 1e9
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if s >= size:
            return f"{s / size:.1f} {unit}"
    return f"{s:.1f} s"


def _names(paths: list) -> dict:
    """Each trace's path relative to the folder the traces share (a short, unambiguous name)."""
    try:
        root = os.path.commonpath([os.path.dirname(p) for p in paths]) if paths else ""
        return {i: os.path.relpath(p, root) if root else p for i, p in enumerate(paths)}
    except ValueError:
        return dict(enumerate(paths))
