"""The dependency graph of a few consecutive steps, read from the trace: what a replay replays.

- **Host items**, in time order: the runtime calls of the threads that drive the device (calls nested
  in another call, or inside a DataLoader `__next__`, belong to the enclosing item), the DataLoader
  `__next__` spans, and one zero-length item where each step's host window ends. An item's work is
  the host time since the previous item ended (`gap`: Python, dispatch, CPU ops) plus its own cost.
- **Device nodes** per stream in start order: kernels, copies, memsets launched inside the window.
- **Launch edges**: a runtime call -> its device work (correlation id), `lag` after the call ends.
- **Sync edges**: device work -> the host item that waited for it: a copy call that returned only
  after its own copy ended (pageable or blocking copies), a synchronize (`cudaStreamSynchronize`,
  `cudaDeviceSynchronize`, `cudaEventSynchronize`, `cudaFree`, ...) that returned after work on a
  stream ended (it waits for everything queued before it on that stream, or on every stream), and
  launches held by the bounded launch queue (a launch waits for the work `queue_depth` places back
  on its stream; the depth is read from the launches the trace shows blocked, else assumed).
- **Cross-stream edges**: a node that started late on an idle stream, right after a node on another
  stream ended (`cudaStreamWaitEvent`, NCCL).
- **Data edges**: a DataLoader `__next__` item; `whatif` turns it into a wait for worker batches.

Everything is built with vectorised joins; `to_graph` lays the arrays out for `replay.solve`, where
an unchanged timeline reproduces the recorded ends (the self-check in `forecast`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace.lookup import by_id
from ...trace.model import ANNOTATION, CPU_OP, DEVICE_KINDS, RUNTIME, Trace
from ...trace.names import BLOCKING_COPY_CALLS, SYNC_CALLS, is_dataloader, name_mask
from ...trace.selection import of_kind
from .replay import Graph

CALL, LOADER, STEP_END = 0, 1, 2  # host item kinds
OWN, SYNC, QUEUE = 0, 1, 2  # why a host item waits for a device node
# Calls that wait for the device although their name says nothing of it (cudaFree synchronizes).
IMPLICIT_SYNC_CALLS = frozenset({"cudaFree", "cudaFreeHost", "hipFree", "hipHostFree", "cuMemFree", "cuMemFree_v2",
                                 "cudaEventSynchronize", "hipEventSynchronize"})
DEVICE_WIDE_SYNCS = frozenset({"cudaDeviceSynchronize", "cudaCtxSynchronize", "cuCtxSynchronize",
                               "hipDeviceSynchronize", "hipCtxSynchronize", "cudaFree", "hipFree"})
DEFAULT_QUEUE_DEPTH = 1024  # CUDA's pending-launch queue (not documented; ~1024 in practice)
DEFAULT_LATENCY_NS = 5_000.0
IDLE_TOL_NS = 100.0  # a stream was idle before a node when the node starts this long after the previous ended
LATE_NS = 20_000.0  # a node on an idle stream that starts this long after its launch waited for something
DEVICE_GAP_NS = 10_000.0  # up to this between two nodes of a busy stream is the device's own overhead
MIN_BLOCKED = 3  # blocked launches needed to read the queue depth off the trace


@dataclass
class Timeline:
    w0: int  # trace ns: the replay window starts here (the first step's host start); arrays below are relative
    steps: pd.DataFrame  # name, start, end, host_start, host_end (relative ns), one row per replayed step
    # host items
    t: np.ndarray
    e: np.ndarray
    gap: np.ndarray
    own: np.ndarray
    kind: np.ndarray
    name: np.ndarray  # object array of names
    step: np.ndarray
    # device nodes (sorted by stream, then start)
    d_start: np.ndarray
    d_end: np.ndarray
    d_dur: np.ndarray
    d_pre: np.ndarray  # the device's own gap before the node on a busy stream (kept as it is by edits)
    d_stream: np.ndarray  # 0..streams-1
    d_item: np.ndarray  # launching host item
    d_lag: np.ndarray  # ready = item end + lag
    d_name: np.ndarray  # object array
    d_kind: np.ndarray
    d_bytes: np.ndarray
    d_corr: np.ndarray  # correlation id (-1 when unknown)
    d_call: np.ndarray  # the launching runtime call's start (relative ns)
    stream_free: np.ndarray  # per stream: busy until (earlier work), relative ns
    stream_keys: list  # (pid, tid) per stream
    # edges: device node -> host item (waits) and device -> device (cross-stream)
    w_src: np.ndarray
    w_dst: np.ndarray
    w_lag: np.ndarray
    w_why: np.ndarray
    x_src: np.ndarray
    x_dst: np.ndarray
    x_lag: np.ndarray
    latency_ns: float = DEFAULT_LATENCY_NS
    queue_depth: int = DEFAULT_QUEUE_DEPTH
    queue_observed: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def n_items(self) -> int:
        return int(self.t.size)

    @property
    def n_nodes(self) -> int:
        return int(self.d_start.size)

    @property
    def a(self) -> np.ndarray:
        """Host work of each item once the previous item ended."""
        return self.gap + self.own


def _empty_i() -> np.ndarray:
    return np.empty(0, np.int64)


def _empty_f() -> np.ndarray:
    return np.empty(0, np.float64)


def _host_items(trace: Trace, w0: int, w1: int, steps: pd.DataFrame):
    ev = trace.events
    rt = of_kind(ev, RUNTIME)
    rt = rt[(rt["ts"].to_numpy() >= w0) & (rt["ts"].to_numpy() < w1)]
    ann = of_kind(ev, ANNOTATION, CPU_OP)
    ann = ann[(ann["ts"].to_numpy() >= w0) & (ann["ts"].to_numpy() < w1)]
    dl = ann[name_mask(ann["name"], is_dataloader)]
    parts = [
        (rt["ts"].to_numpy(np.int64), rt["end"].to_numpy(np.int64), np.full(len(rt), CALL), rt["name"].astype(str).to_numpy()),
        (dl["ts"].to_numpy(np.int64), dl["end"].to_numpy(np.int64), np.full(len(dl), LOADER), dl["name"].astype(str).to_numpy()),
        (steps["host_end"].to_numpy(np.int64), steps["host_end"].to_numpy(np.int64), np.full(len(steps), STEP_END),
         np.array(["<step end>"] * len(steps), dtype=object)),
    ]
    t, e, kind, name = (np.concatenate([p[i] for p in parts]) for i in range(4))
    # at equal starts: a step's end first, then the enclosing (loader, longer) item
    rank = np.select([kind == STEP_END, kind == LOADER], [0, 1], 2)
    order = np.lexsort((-e, rank, t))
    t, e, kind, name = t[order], e[order], kind[order], name[order]
    prev_end = np.concatenate([[w0], np.maximum.accumulate(e)[:-1]])
    keep = (e > prev_end) | (kind == STEP_END) | (t >= prev_end)  # drop items nested in an earlier one
    return t[keep], e[keep], kind[keep], name[keep].astype(object)


def _locate(t: np.ndarray, e: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """The item that contains each time (or, in a gap, the item whose gap it is: the next one)."""
    i = np.searchsorted(t, ts, side="right") - 1
    inside = (i >= 0) & (ts < e[np.clip(i, 0, None)])
    return np.clip(np.where(inside, i, i + 1), 0, len(t) - 1)


def _device_nodes(trace: Trace, w0: int, w1: int, last: int):
    """Device work launched by a call inside [w0, w1) (or, without a known call, starting there), and the
    backlog: work launched earlier that still runs after w0. Nothing launched in the window starts
    after `last` (the end of the last step, which includes the device work it launched)."""
    dev = of_kind(trace.events, *DEVICE_KINDS)
    near = dev[(dev["end"].to_numpy() > w0) & (dev["ts"].to_numpy() <= last)]
    nodes = near[["ts", "end", "pid", "tid", "corr", "name", "kind", "bytes"]].reset_index(drop=True)
    nodes["call_ts"] = by_id(trace.events, (RUNTIME,), "corr").get(  # the launching call's start (NaN: none)
        near["corr"].to_numpy(np.int64), of_kind(trace.events, RUNTIME)["ts"].to_numpy(np.float64), np.nan)
    launch = nodes["call_ts"].to_numpy(np.float64)
    ts = nodes["ts"].to_numpy(np.float64)
    known = ~np.isnan(launch)
    when = np.where(known, launch, ts)
    inside = (when >= w0) & (when < w1)
    return nodes[inside].reset_index(drop=True), nodes[~inside & (when < w0)]


def _typical_own(name: np.ndarray, dur: np.ndarray, waits: np.ndarray) -> np.ndarray:
    """Per item: the median duration of items of its name that did not wait (its own cost)."""
    s = pd.Series(np.where(waits, np.nan, dur))
    med = s.groupby(pd.Series(name)).transform("median").to_numpy()
    return np.where(np.isnan(med), 0.0, med)


def build_timeline(trace: Trace, steps: pd.DataFrame) -> Timeline:
    """The graph of the consecutive steps in `steps` (rows with start, end, host_end in trace ns)."""
    steps = steps.sort_values("start").reset_index(drop=True)
    w0, w1 = int(steps["host_start"].iloc[0]), int(steps["host_end"].iloc[-1]) + 1
    t, e, kind, name = _host_items(trace, w0, w1, steps)
    nodes, backlog = _device_nodes(trace, w0, w1, int(steps["end"].iloc[-1]))
    keys = sorted(set(zip(nodes["pid"].tolist(), nodes["tid"].tolist())))
    code = {k: i for i, k in enumerate(keys)}
    stream = np.array([code[k] for k in zip(nodes["pid"].tolist(), nodes["tid"].tolist())], dtype=np.int64)
    order = np.lexsort((nodes["ts"].to_numpy(), stream))
    nodes, stream = nodes.iloc[order].reset_index(drop=True), stream[order]
    ts, end = nodes["ts"].to_numpy(np.int64), nodes["end"].to_numpy(np.int64)
    has_call = nodes["call_ts"].notna().to_numpy()
    call = np.where(has_call, nodes["call_ts"].to_numpy(np.float64), ts).astype(np.int64)
    free = np.full(len(keys), -np.inf)
    for (pid, tid), k in code.items():
        b = backlog[(backlog["pid"] == pid) & (backlog["tid"] == tid)]
        if len(b):
            free[k] = float(b["end"].max() - w0)
    item = _locate(t, e, call)
    first = np.ones(len(nodes), bool)
    first[1:] = stream[1:] != stream[:-1]
    prev_end = np.where(first, free[stream] + w0, np.concatenate([[0], end[:-1]]).astype(np.float64))
    idle = ts > prev_end + IDLE_TOL_NS
    delay = (ts - call)[idle & has_call & (ts >= call)]
    latency = float(np.median(delay[delay <= LATE_NS])) if (delay <= LATE_NS).any() else DEFAULT_LATENCY_NS
    # A short gap after the previous node of a stream whose node was launched long before is the
    # device's own overhead between kernels: it stays with the node (d_pre), and the node follows
    # its stream. Only a node that started right after its launch, or after a longer wait, was idle.
    late = ts - call > latency + LATE_NS
    overhead = idle & late & (ts - prev_end <= DEVICE_GAP_NS)
    idle &= ~overhead
    d_pre = np.where(overhead, ts - prev_end, 0.0)
    x_src, x_dst, x_lag, crossed = _cross_stream(ts, end, stream, nodes["pid"].to_numpy(), call, idle, latency)
    ready = np.where(idle & ~crossed, ts, np.minimum(ts - d_pre, call + latency)).astype(np.float64)
    d_lag = ready - e[item]
    # A node that started long after its launch on an idle stream, with nothing in the trace that it waited
    # for (another rank, an event, a host callback), keeps that wait in every replay: how long it waited.
    unexplained = np.where(idle & ~crossed & late, ts - np.maximum(call + latency, prev_end), 0.0)

    dur_h = (e - t).astype(np.float64)
    w_src, w_dst, w_lag, w_why, q = _waits(t, e, kind, name, item, call, ts, end, stream, nodes["kind"].to_numpy(),
                                           dur_h)
    waits = np.zeros(len(t), bool)
    waits[w_dst] = True
    prev = np.concatenate([[w0], np.maximum.accumulate(e)[:-1]]).astype(np.float64)
    gap = np.maximum(t - prev, 0.0)
    span = np.maximum(e - np.maximum(prev, t), 0.0)
    own = np.where(waits, np.minimum(_typical_own(name, dur_h, waits), span), span)
    own = np.where(kind == STEP_END, 0.0, own)
    ends = steps["host_end"].to_numpy(np.int64)  # an item that starts where a step's host window ends is the next step's
    step_of = np.where(kind == STEP_END, np.searchsorted(ends, t, side="left"), np.searchsorted(ends, t, side="right"))
    step_of = np.clip(step_of, 0, len(steps) - 1)
    rel = steps.assign(**{c: steps[c].astype(np.int64) - w0 for c in ("start", "end", "host_start", "host_end")})
    return Timeline(
        w0=w0, steps=rel[["name", "start", "end", "host_start", "host_end"]], t=(t - w0).astype(np.float64),
        e=(e - w0).astype(np.float64), gap=gap, own=own, kind=kind, name=name, step=step_of,
        d_start=(ts - w0).astype(np.float64), d_end=(end - w0).astype(np.float64),
        d_dur=(end - ts).astype(np.float64), d_pre=d_pre.astype(np.float64), d_stream=stream, d_item=item, d_lag=d_lag,
        d_name=nodes["name"].astype(str).to_numpy(object), d_kind=nodes["kind"].to_numpy(),
        d_bytes=nodes["bytes"].to_numpy(np.int64), d_corr=nodes["corr"].to_numpy(np.int64),
        d_call=(call - w0).astype(np.float64), stream_free=free, stream_keys=keys, w_src=w_src, w_dst=w_dst, w_lag=w_lag, w_why=w_why, x_src=x_src, x_dst=x_dst,
        x_lag=x_lag, latency_ns=latency, queue_depth=q[0], queue_observed=q[1],
        extra={"unexplained_wait": np.maximum(unexplained, 0.0).astype(np.float64)})


def _cross_stream(ts, end, stream, pid, call, idle, latency):
    """Edges from the node on another stream (same device) that ended right before a late node
    started, and which nodes got one."""
    late = idle & (ts - call > latency + LATE_NS)
    if not late.any() or len(np.unique(stream)) < 2:
        return _empty_i(), _empty_i(), _empty_f(), np.zeros(len(ts), bool)
    by_end = np.argsort(end, kind="stable")
    dst = np.flatnonzero(late)
    found = np.full(dst.size, -1)
    k = np.searchsorted(end[by_end], ts[dst], side="right") - 1
    for back in range(8):  # the nearest earlier end on another stream of the same device
        c = by_end[np.clip(k - back, 0, None)]
        ok = (found < 0) & (k - back >= 0) & (stream[c] != stream[dst]) & (pid[c] == pid[dst]) \
            & (end[c] >= ts[dst] - LATE_NS)
        found[ok] = c[ok]
    hit = found >= 0
    lateness = np.zeros(len(ts), bool)
    lateness[dst[hit]] = True
    return found[hit], dst[hit], (ts[dst[hit]] - end[found[hit]]).astype(np.float64), lateness


def _waits(t, e, kind, name, item, call, ts, end, stream, dkind, dur_h):
    """Edges device node -> host item for every host item that waited, and the launch queue depth."""
    n = len(ts)
    pos = np.arange(n) - np.searchsorted(stream, stream, side="left")  # position within the stream
    own_call = np.zeros(n, bool)
    own_call[:] = (call == t[item]) & (kind[item] == CALL)
    # (1) a call that returned after its own device work ended
    own = own_call & (end > t[item]) & (end <= e[item])
    src = [np.flatnonzero(own)]
    dst = [item[own]]
    why = [np.full(int(own.sum()), OWN)]
    # (2) synchronizing calls: wait for the last work queued before them on the stream that ended inside
    is_sync = (kind == CALL) & np.isin(name, list(SYNC_CALLS | IMPLICIT_SYNC_CALLS | BLOCKING_COPY_CALLS))
    is_sync[dst[0]] = False
    sync = np.flatnonzero(is_sync)
    by_end = np.argsort(end, kind="stable")
    if sync.size and n:
        k = by_end[np.clip(np.searchsorted(end[by_end], e[sync], side="right") - 1, 0, None)]
        waited = (np.searchsorted(end[by_end], e[sync], side="right") > 0) & (end[k] > t[sync])
        wide = np.isin(name[sync], list(DEVICE_WIDE_SYNCS))
        for s in np.unique(stream):
            lo, hi = np.searchsorted(stream, [s, s + 1])
            last = lo + np.searchsorted(call[lo:hi], t[sync], side="left") - 1
            hit = waited & (last >= lo) & (wide | (stream[k] == s))
            hit[hit] &= end[last[hit]] <= e[sync[hit]] + IDLE_TOL_NS
            src.append(last[hit])
            dst.append(sync[hit])
            why.append(np.full(int(hit.sum()), SYNC))
    # (3) launches held by a full launch queue
    depth, observed, q_src, q_dst, q_lag = _queue(t, e, kind, name, item, own_call & ~own, end, stream, pos, dur_h)
    w_src = np.concatenate(src + [q_src])
    w_dst = np.concatenate(dst + [q_dst])
    w_why = np.concatenate(why + [np.full(q_src.size, QUEUE)])
    lag = np.maximum(e[w_dst] - end[w_src], 0.0).astype(np.float64)
    lag[w_why == QUEUE] = q_lag
    # An edge the recording contradicts (the item returned before that work could have ended, or the
    # work was launched after the item) is not a dependency; dropping it also keeps the graph acyclic.
    ok = (end[w_src] + lag <= e[w_dst] + IDLE_TOL_NS) & ((item[w_src] < w_dst) | ((w_why == OWN) & (item[w_src] == w_dst)))
    return w_src[ok].astype(np.int64), w_dst[ok].astype(np.int64), lag[ok], w_why[ok], (depth, observed)


def _queue(t, e, kind, name, item, launch, end, stream, pos, dur_h):
    """The launch queue depth seen in the trace and, for every launch, an edge from the node `depth`
    places back on its stream (the launch cannot return before that node finished)."""
    none = (DEFAULT_QUEUE_DEPTH, False, _empty_i(), _empty_i(), _empty_f())
    li = np.flatnonzero(launch)
    if li.size == 0:
        return none
    dur = dur_h[item[li]]
    # a launch that took far longer than the quick ones of its kind (its 10th percentile, at most 10 µs:
    # when the queue is always full every launch is held) was held
    typical = pd.Series(dur).groupby(pd.Series(name[item[li]])).transform(lambda d: d.quantile(0.1)).to_numpy()
    long = dur > 3 * np.minimum(typical, 10_000) + 5_000
    # the latest node on the same stream that ended inside the call
    keyed_end = stream.astype(np.float64) * 1e15 + end
    order = np.argsort(keyed_end, kind="stable")
    k = order[np.clip(np.searchsorted(keyed_end[order], stream[li] * 1e15 + e[item[li]], side="right") - 1, 0, None)]
    blocked = long & (stream[k] == stream[li]) & (end[k] > t[item[li]]) & (end[k] <= e[item[li]])
    if blocked.sum() < MIN_BLOCKED:
        depth, observed, tail = DEFAULT_QUEUE_DEPTH, False, 0.0
    else:
        depth = int(max(1, np.median(pos[li[blocked]] - pos[k[blocked]])))
        observed, tail = True, float(np.median(e[item[li[blocked]]] - end[k[blocked]]))
    back = li - depth
    ok = (pos[li] >= depth) & (back >= 0)
    ok[ok] &= stream[back[ok]] == stream[li[ok]]
    # and each launch seen held waits for the node whose end released it (the depth varies)
    held = li[blocked]
    src = np.concatenate([back[ok], k[blocked]])
    dst = np.concatenate([item[li[ok]], item[held]])
    lags = np.concatenate([np.full(int(ok.sum()), tail), e[item[held]] - end[k[blocked]]])
    return depth, observed, src, dst, lags.astype(np.float64)


def _launch_edges(tl: Timeline, a: np.ndarray, d_lag: np.ndarray):
    """Launch edges (source item, lag) and fixed ready times. A node is ready `lag` after its item
    ends -- except when that item waited for device work: its end is not when it launched, so the edge
    runs from the item before it, across the host work before the call (its current `a` less its own
    cost), or, for the window's first item, is a fixed time."""
    src, lag = tl.d_item.copy(), d_lag.copy()
    ready0 = np.full(tl.n_nodes, -np.inf)
    waiting = np.zeros(tl.n_items, bool)
    waiting[tl.w_dst] = True
    w = waiting[tl.d_item]
    if w.any():
        i = tl.d_item[w]
        offset = (a[i] - tl.own[i]) + (d_lag[w] + tl.e[i] - tl.t[i])  # host work before the call, then its ready
        first = i == 0
        src[w] = np.where(first, 0, i - 1)
        lag[w] = offset
        ready0[np.flatnonzero(w)[first]] = offset[first]
        lag[np.flatnonzero(w)[first]] = -np.inf
    return src, lag, ready0


def to_graph(tl: Timeline, a=None, dur=None, d_lag=None, waits=None, extra=None) -> Graph:
    """Lay the timeline out for `replay.solve` (resource 0: the host; 1..: the streams).

    `a` / `dur` / `d_lag` replace host work, device durations and launch lags; `waits` is a boolean
    mask over the wait edges to keep; `extra` = (a, b, offsets, free_at, src, dst, lag, key) of further
    resources appended after the streams (indices in src/dst are global)."""
    a = tl.a if a is None else a
    dur = tl.d_dur if dur is None else dur
    d_lag = tl.d_lag if d_lag is None else d_lag
    keep = np.ones(tl.w_src.size, bool) if waits is None else waits
    H = tl.n_items
    counts = np.bincount(tl.d_stream, minlength=len(tl.stream_keys))
    offsets = np.concatenate([[0, H], H + np.cumsum(counts)]).astype(np.int64)
    ga = np.concatenate([a, tl.d_pre + dur])
    gb = np.concatenate([np.zeros(H), tl.d_pre + dur])
    free = np.concatenate([[0.0], tl.stream_free])
    l_src, l_lag, l_ready0 = _launch_edges(tl, a, d_lag)
    src = np.concatenate([l_src, H + tl.w_src[keep], H + tl.x_src])
    dst = np.concatenate([H + np.arange(tl.n_nodes), tl.w_dst[keep], H + tl.x_dst])
    lag = np.concatenate([l_lag, tl.w_lag[keep], tl.x_lag])
    ready0 = np.concatenate([np.full(H, -np.inf), l_ready0])
    key = np.concatenate([np.maximum.accumulate(tl.e) if H else tl.e, _per_stream_cummax(tl)])
    if extra is not None:
        ea, eb, eoff, efree, esrc, edst, elag, ekey = extra
        key = np.concatenate([key, ekey])
        ga, gb = np.concatenate([ga, ea]), np.concatenate([gb, eb])
        offsets = np.concatenate([offsets, offsets[-1] + np.asarray(eoff[1:], np.int64)])
        free = np.concatenate([free, efree])
        src, dst, lag = np.concatenate([src, esrc]), np.concatenate([dst, edst]), np.concatenate([lag, elag])
        ready0 = np.concatenate([ready0, np.full(len(ea), -np.inf)])
    return Graph(a=ga, b=gb, offsets=offsets, free_at=free, src=src, dst=dst, lag=lag, ready0=ready0, key=key)


def _per_stream_cummax(tl: Timeline) -> np.ndarray:
    """Recorded device ends, made non-decreasing along each stream (nodes are grouped by stream)."""
    out = tl.d_end.copy()
    for s in np.unique(tl.d_stream):
        lo, hi = np.searchsorted(tl.d_stream, [s, s + 1])
        out[lo:hi] = np.maximum.accumulate(out[lo:hi])
    return out


def step_ends(tl: Timeline, end: np.ndarray) -> np.ndarray:
    """Replayed end of each step: its host window's end or its device work's end, whichever is later."""
    H = tl.n_items
    out = np.full(len(tl.steps), -np.inf)
    sentinel = np.flatnonzero(tl.kind == STEP_END)
    np.maximum.at(out, tl.step[sentinel], end[sentinel])
    if tl.n_nodes:
        np.maximum.at(out, tl.step[tl.d_item], end[H: H + tl.n_nodes])
    return np.maximum.accumulate(out)
