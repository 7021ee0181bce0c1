"""Point-to-point operations (send, recv, NCCL's SendRecv kernels) paired across ranks.

A send and its recv are one instance with two ranks; pairing them by order, as collectives are,
pairs unrelated operations (each rank talks to other peers in between). So (docs/ranks.md):

- **By peer.** Where the trace names the peer ("Dst Rank" / "Src Rank" of record_param_comms), a
  send from a to b pairs with a recv on b from a: the n-th of each, in process group and sequence
  number where every one has a sequence number, else in order. A pair whose two operations do not
  overlap in time on the aligned clocks (an eager send that completed before the recv was posted)
  is no transfer both ranks took part in: it stays unmatched.
- **By time.** Otherwise the two ends of one transfer finish together, so an operation pairs with
  one on another rank whose end, on the aligned clocks, lies within `tolerance` of the shorter
  duration, when that candidate is the only one for both operations. Two or more candidates are
  ambiguous, none means the peer is not in the folder (or did not record it): both stay unmatched.

Unmatched operations are counted and their time reported, never charged to a rank as a wait.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

BY_PEER_SEQ, BY_PEER, BY_TIME = "peer + sequence number", "peer + order", "end time on the aligned clocks"


@dataclass
class Pairs:
    """Paired operations (positions a, b; rows into the input table) and what stayed unmatched."""

    a: np.ndarray
    b: np.ndarray
    row_a: np.ndarray
    row_b: np.ndarray
    matched_by: list = field(default_factory=list)  # the methods that paired any
    unmatched: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # rows left unpaired
    peer_absent: int = 0  # operations whose named peer has no trace in the folder
    ambiguous: int = 0  # operations with two or more candidates in time


def pair(rows: pd.DataFrame, ranks: list, offsets: np.ndarray, tolerance: float) -> Pairs:
    """`rows`: pos, name (send | recv | sendrecv), pg, seq, peer (global rank, -1 unknown), start, end
    (each rank's own clock); `ranks`: the global rank of each position (None unknown); `offsets`: per
    position, added to its clock to align it."""
    n = len(rows)
    used = np.zeros(n, dtype=bool)
    found: list = []
    methods: list = []
    pos = rows["pos"].to_numpy()
    peer = rows["peer"].to_numpy(np.int64)
    where = {r: p for p, r in enumerate(ranks) if r is not None}
    named = peer >= 0
    absent = named & ~np.isin(peer, list(where))
    if (named & ~absent).any():
        got, how = _by_peer(rows, named & ~absent, ranks, offsets)
        found += got
        methods.append(how)
        for i, j in got:
            used[i] = used[j] = True
    rest = ~used & ~named
    got, ambiguous = _by_time(rows, rest, offsets, tolerance)
    if got:
        methods.append(BY_TIME)
    found += got
    for i, j in got:
        used[i] = used[j] = True
    i = np.array([p[0] for p in found], dtype=np.int64)
    j = np.array([p[1] for p in found], dtype=np.int64)
    return Pairs(pos[i], pos[j], i, j, methods, np.flatnonzero(~used), int(absent.sum()), ambiguous)


def _direction(kind: str, me: int, other: int) -> tuple:
    if kind == "send":
        return me, other
    if kind == "recv":
        return other, me
    return min(me, other), max(me, other)  # sendrecv: both ways at once


def _by_peer(rows: pd.DataFrame, mask: np.ndarray, ranks: list, offsets: np.ndarray) -> tuple[list, str]:
    sub = rows[mask]
    me = np.array([ranks[p] for p in sub["pos"].to_numpy()], dtype=np.int64)
    keys = [(_direction(k, m, o), k == "sendrecv", g)
            for k, m, o, g in zip(sub["name"].tolist(), me.tolist(), sub["peer"].tolist(), sub["pg"].tolist())]
    by_seq = bool((sub["seq"].to_numpy() >= 0).all())
    frame = pd.DataFrame({"row": np.flatnonzero(mask), "pos": sub["pos"].to_numpy(), "key": keys,
                          "seq": sub["seq"].to_numpy(), "start": sub["start"].to_numpy()})
    frame = frame.sort_values(["pos", "start"], kind="stable")
    frame["n"] = frame["seq"] if by_seq else frame.groupby(["pos", "key"], sort=False).cumcount()
    pos = rows["pos"].to_numpy()
    start = rows["start"].to_numpy(np.float64) + offsets[pos]
    end = rows["end"].to_numpy(np.float64) + offsets[pos]
    out = []
    for _, g in frame.groupby(["key", "n"], sort=False):
        if len(g) == 2 and g["pos"].nunique() == 2:
            i, j = int(g["row"].iloc[0]), int(g["row"].iloc[1])
            if max(start[i], start[j]) < min(end[i], end[j]):  # both ranks inside the transfer at once
                out.append((i, j))
    return out, BY_PEER_SEQ if by_seq else BY_PEER


def _compatible(k1: str, k2: str) -> bool:
    return {k1, k2} == {"send", "recv"} or k1 == k2 == "sendrecv"


def _by_time(rows: pd.DataFrame, mask: np.ndarray, offsets: np.ndarray, tolerance: float) -> tuple[list, int]:
    """Candidates: operations on two ranks whose aligned ends lie within `tolerance` of the shorter
    duration; a pair is kept when each is the other's only candidate."""
    idx = np.flatnonzero(mask)
    if not len(idx):
        return [], 0
    pos = rows["pos"].to_numpy()[idx]
    end = rows["end"].to_numpy(np.float64)[idx] + offsets[pos]
    dur = rows["end"].to_numpy(np.float64)[idx] - rows["start"].to_numpy(np.float64)[idx]
    kind = rows["name"].to_numpy()[idx]
    cands: list = []
    for a in np.unique(pos):
        ia = np.flatnonzero(pos == a)
        ib = np.flatnonzero(pos > a)
        if not len(ib):
            continue
        ib = ib[np.argsort(end[ib], kind="stable")]
        lo = np.searchsorted(end[ib], end[ia] - tolerance * dur[ia], side="left")
        hi = np.searchsorted(end[ib], end[ia] + tolerance * dur[ia], side="right")
        for x, l, h in zip(ia.tolist(), lo.tolist(), hi.tolist()):
            for y in ib[l:h].tolist():
                if abs(end[x] - end[y]) <= tolerance * min(dur[x], dur[y]) and _compatible(kind[x], kind[y]):
                    cands.append((x, y))
    count = np.zeros(len(idx), dtype=np.int64)
    for x, y in cands:
        count[x] += 1
        count[y] += 1
    kept = [(int(idx[x]), int(idx[y])) for x, y in cands if count[x] == 1 and count[y] == 1]
    return kept, int((count > 1).sum())
