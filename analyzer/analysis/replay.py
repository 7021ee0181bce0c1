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

    @property
    def size(self) -> int:
        return int(self.a.size)

    def copy(self) -> "Graph":
        return replace(self, a=self.a.copy(), b=self.b.copy(), free_at=self.free_at.copy(), src=self.src.copy(),
                       dst=self.dst.copy(), lag=self.lag.copy(),
                       ready0=None if self.ready0 is None else self.ready0.copy())

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


def _chains(g: Graph, ready: np.ndarray) -> np.ndarray:
    """Every resource's recurrence for fixed ready times (vectorised within each resource)."""
    end = np.empty_like(g.a)
    with np.errstate(invalid="ignore"):
        for r in range(len(g.offsets) - 1):
            lo, hi = int(g.offsets[r]), int(g.offsets[r + 1])
            if lo == hi:
                continue
            acc = np.cumsum(g.a[lo:hi])
            best = np.maximum.accumulate(np.maximum(ready[lo:hi] + g.b[lo:hi] - acc, -np.inf))
            end[lo:hi] = acc + np.maximum(best, g.free_at[r])
    return end


def solve(g: Graph, max_rounds: int = MAX_ROUNDS) -> Schedule:
    """The schedule of `g`: each node at max(its predecessors' ends, its resource free)."""
    floor = np.full(g.size, -np.inf) if g.ready0 is None else g.ready0
    end = _chains(g, floor)
    if g.src.size == 0:
        return Schedule(end, 1, True)
    for rounds in range(1, max_rounds + 1):
        ready = floor.copy()
        np.maximum.at(ready, g.dst, end[g.src] + g.lag)
        new = _chains(g, ready)
        if np.all(np.abs(new - end) <= TOLERANCE_NS):
            return Schedule(new, rounds, True)
        end = new
    return Schedule(end, max_rounds, False)
