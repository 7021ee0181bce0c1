"""Across ranks: collectives matched, clocks aligned, each collective split into transfer and wait.

Takes one `RankSummary` per rank (analysis/ranks/summary.py), never an event table. See docs/ranks.md.

- **Matching.** One collective instance is the same key on every rank that ran it: the process group
  and sequence number where every collective carries one; otherwise the process group (where known),
  the collective's kind, the step it starts in (steps shared by the ranks, by name) and its order
  among those in that step. An instance seen on one rank only is not matched. Point-to-point
  operations (send, recv, SendRecv kernels) are paired by peer, else by end time (analysis/ranks/p2p.py):
  each pair is an instance of two ranks.
- **Clocks.** The ranks of one instance finish together (within the transfer), so the median of
  (reference end - rank end) over the instances both ran is the rank's clock offset from the
  reference (the lowest rank). The offsets are applied to every start and end; what is left of the end
  skew after alignment is reported as the residual.
- **Transfer and wait.** An instance's transfer is its shortest duration across ranks; every rank's
  wait is its duration minus the transfer. The waits are charged to the ranks that caused them by
  order of arrival (`split`). They come from durations alone: the clock alignment does not change
  them (it places the starts and ends, for the skews). In an instance whose process group holds a
  rank with no trace in the folder (`complete`), a present rank may have waited for the absent one:
  its charges go to "ranks not in the folder", not to a present rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .. import intervals as iv
from . import p2p
from .summary import P2P_KINDS, RankSummary

BY_SEQUENCE, BY_GROUP, BY_NAME = "process group + sequence number", "process group + order", "name + order"


@dataclass
class Matched:
    """Instances x ranks (positions in the summary list); NaN where a rank did not run the instance.
    Times in ns from the earliest collective start of any rank, ranks' clocks aligned."""

    keys: pd.DataFrame  # per instance: pg, name, step (its step's name), p2p (a send/recv pair)
    start: np.ndarray
    end: np.ndarray
    matched_by: str
    unmatched: int  # collective rows (one rank's instance) that no other rank matched
    offsets_ns: np.ndarray  # per rank: added to its clock to align it with the reference
    residual_ns: float  # median end skew of an instance after alignment
    aligned_pairs: np.ndarray  # per rank: instances its offset was measured on
    reference: int = 0  # the rank position whose clock the others are aligned to
    warnings: list = field(default_factory=list)
    # operations, pairs, matched_by (list), unmatched, peer_absent, ambiguous, unmatched_ns (per rank)
    point_to_point: dict = field(default_factory=dict)

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start


@dataclass
class Split:
    """Per instance: transfer (min duration) and the rank that arrived last; per instance and rank:
    the wait, and the wait each rank caused (see `split`)."""

    transfer: np.ndarray
    wait: np.ndarray
    last: np.ndarray
    caused: np.ndarray
    start_skew: np.ndarray
    wall_wait: np.ndarray  # per rank: the union of its waits (concurrent collectives wait at once)
    wall_collective: np.ndarray  # per rank: the union of its collectives
    absent: np.ndarray = field(default_factory=lambda: np.empty(0))  # per instance: charged to absent ranks


def _table(summaries: list) -> pd.DataFrame:
    frames = []
    for pos, s in enumerate(summaries):
        c = s.collectives
        if len(c):
            names = np.array(s.steps, dtype=object)
            c = c if "peer" in c else c.assign(peer=-1)
            frames.append(c.assign(pos=pos, step_name=names[c["step"].to_numpy()]))
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True)
    return df.sort_values(["pos", "start", "end"], kind="stable").reset_index(drop=True)


def _empty_match(n: int, matched_by: str, unmatched: int, warning: str, point: dict | None = None) -> Matched:
    empty = np.empty((0, n))
    return Matched(pd.DataFrame({"pg": [], "name": [], "step": [], "p2p": []}), empty, empty, matched_by, unmatched,
                   np.zeros(n), 0.0, np.zeros(n, np.int64), 0, [warning], point or {})


def match(summaries: list, tolerance: float = 0.1) -> Matched:
    """Collectives by key (see the module docstring), then point-to-point operations by peer or end
    time (analysis/ranks/p2p.py, `tolerance`: Config.p2p_end_tolerance) on the clocks the collectives align."""
    n = len(summaries)
    df = _table(summaries)
    if df.empty:
        return _empty_match(n, BY_NAME, 0, "no collectives in the analysed steps of any rank")
    base = int(df["start"].min())
    is_p2p = df["name"].isin(P2P_KINDS).to_numpy()
    coll, ops = df[~is_p2p], df[is_p2p].reset_index(drop=True)
    ops = ops.assign(start=ops["start"] - base, end=ops["end"] - base)  # ns from `base`, as the collectives
    keys, start, end, matched_by, unmatched = _collectives(coll, summaries, base)
    offsets = _clock_offsets(end)[0]
    pairs = p2p.pair(ops, [x.rank for x in summaries], offsets, tolerance)
    p_start, p_end = np.full((len(pairs.a), n), np.nan), np.full((len(pairs.a), n), np.nan)
    rows = np.arange(len(pairs.a))
    for pos, row in ((pairs.a, pairs.row_a), (pairs.b, pairs.row_b)):
        p_start[rows, pos] = ops["start"].to_numpy(np.float64)[row]
        p_end[rows, pos] = ops["end"].to_numpy(np.float64)[row]
    first = ops.iloc[pairs.row_a]
    p_keys = pd.DataFrame({"pg": first["pg"].astype(str).to_numpy(), "name": first["name"].to_numpy(),
                           "step": first["step_name"].to_numpy(), "p2p": True})
    keys = pd.concat([keys.assign(p2p=False), p_keys], ignore_index=True)
    start, end = np.vstack([start, p_start]), np.vstack([end, p_end])
    left = ops.iloc[pairs.unmatched]
    point = {"operations": len(ops), "pairs": len(pairs.a), "matched_by": pairs.matched_by,
             "unmatched": len(left), "peer_absent": pairs.peer_absent, "ambiguous": pairs.ambiguous,
             "unmatched_ns": np.bincount(left["pos"].to_numpy(np.int64), minlength=n,
                                         weights=(left["end"] - left["start"]).to_numpy(np.float64))}
    if not len(keys):
        return _empty_match(n, matched_by, unmatched, "no collective falls in a step that the ranks share" if len(coll)
                            else "no point-to-point operation could be paired with one on another rank", point)
    offsets, aligned, ref, warnings = _clock_offsets(end)
    start, end = start + offsets, end + offsets
    skew = np.nanmax(end, axis=1) - np.nanmin(end, axis=1)
    return Matched(keys, start, end, matched_by, unmatched, offsets, float(np.median(skew)), aligned, ref, warnings,
                   point)


def _collectives(df: pd.DataFrame, summaries: list, base: int) -> tuple:
    """(keys: pg, name, step; start; end (ns from `base`, own clocks); matched_by; unmatched rows)."""
    n = len(summaries)
    rows = len(df)
    none = (pd.DataFrame({"pg": [], "name": [], "step": []}), np.empty((0, n)), np.empty((0, n)))
    if df.empty:
        return (*none, BY_NAME, 0)
    if (df["seq"] >= 0).all():
        key, matched_by = ["pg", "seq"], BY_SEQUENCE
    else:
        matched_by = BY_GROUP if (df["pg"] != "").any() else BY_NAME
        with_colls = [set(s.steps) for s in summaries if len(s.collectives)]
        common = set.intersection(*with_colls)
        df = df[df["step_name"].isin(common)] if common else df.assign(step_name="")
        df = df.assign(ordinal=df.groupby(["pos", "pg", "name", "step_name"], sort=False).cumcount())
        key = ["pg", "name", "step_name", "ordinal"]
    df = df.drop_duplicates(key + ["pos"])
    if df.empty:  # collectives only in steps the ranks do not share
        return (*none, matched_by, rows)
    df = df.assign(start=(df["start"] - base).astype(np.float64), end=(df["end"] - base).astype(np.float64))
    wide = df.set_index(key + ["pos"])[["start", "end"]].unstack("pos")
    start = wide["start"].reindex(columns=range(n)).to_numpy(np.float64)
    end = wide["end"].reindex(columns=range(n)).to_numpy(np.float64)
    first = df.drop_duplicates(key).set_index(key)

    def column(name: str) -> np.ndarray:
        if name in key:
            return wide.index.get_level_values(name).to_numpy()
        return first[name].reindex(wide.index).to_numpy()

    names, steps = column("name"), column("step_name")
    keys = pd.DataFrame({"pg": wide.index.get_level_values("pg").astype(str), "name": names, "step": steps})
    seen = np.isfinite(start).sum(axis=1)
    keep = seen >= 2
    return keys[keep].reset_index(drop=True), start[keep], end[keep], matched_by, rows - int(seen[keep].sum())


def _clock_offsets(end: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, list]:
    """Per rank: median(reference end - rank end) over the instances both ran; the reference is the
    first rank that ran any matched instance. A rank sharing no instance with it keeps its clock."""
    n = end.shape[1]
    offsets, pairs, warnings = np.zeros(n), np.zeros(n, np.int64), []
    present = np.isfinite(end)
    if not present.any():
        return offsets, pairs, 0, warnings
    ref = int(np.flatnonzero(present.any(axis=0))[0])
    for pos in range(n):
        both = present[:, ref] & present[:, pos]
        pairs[pos] = int(both.sum())
        if pos != ref and both.any():
            offsets[pos] = float(np.median(end[both, ref] - end[both, pos]))
        elif pos != ref and present[:, pos].any():
            warnings.append(f"the trace at position {pos} shares no collective with the reference rank: its "
                            "clock was not aligned")
    return offsets, pairs, ref, warnings


def complete(m: Matched, summaries: list) -> np.ndarray:
    """Per instance: does every rank of its process group have a trace here? A pair of point-to-point
    operations always does; a collective's group is its process group's ranks (distributedInfo), else
    the whole world (the world size); without a world size, the ranks present."""
    out = np.ones(len(m.keys), dtype=bool)
    if any(x.rank is None for x in summaries):
        return out  # which ranks are here is not known: no instance is said to lack one
    present = {x.rank for x in summaries}
    worlds = {x.world_size for x in summaries if x.world_size}
    groups: dict = {}
    for x in summaries:
        for name, ranks in x.process_groups.items():
            groups.setdefault(str(name), set(ranks))
    world = set(range(max(worlds))) if worlds else present
    for i, (pg, is_p2p) in enumerate(zip(m.keys["pg"].tolist(), m.keys["p2p"].tolist())):
        if not is_p2p:
            out[i] = groups.get(str(pg), world) <= present
    return out


def split(m: Matched, complete: np.ndarray | None = None) -> Split:
    """Transfer, waits, and who caused them, from durations alone (clock-free: the ends coincide, so
    a longer duration is an earlier arrival). Sorted by arrival, arrival j comes gap_j after arrival
    j-1 and the j ranks already there wait that gap: it is charged to arrival j, as gap_j * j / (n - 1)
    per other rank. The charges add up to the waits; the last arrival's charge is its lead over the
    next-to-last, the time every rank would gain if it arrived with the others.

    A rank waits in concurrent collectives at once (gloo's two worker threads, NCCL streams): each
    rank's waits count with the factor (union of its wait intervals / their sum), so that what a rank
    is charged is wall-clock time of the others.

    A point-to-point pair makes one other rank wait: its charge is per other rank of the job (divided
    by n - 1). Instances not `complete` charge no present rank: what they would charge is `absent`,
    and no rank arrived last in them (-1)."""
    dur = m.duration
    n = dur.shape[1]
    if not len(dur):
        z = np.empty(0)
        return Split(z, dur.copy(), np.empty(0, np.int64), np.zeros((0, n)), z, np.zeros(n), np.zeros(n), z)
    transfer = np.nanmin(dur, axis=1)
    wait = dur - transfer[:, None]
    wall_wait, wall_coll = _wall(m.start, m.start + wait), _wall(m.start, m.end)
    sums = np.nansum(wait, axis=0)
    factor = np.divide(wall_wait, sums, out=np.ones(n), where=sums > 0)
    count = np.isfinite(dur).sum(axis=1)
    key = np.where(np.isfinite(dur), dur, -np.inf)
    order = np.argsort(-key, axis=1, kind="stable")  # earliest arrival (longest duration) first
    ordered = np.take_along_axis(key, order, axis=1)
    j = np.arange(1, n)
    valid = j[None, :] < count[:, None]
    gaps = np.where(valid, ordered[:, :-1] - ordered[:, 1:], 0.0)
    waiting = np.cumsum(factor[order], axis=1)[:, :-1]  # the ranks already there, each by its factor
    pairs = m.keys["p2p"].to_numpy(bool) if "p2p" in m.keys else np.zeros(len(dur), bool)
    others = np.where(pairs, n - 1, count - 1)
    share = gaps * waiting / np.maximum(others, 1)[:, None]
    caused = np.zeros_like(dur)
    np.put_along_axis(caused, order[:, 1:], share, axis=1)
    rows = np.arange(len(dur))
    last = order[rows, count - 1]
    absent = np.zeros(len(dur))
    if complete is not None and not complete.all():
        absent[~complete] = caused[~complete].sum(axis=1)
        caused[~complete] = 0.0
        last = np.where(complete, last, -1)
    skew = np.nanmax(m.start, axis=1) - np.nanmin(m.start, axis=1)
    return Split(transfer, wait, last, caused, skew, wall_wait, wall_coll, absent)


def _wall(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per rank (column): the length of the union of [start, end) over its instances."""
    out = np.zeros(start.shape[1])
    for pos in range(start.shape[1]):
        ok = np.isfinite(start[:, pos])
        out[pos] = iv.total(iv.merge(np.rint(start[ok, pos]), np.rint(end[ok, pos])))
    return out


def per_rank(summaries: list, m: Matched, s: Split) -> dict:
    """Per rank position, per step of that rank: its time in collectives and its wait (wall clock),
    the wait it caused each other rank (`split`) per step of the job, and how often it arrived last."""
    n = len(summaries)
    steps = np.array([max(1, len(x.steps)) for x in summaries], dtype=np.float64)
    job_steps = float(np.median(steps)) if n else 1.0
    dur = m.duration
    coll, wait = s.wall_collective, s.wall_wait
    caused = s.caused.sum(axis=0) if len(dur) else np.zeros(n)
    last = np.bincount(s.last[s.last >= 0], minlength=n) if len(dur) else np.zeros(n, np.int64)
    return {"collective_ns": coll / steps, "wait_ns": wait / steps, "caused_ns": caused / job_steps,
            "last_arrivals": last, "job_steps": job_steps}


def caused_by_kind(m: Matched, s: Split, pos: int, job_steps: float) -> dict:
    """{collective kind: the wait rank `pos` caused each other rank per step in it}, largest first."""
    mine = s.caused[:, pos] > 0
    if not mine.any():
        return {}
    frame = pd.DataFrame({"name": m.keys["name"].to_numpy()[mine], "w": s.caused[mine, pos]})
    return (frame.groupby("name")["w"].sum() / job_steps).sort_values(ascending=False).to_dict()


def by_kind(m: Matched, s: Split, job_steps: float) -> list:
    """Per process group and kind: instances per step, transfer and mean wait per rank per step (ns)."""
    if not len(s.transfer):
        return []
    frame = pd.DataFrame({"pg": m.keys["pg"].to_numpy(), "name": m.keys["name"].to_numpy(),
                          "transfer": s.transfer, "wait": np.nanmean(s.wait, axis=1), "skew": s.start_skew})
    g = frame.groupby(["pg", "name"], sort=False)
    out = pd.DataFrame({"count": g.size(), "transfer": g["transfer"].sum(), "wait": g["wait"].sum(),
                        "skew": g["skew"].max()}).reset_index()
    out = out.sort_values(["wait", "transfer"], ascending=False)
    return [{"process_group": r.pg or None, "name": r.name, "instances": int(r.count),
             "per_step": r.count / job_steps, "transfer_ns_per_step": r.transfer / job_steps,
             "wait_ns_per_step": r.wait / job_steps, "max_start_skew_ns": float(r.skew)}
            for r in out.itertuples(index=False)]


def order_ranks(summaries: list) -> tuple[list, list]:
    """Summaries sorted by rank (files without a rank, or repeating one, after them in file order)
    and the rank label of each: its rank, else the lowest number no other file has."""
    seen: set = set()
    ranked, unranked = [], []
    for s in summaries:
        if s.rank is not None and s.rank not in seen:
            seen.add(s.rank)
            ranked.append(s)
        else:
            unranked.append(s)
    ranked.sort(key=lambda s: s.rank)
    labels, nxt = [s.rank for s in ranked], 0
    for _ in unranked:
        while nxt in seen:
            nxt += 1
        labels.append(nxt)
        seen.add(nxt)
    return ranked + unranked, labels


__all__ = ["Matched", "Split", "match", "complete", "split", "per_rank", "by_kind", "caused_by_kind",
           "order_ranks", "RankSummary"]
