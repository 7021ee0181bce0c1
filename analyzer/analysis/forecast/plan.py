"""Edits of a timeline -- what a fix changes -- and the replay of the edited timeline.

A `Plan` is a timeline with the quantities a fix may change held apart: the host work of each item,
the duration and launch lag of each device node, which wait edges hold, a speed factor for host CPU
work, and extra resources (DataLoader workers). Models (`forecast_models`) edit a plan with the
primitives below; `step_ns` replays it and returns the mean step time over the window. Several
fixes are forecast together by applying their edits to one plan: savings are never added up.

Every edit also records what it acted on (`acted_host`, `acted_device`: the host work, the host's
waits and the device time it touched, whatever it did to them; `acted_scale` for the step-level
model): a fix saves at most that (`Forecaster` caps the saving at it, per step of the same steps).
Host work is removed at most once: `remove_host` leaves out what an earlier edit removed (`cut`), so
two fixes that remove the same Python remove it once, and perfsleuth's own ranges, removed from the
baseline, are never a fix's saving.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .. import intervals as iv
from .replay import Schedule, solve
from .timeline import LOADER, Timeline, step_ends, to_graph


@dataclass
class Workers:
    """DataLoader worker processes that produce the batch each LOADER item takes."""

    count: int
    produce_ns: float  # time one worker needs for one batch (its CPU work at its speed, plus waits)
    handoff_ns: float  # main-process cost of taking a ready batch (queue, unpickling)
    prefetch: int = 2  # batches per worker in flight (DataLoader's prefetch_factor)


@dataclass
class Plan:
    tl: Timeline
    a: np.ndarray
    dur: np.ndarray
    d_lag: np.ndarray
    waits: np.ndarray  # bool per wait edge: still a dependency
    host_speed: float = 1.0  # host CPU work runs this much faster (contention)
    workers: Optional[Workers] = None
    removed_ns: float = 0.0  # host work removed by edits, for the record
    scale: float = 1.0  # the replayed step time is multiplied by this (models that are not replay edits)
    notes: dict = field(default_factory=dict)
    cut: iv.Intervals = iv.EMPTY  # host time (relative ns) removed so far
    acted_host: Optional[np.ndarray] = None  # per item: host work and waits the edits touched (ns)
    acted_device: Optional[np.ndarray] = None  # per device node: device time the edits touched (ns)
    acted_scale: Optional[np.ndarray] = None  # per replayed step: step time a step-level model acts on (ns)
    edited: Optional[np.ndarray] = None  # per item: its work or waits were set directly (not by `remove_host`)

    def __post_init__(self):
        if self.edited is None:
            self.edited = np.zeros(self.tl.n_items, bool)
        if self.acted_host is None:
            self.acted_host = np.zeros(self.tl.n_items)
        if self.acted_device is None:
            self.acted_device = np.zeros(self.tl.n_nodes)

    def fingerprint(self) -> bytes:
        """Equal for plans that replay the same (the timeline is shared)."""
        h = hashlib.blake2b(digest_size=16)
        for arr in (self.a, self.dur, self.d_lag, self.waits):
            h.update(np.ascontiguousarray(arr).tobytes())
        h.update(repr((self.host_speed, self.workers, self.scale)).encode())
        return h.digest()

    def copy(self) -> "Plan":
        return Plan(self.tl, self.a.copy(), self.dur.copy(), self.d_lag.copy(), self.waits.copy(), self.host_speed,
                    self.workers, self.removed_ns, self.scale, dict(self.notes), self.cut, self.acted_host.copy(),
                    self.acted_device.copy(), None if self.acted_scale is None else self.acted_scale.copy(),
                    self.edited.copy())

    def fresh(self) -> "Plan":
        """A copy that has acted on nothing yet (the baseline's own edits are not a fix's)."""
        out = self.copy()
        out.acted_host[:] = 0.0
        out.acted_device[:] = 0.0
        out.acted_scale = None
        out.edited[:] = False
        return out

    def acted_per_step(self) -> float:
        """What the edits acted on, per step of the steps the replay measures (`window_step`: all but the
        first when there are several)."""
        tl = self.tl
        n = len(tl.steps)
        first = 1 if n >= 2 else 0
        host = float(self.acted_host[tl.step >= first].sum())
        device = float(self.acted_device[tl.step[tl.d_item] >= first].sum()) if tl.n_nodes else 0.0
        scale = float(self.acted_scale[first:].sum()) if self.acted_scale is not None else 0.0
        return (host + device + scale) / max(n - first, 1)

    def added_per_step(self, base: "Plan") -> float:
        """Work the edits added over `base`, per step of the measured steps: host work (at the host's speed)
        and device time that grew. Worker processes (their batches, the queues) may add anything (inf)."""
        if self.workers is not None:
            return float("inf")
        tl = self.tl
        n = len(tl.steps)
        first = 1 if n >= 2 else 0
        host = np.maximum(self.a / self.host_speed - base.a / base.host_speed, 0.0)
        with np.errstate(invalid="ignore"):
            lag = np.where(self.d_lag == base.d_lag, 0.0, np.nan_to_num(self.d_lag - base.d_lag, nan=np.inf))
        device = np.maximum(self.dur - base.dur, 0.0) + np.maximum(lag, 0.0)
        total = float(host[tl.step >= first].sum())
        if tl.n_nodes:
            total += float(device[tl.step[tl.d_item] >= first].sum())
        return total / max(n - first, 1) if self.scale <= base.scale else float("inf")

    def touched(self) -> tuple:
        """What the edits touched, for overlaps between fixes: the host time they removed and the spans of
        the items they edited directly (intervals, relative ns), and the device nodes (a mask)."""
        tl = self.tl
        spans = iv.merge((tl.t - tl.gap)[self.edited].astype(np.int64), tl.e[self.edited].astype(np.int64))
        return iv.union(self.cut, spans), self.acted_device > 0


def act_host(p: Plan, items, ns) -> None:
    """Record that the edits act on `ns` of host time of `items` (indices or a mask)."""
    idx = np.flatnonzero(items) if np.asarray(items).dtype == bool else np.asarray(items, np.int64)
    np.add.at(p.acted_host, idx, ns)
    p.edited[idx] = True


def act_device(p: Plan, nodes, ns=None) -> None:
    """Record that the edits act on the device time of `nodes` (a mask; all of it unless `ns`)."""
    p.acted_device[nodes] += p.tl.d_dur[nodes] if ns is None else ns


def blocked_ns(tl: Timeline) -> np.ndarray:
    """Per item: how long it waited for device work (its span less its own cost)."""
    return np.maximum((tl.e - tl.t) - tl.own, 0.0)


def plan(tl: Timeline) -> Plan:
    return Plan(tl, tl.a.copy(), tl.d_dur.copy(), tl.d_lag.copy(), np.ones(tl.w_src.size, bool))


# --- host edits -----------------------------------------------------------------------------------
def _measure(ivs: iv.Intervals, x: np.ndarray) -> np.ndarray:
    """|ivs ∩ (-inf, x)| for each x (ivs sorted and disjoint)."""
    s, e = (np.asarray(v, np.float64) for v in ivs)
    x = np.asarray(x, np.float64)
    if s.size == 0:
        return np.zeros(x.shape)
    before = np.concatenate([[0.0], np.cumsum(e - s)])  # before[k]: length of the first k intervals
    i = np.searchsorted(s, x, side="right")  # intervals that start at or before x
    j = np.clip(i - 1, 0, None)
    return np.where(i > 0, before[j] + np.clip(np.minimum(x, e[j]) - s[j], 0, None), 0.0)


def host_work_in(tl: Timeline, ivs: iv.Intervals) -> np.ndarray:
    """Per item: how much of its host work (gap before it and its own cost) lies inside `ivs`
    (relative ns, sorted disjoint)."""
    prev = tl.t - tl.gap
    own0 = np.maximum(tl.t, prev)
    return (_measure(ivs, tl.t) - _measure(ivs, prev)) + (_measure(ivs, own0 + tl.own) - _measure(ivs, own0))


def remove_host(p: Plan, ivs: iv.Intervals, keep: float = 0.0) -> float:
    """Remove the host work inside `ivs` (all but `keep` of it), less what earlier edits removed; returns
    the ns removed from the plan."""
    fresh = iv.subtract(ivs, p.cut)
    inside = host_work_in(p.tl, fresh)
    cut = np.minimum(inside * (1.0 - keep), p.a)
    p.a -= cut
    p.cut = iv.union(p.cut, fresh)
    p.acted_host += inside
    p.removed_ns += float(cut.sum())
    return float(cut.sum())


def set_host(p: Plan, items: np.ndarray, work: np.ndarray) -> None:
    """Give `items` (indices) this host work."""
    act_host(p, items, p.a[items])
    p.removed_ns += float((p.a[items] - work).sum())
    p.a[items] = work


def drop_waits(p: Plan, items: np.ndarray) -> int:
    """The host items (boolean mask) no longer wait for device work; returns the edges dropped. They act
    on the time those items waited."""
    hit = items[p.tl.w_dst] & p.waits
    p.waits &= ~hit
    released = np.zeros(p.tl.n_items, bool)
    released[p.tl.w_dst[hit]] = True
    act_host(p, released, blocked_ns(p.tl)[released])
    return int(hit.sum())


# --- device edits ---------------------------------------------------------------------------------
def scale_device(p: Plan, nodes: np.ndarray, factor, floor_ns: float = 0.0) -> None:
    """Device nodes (mask) take `factor` of their time, never less than `floor_ns` (or their own time)."""
    act_device(p, nodes)
    new = np.maximum(p.dur[nodes] * factor, np.minimum(p.dur[nodes], floor_ns))
    p.dur[nodes] = new


# --- replay -----------------------------------------------------------------------------------------
def _worker_resources(p: Plan):
    """The worker chains: batch j (the j-th LOADER item) is made by worker j mod W, after the main
    process took batch j - prefetch*W; the LOADER item waits for it. Workers start in steady-state
    phase (staggered by produce/W), as a pipeline that has been running."""
    w = p.workers
    tl = p.tl
    loaders = np.flatnonzero(tl.kind == LOADER)
    n, W = loaders.size, max(1, w.count)
    base = tl.n_items + tl.n_nodes
    batch = np.arange(n)
    order = np.lexsort((batch, batch % W))  # nodes grouped by worker, in batch order
    counts = np.bincount(batch % W, minlength=W)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    node_of_batch = np.empty(n, np.int64)
    node_of_batch[order] = np.arange(n)
    a = np.full(n, w.produce_ns)
    free = np.arange(W) * w.produce_ns / W - w.produce_ns  # batch j ready at j * produce / W
    back = batch - w.prefetch * W
    has = back >= 0
    src = np.concatenate([loaders[back[has]], base + node_of_batch])
    dst = np.concatenate([base + node_of_batch[has], loaders])
    lag = np.concatenate([np.zeros(int(has.sum())), np.full(n, w.handoff_ns)])
    key = np.empty(n)
    key[node_of_batch] = np.maximum.accumulate(tl.e)[loaders]  # a batch is made before it is taken
    return a, a.copy(), offsets, free, src, dst, lag, key


def schedule(p: Plan) -> Schedule:
    tl = p.tl
    extra = _worker_resources(p) if p.workers is not None and (tl.kind == LOADER).any() else None
    return solve(to_graph(tl, a=p.a / p.host_speed, dur=p.dur, d_lag=p.d_lag, waits=p.waits, extra=extra))


def window_step(ends: np.ndarray, start: float) -> float:
    """Mean step over a window: from the end of its first step when it has several (the first one
    takes the pipeline from the recording to the replay's steady state), else from its start."""
    if len(ends) >= 2:
        return (float(ends[-1]) - float(ends[0])) / (len(ends) - 1)
    return float(ends[0]) - start


def step_ns(p: Plan) -> tuple[float, Schedule]:
    """Mean steady step time over the replayed window, and the schedule."""
    s = schedule(p)
    ends = step_ends(p.tl, s.end)
    return window_step(ends, float(p.tl.steps["start"].iloc[0])) * p.scale, s
