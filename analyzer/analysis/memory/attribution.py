"""Which op allocated what: each allocator event placed inside the innermost `cpu_op` on the same
thread that encloses it in time (the trace records no op on the event; the TensorBoard plugin's
memory view did the same), and allocations paired with their frees by `Addr` (the next event at
the same address).

Vectorised: ops sorted by (thread, start), each event's latest-starting op found by one
searchsorted, and a bounded walk back over earlier-starting ops when that one ended before the event
(its parent encloses it)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...trace.memory import MemoryEvents
from ...trace.model import CPU_OP, Trace
from ...trace.selection import derived, of_kind

OUTSIDE = "(outside any op)"
_MAX_BACK = 64  # earlier-starting ops looked at before an event is called outside any op
_SHIFT = np.int64(1) << np.int64(44)  # thread code * this + ns: 4.8 hours of trace per thread


def _thread_key(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    return pid.astype(np.int64) * 1_000_003 + tid.astype(np.int64)


def _op_index(trace: Trace) -> tuple:
    """The cpu ops sorted by (thread, start) as one composite key, once per analysis: (sorted thread
    keys, each op's thread code, composite keys sorted, order, ends, name codes, names)."""

    def make() -> tuple:
        ops = of_kind(trace.events, CPU_OP)
        codes, keys = pd.factorize(
            _thread_key(ops["pid"].to_numpy(), ops["tid"].to_numpy()), sort=True
        )
        codes = codes.astype(np.int64)
        comp = codes * _SHIFT + ops["ts"].to_numpy(np.int64)
        order = np.argsort(comp, kind="stable")
        return (
            np.asarray(keys, dtype=np.int64),
            codes,
            comp[order],
            order,
            ops["end"].to_numpy(np.int64),
            ops["name"].cat.codes.to_numpy(),
            np.asarray(ops["name"].cat.categories, dtype=object),
        )

    return derived(trace.events, ("memory op index",), make)


def enclosing_ops(trace: Trace, ev: MemoryEvents) -> np.ndarray:
    """For each event: the name of the innermost cpu_op on its thread that encloses it (OUTSIDE
    when none)."""
    out = np.full(len(ev), OUTSIDE, dtype=object)
    if not len(ev) or not (of_kind(trace.events, CPU_OP)["kind"] == CPU_OP).any():
        return out
    keys, o_code, comp, order, o_end, names, cats = _op_index(trace)
    pk = _thread_key(ev.pid, ev.tid)
    pos = np.clip(np.searchsorted(keys, pk), 0, len(keys) - 1)
    p_code = np.where(keys[pos] == pk, pos, -1)
    last = np.searchsorted(comp, p_code * _SHIFT + ev.ts, side="right") - 1
    found = np.full(len(ev), -1, dtype=np.int64)
    todo = p_code >= 0
    for back in range(_MAX_BACK):
        cand = last - back
        ok = todo & (cand >= 0)
        if not ok.any():
            break
        c = order[np.clip(cand, 0, None)]
        same = o_code[c] == p_code
        hit = ok & same & (o_end[c] >= ev.ts)
        found[hit] = c[hit]
        todo &= ~hit & ~(ok & ~same)  # a hit, or past this thread's ops: done
    hit = found >= 0
    out[hit] = cats[names[found[hit]]]
    return out


def frees_of(ev: MemoryEvents) -> np.ndarray:
    """For each allocation (Bytes > 0): the row of the free that ends it (the next event at its
    address, when that is a free), -1 when it is not freed in the window; -1 for frees. Needs
    `Addr`."""
    n = len(ev)
    out = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return out
    order = np.argsort(ev.addr, kind="stable")  # by address, in time order within one
    a, b = order[:-1], order[1:]
    paired = (ev.addr[a] == ev.addr[b]) & (ev.bytes[a] > 0) & (ev.bytes[b] < 0)
    out[a[paired]] = b[paired]
    return out


def by_op(names: np.ndarray, nbytes: np.ndarray, top: int, steps: np.ndarray = None) -> list:
    """[{op, bytes, allocations[, steps]}] summed by op name, most bytes first (`top` rows)."""
    if not names.size:
        return []
    df = pd.DataFrame({"op": names, "bytes": nbytes.astype(np.int64), "allocations": 1})
    agg = {"bytes": ("bytes", "sum"), "allocations": ("allocations", "sum")}
    if steps is not None:
        df["steps"] = steps
        agg["steps"] = ("steps", "nunique")
    g = df.groupby("op", sort=False).agg(**agg)
    g = (
        g[g["bytes"] > 0]
        .sort_values(["bytes", "allocations"], ascending=False, kind="stable")
        .head(top)
    )
    return [{"op": str(op), **{k: int(v) for k, v in row.items()}} for op, row in g.iterrows()]
