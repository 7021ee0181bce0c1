"""Helpers shared by the fact providers: the analysis context and vectorised joins."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import pandas as pd

from ..analysis import intervals as iv
from ..analysis.intervals import intersect  # noqa: F401  (facts' providers import it from here)
from ..analysis.attribution import Breakdown
from ..analysis.steps import Steps
from ..trace.model import DEVICE_KINDS, RUNTIME, Trace
from ..trace.selection import of_kind, rows


@dataclass
class Context:
    """What every fact provider needs: the trace, the steady step windows, events inside them, helpers.
    `n_steps` and `total_ns` count the steady steps only (warm-up and partial steps are left out)."""

    trace: Trace
    steps: Steps
    breakdown: Breakdown
    windows: iv.Intervals
    n_steps: int
    total_ns: int  # summed step duration
    peak: Optional[dict] = None  # the user's peak (facts/efficiency.py); None: looked up
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # see `cached`

    def cached(self, key, make: Callable[[], object]):
        """`make()` once per context (several providers need the same selection or join)."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def kind(self, *kinds: int) -> pd.DataFrame:
        """Events of these kinds that start inside a step window (do not modify the frame)."""
        def make() -> pd.DataFrame:
            ev = of_kind(self.trace.events, *kinds)
            return rows(ev, iv.covers(self.windows, ev["ts"].to_numpy(np.int64)))

        return self.cached(("kind",) + kinds, make)

    def per_step_us(self, ns) -> float:
        return round(float(ns) / 1000.0 / self.n_steps, 3) if self.n_steps else 0.0

    def per_step(self, count) -> float:
        return round(float(count) / self.n_steps, 3) if self.n_steps else 0.0

    def share(self, ns) -> float:
        return round(float(ns) / self.total_ns, 4) if self.total_ns else 0.0

    def in_steps_ns(self, intervals: iv.Intervals) -> int:
        """Length of the part of `intervals` that lies inside step windows."""
        return overlap_ns(intervals, self.windows)


def make_context(trace: Trace, steps: Steps, breakdown: Breakdown) -> Context:
    """Over the steady steps: every fact (and every forecast built on them) follows the steady state."""
    st, _ = breakdown.steady()
    windows = iv.merge(st["start"].to_numpy(np.int64), st["end"].to_numpy(np.int64))
    return Context(trace=trace, steps=steps, breakdown=breakdown, windows=windows,
                   n_steps=len(st), total_ns=int(st["duration"].sum()))


def overlap_ns(a: iv.Intervals, b: iv.Intervals) -> int:
    """|a ∩ b| in ns."""
    return iv.total(intersect(a, b))


def span(df: pd.DataFrame) -> iv.Intervals:
    return iv.merge(df["ts"].to_numpy(np.int64), df["end"].to_numpy(np.int64))


def launched_inside(ev: pd.DataFrame, windows: iv.Intervals) -> pd.DataFrame:
    """Device events (kernels, copies, memsets) whose runtime call starts inside `windows`."""
    rt = of_kind(ev, RUNTIME)
    corr = rt["corr"].to_numpy(np.int64)
    launched = corr[(corr >= 0) & iv.covers(windows, rt["ts"].to_numpy(np.int64))]
    dev = of_kind(ev, *DEVICE_KINDS)
    dev_corr = dev["corr"]
    return dev[(dev_corr >= 0).to_numpy() & dev_corr.isin(pd.unique(launched)).to_numpy()]


def thread_key(df: pd.DataFrame) -> np.ndarray:
    """One small integer per (pid, tid) pair, consistent across frames built from the same trace."""
    return (df["pid"].to_numpy(np.int64) * 1_000_003 + df["tid"].to_numpy(np.int64))


def _thread_sorted(points: pd.DataFrame, spans: pd.DataFrame):
    """Spans sorted by (thread, ts) as one composite key, and each point's position in that order."""
    skey, pkey = thread_key(spans), thread_key(points)
    codes, _ = pd.factorize(np.concatenate([skey, pkey]), sort=True)  # np.unique's codes, without its hashing
    s_code, p_code = codes[: len(skey)].astype(np.int64), codes[len(skey):].astype(np.int64)
    shift = np.int64(1) << np.int64(44)
    s_comp = s_code * shift + spans["ts"].to_numpy(np.int64)
    order = np.argsort(s_comp, kind="stable")
    last = np.searchsorted(s_comp[order], p_code * shift + points["ts"].to_numpy(np.int64), side="right") - 1
    return order, last, s_code, p_code


def last_started(points: pd.DataFrame, spans: pd.DataFrame) -> np.ndarray:
    """For each point (ts, pid, tid): positional index into `spans` of the latest span on the same
    thread that starts at or before the point (-1 when none)."""
    if spans.empty or points.empty:
        return np.full(len(points), -1, dtype=np.int64)
    order, last, s_code, p_code = _thread_sorted(points, spans)
    c = order[np.clip(last, 0, None)]
    return np.where((last >= 0) & (s_code[c] == p_code), c, -1)


def innermost_enclosing(points: pd.DataFrame, spans: pd.DataFrame, max_back: int = 32) -> np.ndarray:
    """For each point (ts, pid, tid): positional index into `spans` of the latest-starting span on the
    same thread that contains the point (-1 when none within `max_back` candidates).

    Vectorised over points; the loop runs over at most `max_back` candidate offsets.
    """
    out = np.full(len(points), -1, dtype=np.int64)
    if spans.empty or points.empty:
        return out
    order, last, s_code, p_code = _thread_sorted(points, spans)
    s_end, p_ts = spans["end"].to_numpy(np.int64), points["ts"].to_numpy(np.int64)
    todo = np.ones(len(points), dtype=bool)
    for back in range(max_back):
        cand = last - back
        ok = todo & (cand >= 0)
        if not ok.any():
            break
        c = order[np.clip(cand, 0, None)]
        same = s_code[c] == p_code
        hit = ok & same & (s_end[c] >= p_ts)
        out[hit] = c[hit]
        todo &= ~hit & ~(ok & ~same)  # stop at a hit or when we ran past this thread's spans
    return out


def subtract(a: iv.Intervals, b: iv.Intervals) -> iv.Intervals:
    """a minus b as sorted disjoint intervals."""
    a, b = iv.union(a), iv.union(b)
    if a[0].size == 0 or b[0].size == 0:
        return a
    lo, hi = min(int(a[0][0]), int(b[0][0])), max(int(a[1][-1]), int(b[1][-1]))
    outside_b = iv.merge(np.concatenate([[lo], b[1]]), np.concatenate([b[0], [hi]]))
    return intersect(a, outside_b)


def covered_ns(intervals: iv.Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each [start, end): how many ns of `intervals` (sorted, disjoint) it covers, by a prefix sum of
    the intervals' lengths (one searchsorted per bound, no per-event loop)."""
    s, e = intervals
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    if s.size == 0 or starts.size == 0:
        return np.zeros(starts.shape, dtype=np.int64)
    length = e - s
    before = np.concatenate([[0], np.cumsum(length)])  # total length of the intervals before each one

    def upto(t: np.ndarray) -> np.ndarray:
        j = np.searchsorted(s, t, side="right") - 1
        jj = np.clip(j, 0, None)
        return np.where(j >= 0, before[jj] + np.clip(t - s[jj], 0, length[jj]), 0)

    return np.maximum(upto(ends) - upto(starts), 0)
