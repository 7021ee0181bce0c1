"""Which op allocated what: each allocator event placed inside the innermost `cpu_op` on the same thread
that encloses it in time (the trace records no op on the event; the TensorBoard plugin's memory view did
the same), and allocations paired with their frees by `Addr` (the next event at the same address).

Vectorised: ops sorted by (thread, start), each event's latest-starting op found by one searchsorted, and
a bounded walk back over earlier-starting ops when that one ended before the event (its parent encloses it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...trace.memory import MemoryEvents
from ...trace.model import CPU_OP, Trace
from ...trace.selection import of_kind

OUTSIDE = "(outside any op)"
_MAX_BACK = 64  # earlier-starting ops looked at before an event is called outside any op
_SHIFT = np.int64(1) << np.int64(44)  # thread code * this + ns: 4.8 hours of trace per thread


def _thread_codes(pid_a, tid_a, pid_b, tid_b) -> tuple:
    key_a = pid_a.astype(np.int64) * 1_000_003 + tid_a.astype(np.int64)
    key_b = pid_b.astype(np.int64) * 1_000_003 + tid_b.astype(np.int64)
    codes, _ = pd.factorize(np.concatenate([key_a, key_b]), sort=True)
    return codes[: key_a.size].astype(np.int64), codes[key_a.size:].astype(np.int64)


def enclosing_ops(trace: Trace, ev: MemoryEvents) -> np.ndarray:
    """For each event: the name of the innermost cpu_op on its thread that encloses it (OUTSIDE when none)."""
    ops = of_kind(trace.events, CPU_OP)
    out = np.full(len(ev), OUTSIDE, dtype=object)
    if ops.empty or not len(ev):
        return out
    o_code, p_code = _thread_codes(ops["pid"].to_numpy(), ops["tid"].to_numpy(), ev.pid, ev.tid)
    o_ts, o_end = ops["ts"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
    comp = o_code * _SHIFT + o_ts
    order = np.argsort(comp, kind="stable")
    last = np.searchsorted(comp[order], p_code * _SHIFT + ev.ts, side="right") - 1
    found = np.full(len(ev), -1, dtype=np.int64)
    todo = np.ones(len(ev), dtype=bool)
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
    names = ops["name"].cat.codes.to_numpy()
    cats = np.asarray(ops["name"].cat.categories, dtype=object)
    hit = found >= 0
    out[hit] = cats[names[found[hit]]]
    return out


def frees_of(ev: MemoryEvents) -> np.ndarray:
    """For each allocation (Bytes > 0): the row of the free that ends it (the next event at its address,
    when that is a free), -1 when it is not freed in the window; -1 for frees. Needs `Addr`."""
    n = len(ev)
    out = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return out
    order = np.lexsort((np.arange(n), ev.addr))
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
    g = g[g["bytes"] > 0].sort_values(["bytes", "allocations"], ascending=False, kind="stable").head(top)
    return [{"op": str(op), **{k: int(v) for k, v in row.items()}} for op, row in g.iterrows()]
