"""What a host-device synchronisation costs: only the time the host waited on a busy device.

A synchronize call, a scalar read (`aten::item`) or a blocking device-to-host copy blocks the host
until the device has finished the work queued before it. That is a stall only when there *was* such
work: the device was running or had queued work when the call started ("pending", below). Then:

- the call is `sync` from its start until the pending work ends (or the call returns, if earlier):
  the host waited on a busy device (the device's busy parts of that stretch stay kernel/transfer/…);
- when the pending work ended inside the call, the wait drained the device: from that moment to the
  next device work after the call returns, the device idles because of the sync ("drain", also `sync`).

A call that starts while the device has nothing pending waited for nothing: it costs its own call
time, which is host time, and no drain follows it. docs/attribution.md has the worked examples.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.lookup import by_id
from ..trace.model import DEVICE_KINDS, RUNTIME
from ..trace.selection import of_kind
from . import intervals as iv


def device_pending(ev: pd.DataFrame) -> iv.Intervals:
    """Where the device has work running or queued: each kernel/copy/memset from the start of the
    runtime call that launched it (matched by correlation; its own start when there is none) to its end."""
    dev = of_kind(ev, *DEVICE_KINDS)
    if dev.empty:
        return iv.EMPTY
    call = by_id(ev, (RUNTIME,), "corr").find(dev["corr"].to_numpy(np.int64))  # the first launch of each
    start = dev["ts"].to_numpy(np.int64).copy()
    found = call >= 0
    start[found] = np.minimum(start[found], of_kind(ev, RUNTIME)["ts"].to_numpy(np.int64)[call[found]])
    return iv.merge(start, dev["end"].to_numpy(np.int64))


SYNC_AFTER_COPY_NS = 50_000  # a synchronize this soon after a copy call on the same thread waits for that copy


def blocking_calls(starts, ends, judge=None) -> tuple:
    """Blocking host calls as sorted disjoint (start, end, judge) arrays: nested or overlapping calls (the
    synchronize inside an `aten::item`) become one, judged at the earliest judge point among them.
    `judge` (default: the starts) is the moment the operation began: a synchronize that follows its own copy
    call is judged where that copy call started (the copy it waits for is the operation's own work)."""
    s, e = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    j = s if judge is None else np.asarray(judge, np.int64)
    keep = e > s
    s, e, j = s[keep], e[keep], j[keep]
    if s.size == 0:
        return iv.EMPTY + (np.empty(0, np.int64),)
    order = np.argsort(s, kind="stable")
    s, e, j = s[order], e[order], j[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first), np.minimum.reduceat(j, first)


def charge(calls: tuple, pending: iv.Intervals, busy: iv.Intervals,
           windows: iv.Intervals) -> tuple[iv.Intervals, iv.Intervals]:
    """(waited, drain) for blocking host calls (`blocking_calls`' output).

    A call [s, e) judged at j waited when the device had work pending just before j (launched before the
    operation began) and that work still ran at s. waited: [s, w), w = min(e, end of that pending
    stretch). drain: [w, start of the next device work at or after e) for each call whose pending stretch
    ended inside it (the wait emptied the device), kept only inside one window (a step)."""
    s, e, j = calls
    ps, pe = pending
    if s.size == 0 or ps.size == 0:
        return iv.EMPTY, iv.EMPTY
    p = j - 1  # work launched at the judge point itself is the operation's own (its copy)
    k = np.searchsorted(ps, p, side="right") - 1
    until = pe[np.clip(k, 0, None)]
    waited = (k >= 0) & (until > p) & (until > s)
    w = np.minimum(e, until)
    drained = waited & (until <= e)
    drain = iv.gaps_until_next(w[drained], busy, windows, search_from=e[drained])
    return iv.merge(s[waited], w[waited]), drain


def waited_at(points: np.ndarray, pending: iv.Intervals) -> np.ndarray:
    """For each operation start: did the device have work running or queued just before it?"""
    return iv.covers(pending, np.asarray(points, dtype=np.int64) - 1)


def after_copy_start(syncs: pd.DataFrame, copies: pd.DataFrame, max_gap_ns: int = SYNC_AFTER_COPY_NS) -> np.ndarray:
    """For each synchronize call (ts, end, pid, tid): the start of the copy call it follows on the same
    thread (the latest one starting before it, ending at most `max_gap_ns` before it), else its own start."""
    ts = syncs["ts"].to_numpy(np.int64)
    if syncs.empty or copies.empty:
        return ts
    keys, codes = np.unique(np.concatenate([_thread(copies), _thread(syncs)]), return_inverse=True)
    c_code, s_code = codes[: len(copies)].astype(np.int64), codes[len(copies):].astype(np.int64)
    shift = np.int64(1) << np.int64(44)
    c_ts, c_end = copies["ts"].to_numpy(np.int64), copies["end"].to_numpy(np.int64)
    comp = c_code * shift + c_ts
    order = np.argsort(comp, kind="stable")
    i = np.searchsorted(comp[order], s_code * shift + ts, side="left") - 1
    c = order[np.clip(i, 0, None)]
    paired = (i >= 0) & (c_code[c] == s_code) & (c_end[c] <= ts) & (ts - c_end[c] <= max_gap_ns)
    return np.where(paired, c_ts[c], ts)


def _thread(df: pd.DataFrame) -> np.ndarray:
    return df["pid"].to_numpy(np.int64) * 1_000_003 + df["tid"].to_numpy(np.int64)
