"""Vectorised interval arithmetic on int64 nanosecond arrays (no per-event Python loops)."""

from __future__ import annotations

import numpy as np

Intervals = tuple  # (starts, ends): sorted, disjoint, non-empty int64 arrays

EMPTY: Intervals = (np.empty(0, np.int64), np.empty(0, np.int64))


def merge(starts, ends) -> Intervals:
    """Union of [start, end) intervals as sorted disjoint intervals (touching ones are joined).

    The HTA idiom: a new group starts where ts exceeds the running maximum of the previous ends.
    Input that is already sorted (event times, other merges) skips the sort and its reordering.
    """
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    if s.size == 0:
        return EMPTY
    if s.size > 1 and (s[1:] < s[:-1]).any():
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    np.greater(s[1:], run_end[:-1], out=new[1:])
    if new.all():  # already disjoint: each interval its own group
        return s.copy(), e.copy()
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first)


def union(*parts: Intervals) -> Intervals:
    if not parts:
        return EMPTY
    return merge(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def covers(iv: Intervals, points: np.ndarray) -> np.ndarray:
    """For each point x: is x inside some [start, end)?"""
    s, e = iv
    if s.size == 0:
        return np.zeros(points.shape, dtype=bool)
    i = np.searchsorted(s, points, side="right") - 1
    return (i >= 0) & (e[np.clip(i, 0, None)] > points)


def distinct(points: np.ndarray) -> np.ndarray:
    """np.unique(points) by sorting: the boundaries of sorted intervals come in sorted runs, which a
    stable sort merges in about linear time (np.unique hashes them first, several times slower)."""
    s = np.sort(np.asarray(points, dtype=np.int64), kind="stable")
    if s.size == 0:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def total(iv: Intervals) -> int:
    return int((iv[1] - iv[0]).sum())


def gaps_until_next(after: np.ndarray, busy: Intervals, windows: Intervals,
                    search_from: np.ndarray | None = None) -> Intervals:
    """For each time t in `after`: [t, next start of `busy` at or after t), kept only when t and that next
    start lie in the same window (a gap never crosses a window boundary, and no gap is open-ended).
    With `search_from` (one per t, each >= t) the next start is looked for at or after that time instead."""
    s = busy[0]
    if s.size == 0 or after.size == 0:
        return EMPTY
    k = np.searchsorted(s, after if search_from is None else search_from, side="left")
    has = k < s.size
    t, nxt = after[has], s[k[has]]
    ws, we = windows
    i = np.searchsorted(ws, t, side="right") - 1
    j = np.searchsorted(ws, nxt, side="right") - 1
    same = (i >= 0) & (i == j) & (nxt <= we[np.clip(i, 0, None)])
    return merge(t[same], nxt[same])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """a ∩ b as sorted disjoint intervals. Both merged first (sorted, disjoint, never touching), each
    interval of `a` meets a run of consecutive intervals of `b` (two searchsorted), and the pieces of
    those pairs come out sorted, disjoint and never touching: no sort, no sweep."""
    a, b = union(a), union(b)
    if a[0].size == 0 or b[0].size == 0:
        return EMPTY
    (a_s, a_e), (b_s, b_e) = a, b
    j0 = np.searchsorted(b_e, a_s, side="right")  # the first of b that ends after a's start
    j1 = np.searchsorted(b_s, a_e, side="left")  # the first of b that starts at or after a's end
    n = np.maximum(j1 - j0, 0)
    if not n.any():
        return EMPTY
    i = np.repeat(np.arange(a_s.size), n)
    j = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n) + np.repeat(j0, n)
    return np.maximum(a_s[i], b_s[j]), np.minimum(a_e[i], b_e[j])


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """a minus b: the parts of `a` that no interval of `b` covers."""
    a, b = union(a), union(b)
    if a[0].size == 0 or b[0].size == 0:
        return a
    lo, hi = min(a[0][0], b[0][0]) - 1, max(a[1][-1], b[1][-1]) + 1
    holes = merge(np.r_[lo, b[1]], np.r_[b[0], hi])  # the complement of b around both
    return intersect(a, holes)


def covered_before(iv: Intervals, points: np.ndarray) -> np.ndarray:
    """For each point x: the length of the part of `iv` that lies before x (so the coverage of [a, b)
    is covered_before(iv, b) - covered_before(iv, a))."""
    s, e = iv
    x = np.asarray(points, dtype=np.int64)
    if s.size == 0:
        return np.zeros(x.shape, dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(e - s)])
    i = np.searchsorted(s, x, side="right") - 1
    c = np.clip(i, 0, None)
    inside = np.clip(x - s[c], 0, e[c] - s[c])
    return np.where(i >= 0, cum[c] + inside, 0)
