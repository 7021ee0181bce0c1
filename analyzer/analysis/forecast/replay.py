"""Replay a dependency graph of timed nodes on their resources: the engine under every forecast.

A node runs on one resource (the host thread, a device stream, a DataLoader worker); the nodes of a
resource run in their order. Each node ends at

    end[i] = max(end[previous node on the resource] + a[i],  ready[i] + b[i])
    ready[i] = max(ready0[i], max over edges (src -> i) of end[src] + lag)

`a` is the node's own work once the resource is free (for a device node its duration; for a host
item the host time since the previous item plus the call's own cost); `b` is what remains after its
dependencies are met (a device node's duration again; the few microseconds a host call needs to
return after the device work it waited for). The first node of a resource starts no earlier than the
resource's `free_at`.

Within one resource the recurrence is a max-plus prefix: with A = cumsum(a),
end[i] = A[i] + max(free_at, max_{j<=i}(ready[j] + b[j] - A[j])), one `np.maximum.accumulate` per
resource. Across resources the edges are solved by fixed-point iteration from below (every node as
early as its own resource allows, then edges applied, repeat): the ends only grow, and on an acyclic
graph they reach the unique schedule after as many rounds as the critical path switches resources.
Nothing loops over nodes in Python; the loops run over resources and rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

MAX_ROUNDS = 600
TOLERANCE_NS = 0.5


@dataclass
class Graph:
    """Nodes grouped by resource: `offsets[r]:offsets[r+1]` are resource r's nodes, in order.

    Times are float64 ns relative to the replay window's start. Edges: `src[e] -> dst[e]` with `lag[e]`.
    """

    a: np.ndarray
    b: np.ndarray
    offsets: np.ndarray  # int64, len = resources + 1
    free_at: np.ndarray  # float64 per resource
    src: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    dst: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    lag: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))
    ready0: Optional[np.ndarray] = None  # a fixed earliest ready time per node (-inf: none)
    key: Optional[np.ndarray] = None  # recorded end per node, non-decreasing per resource: solve in time order

    @property
    def size(self) -> int:
        return int(self.a.size)

    def copy(self) -> "Graph":
        return replace(self, a=self.a.copy(), b=self.b.copy(), free_at=self.free_at.copy(), src=self.src.copy(),
                       dst=self.dst.copy(), lag=self.lag.copy(),
                       ready0=None if self.ready0 is None else self.ready0.copy(),
                       key=None if self.key is None else self.key.copy())

    def with_edges(self, src, dst, lag) -> "Graph":
        """A copy with edges added."""
        return replace(self, src=np.concatenate([self.src, np.asarray(src, np.int64)]),
                       dst=np.concatenate([self.dst, np.asarray(dst, np.int64)]),
                       lag=np.concatenate([self.lag, np.asarray(lag, np.float64)]))

    def without_edges(self, drop: np.ndarray) -> "Graph":
        """A copy without the edges where `drop` (a boolean mask over edges) is set."""
        keep = ~np.asarray(drop, bool)
        return replace(self, src=self.src[keep], dst=self.dst[keep], lag=self.lag[keep])


@dataclass
class Schedule:
    end: np.ndarray  # float64 ns per node
    rounds: int
    converged: bool


def _chain(g: Graph, r: int, ready: np.ndarray) -> np.ndarray:
    """Resource r's recurrence for fixed ready times of its nodes (vectorised)."""
    lo, hi = int(g.offsets[r]), int(g.offsets[r + 1])
    acc = np.cumsum(g.a[lo:hi])
    with np.errstate(invalid="ignore"):
        best = np.maximum.accumulate(ready + g.b[lo:hi] - acc)
    return acc + np.maximum(best, g.free_at[r])


class _Solver:
    """Gauss-Seidel over resources on a range of each resource's nodes: a round recomputes the host's
    range, then every stream's, then the extra resources', each from the latest ends of the others.

    A range is recomputed only when its inputs changed: the ends of the resources its edges come from
    (itself included), compared exactly. A range whose inputs did not change would give the very same
    ends, so skipping it changes nothing -- neither the schedule nor the rounds counted."""

    def __init__(self, g: Graph):
        self.g = g
        self.floor = np.full(g.size, -np.inf) if g.ready0 is None else g.ready0
        order = np.argsort(g.dst, kind="stable")
        self.src, self.lag, self.dst = g.src[order], g.lag[order], g.dst[order]
        # the first edge of each run of edges into one node (edges sorted by destination)
        self.first = np.ones(self.dst.size, bool)
        self.first[1:] = self.dst[1:] != self.dst[:-1]
        resource = np.repeat(np.arange(len(g.offsets) - 1), np.diff(g.offsets))
        self.src_resource = resource[self.src]
        self.end = np.full(g.size, -np.inf)
        self.acc = np.empty(g.size)
        self.carry = np.asarray(g.free_at, np.float64).copy()  # max over the solved prefix, per resource
        self.last_best: dict = {}
        self.stamp = 0  # counts range computations
        self.changed_at: dict = {}  # resource -> stamp of the last computation that changed its ends
        for r in range(len(g.offsets) - 1):
            lo, hi = int(g.offsets[r]), int(g.offsets[r + 1])
            self.acc[lo:hi] = np.cumsum(g.a[lo:hi])

    def _prepare(self, r: int, lo: int, hi: int) -> list:
        """What a range's recomputation reads, found once per block: [r, lo, hi, edges, deps, stamp, base].
        `base` is ready + b - acc of the nodes without edges; `edges` the nodes with some, their floor,
        b and acc, and the edges (sorted by destination) with the first edge of each node."""
        e0, e1 = (int(x) for x in np.searchsorted(self.dst, (lo, hi)))
        b, acc = self.g.b[lo:hi], self.acc[lo:hi]
        base = self.floor[lo:hi] + b - acc  # ready + b - acc where no edge comes in
        edges = None
        if e1 > e0:
            starts = np.flatnonzero(self.first[e0:e1])
            at = self.dst[e0:e1][starts] - lo
            edges = (at, self.floor[lo:hi][at], b[at], acc[at], starts, self.src[e0:e1], self.lag[e0:e1])
        deps = frozenset(np.unique(self.src_resource[e0:e1]).tolist())
        return [r, lo, hi, edges, deps, None, base]

    def _range(self, job: list) -> bool:
        """Recompute nodes lo:hi of resource r (a prefix of it is solved); True when anything moved."""
        r, lo, hi, edges, deps, computed, base = job
        if computed is not None and all(self.changed_at.get(d, -1) < computed for d in deps):
            return False  # nothing it reads changed since it was computed: it would come out the same
        self.stamp += 1
        job[5] = self.stamp
        if edges is not None:  # the same sums as (max(floor, edges) + b) - acc over the whole range
            at, floor, b, acc_at, starts, src, lag = edges
            rel = base.copy()
            rel[at] = (np.maximum(floor, np.maximum.reduceat(self.end[src] + lag, starts)) + b) - acc_at
        else:
            rel = base
        best = np.maximum.accumulate(rel)
        np.maximum(best, self.carry[r], out=best)
        new = self.acc[lo:hi] + best
        diff = new - self.end[lo:hi]  # new ends are finite (the carry is): never -inf - -inf
        moved = bool((np.abs(diff) > TOLERANCE_NS).any())
        if moved or bool(diff.any()):  # changed at all, however little: what reads these ends must rerun
            self.changed_at[r] = self.stamp
        self.end[lo:hi] = new
        self.last_best[r] = float(best[-1])
        return moved

    def block(self, ranges: list, max_rounds: int) -> int:
        """Rounds over the given (resource, lo, hi) ranges until nothing moves; then their prefix
        maxima carry on to the next block. Returns the rounds used (max_rounds + 1: no convergence)."""
        jobs = [self._prepare(r, lo, hi) for r, lo, hi in ranges if hi > lo]
        for rounds in range(1, max_rounds + 1):
            moved = False
            for job in jobs:
                moved |= self._range(job)
            if not moved:
                break
        else:
            return max_rounds + 1
        for job in jobs:
            self.carry[job[0]] = self.last_best[job[0]]
        return rounds


BLOCK = 512  # nodes of the host per block of the time-ordered pass


def solve(g: Graph, max_rounds: int = MAX_ROUNDS) -> Schedule:
    """The schedule of `g`: each node at max(its predecessors' ends, its resource free).

    With `g.key` (each node's recorded end, non-decreasing along every resource) the nodes are solved
    block by block in time order -- dependencies point forward in time, so a block needs only the
    blocks before it, and the rounds a block needs are those of its own host/device alternations --
    then checked by rounds over everything. Without it, rounds over everything from the start."""
    with np.errstate(invalid="ignore"):
        return _solve(g, max_rounds)


def _solve(g: Graph, max_rounds: int) -> Schedule:
    s = _Solver(g)
    n_res = len(g.offsets) - 1
    rounds = 0
    key = g.key
    if key is not None and g.size > 2 * BLOCK:
        host = np.asarray(key[int(g.offsets[0]):int(g.offsets[1])])
        cuts = host[BLOCK::BLOCK]
        bounds = [np.searchsorted(key[int(g.offsets[r]):int(g.offsets[r + 1])], cuts, side="right")
                  + int(g.offsets[r]) for r in range(n_res)]
        for c in range(cuts.size + 1):
            ranges = []
            for r in range(n_res):
                lo = int(g.offsets[r]) if c == 0 else int(bounds[r][c - 1])
                hi = int(g.offsets[r + 1]) if c == cuts.size else int(bounds[r][c])
                ranges.append((r, lo, hi))
            rounds += s.block(ranges, max_rounds)
        s.carry = np.asarray(g.free_at, np.float64).copy()
    whole = [(r, int(g.offsets[r]), int(g.offsets[r + 1])) for r in range(n_res)]
    used = s.block(whole, max_rounds)
    return Schedule(s.end, rounds + used, used <= max_rounds)
