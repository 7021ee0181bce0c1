"""Partition every nanosecond of every step into exactly one cause.

See docs/attribution.md for the algorithm and a worked example. In short: build interval "signals"
(device runs compute / collectives / copies; host blocked in a copy / a sync / the DataLoader; host
busy), cut the steps at every signal boundary into elementary segments, and give each segment the
first category in priority order whose signal covers it. Everything is numpy interval arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..config import CATEGORIES
from ..trace.model import ANNOTATION, CPU_OP, DEVICE_KINDS, DEVICE_SYNC, KERNEL, MEMCPY, MEMSET, RUNTIME, Trace
from ..trace.names import (
    BLOCKING_COPY_CALLS,
    ITEM_OPS,
    SYNC_CALLS,
    is_comm,
    is_copy_call,
    is_dataloader,
    is_memory_kernel,
    name_mask,
    parse_memcpy,
)
from ..trace.selection import kind_mask, of_kind
from . import intervals as iv
from .phases import STEADY
from .steps import STEP_RE, Steps
from .syncwait import after_copy_start, blocking_calls, charge, device_pending


@dataclass
class Breakdown:
    """`steps`: name, start, end, duration, phase and one int64-ns column per category (rows sum to duration)."""

    steps: pd.DataFrame
    device_busy_ns: np.ndarray  # per step: time the device runs anything (zeros on CPU-only traces)
    has_device: bool
    signals: dict  # name -> Intervals, for facts and tests

    def steady(self) -> tuple[pd.DataFrame, np.ndarray]:
        """The steady steps' rows and their device busy time: what shares, verdict and facts use."""
        keep = (self.steps["phase"] == STEADY).to_numpy() if "phase" in self.steps else np.ones(len(self.steps), bool)
        return self.steps[keep], self.device_busy_ns[keep]


def _iv(df: pd.DataFrame, rows=slice(None)) -> iv.Intervals:
    """The union of the events of `df` (only `rows`, a boolean mask, when given)."""
    return iv.merge(df["ts"].to_numpy()[rows], df["end"].to_numpy()[rows])


def _copy_calls(ev: pd.DataFrame) -> pd.DataFrame:
    """Runtime copy calls with what their device copy was: direction, src, dst."""
    rt = of_kind(ev, RUNTIME)
    rt = rt[name_mask(rt["name"], is_copy_call)]
    dev = of_kind(ev, MEMCPY)
    dev = dev[dev["corr"] >= 0][["corr", "name"]].drop_duplicates("corr")
    out = rt[["ts", "end", "name", "corr", "pid", "tid"]].merge(dev, on="corr", how="left", suffixes=("", "_dev"))
    parsed = {n: parse_memcpy(n) for n in out["name_dev"].dropna().unique()}
    out["direction"] = out["name_dev"].map(lambda n: parsed.get(n, (None,) * 3)[0])
    out["src"] = out["name_dev"].map(lambda n: parsed.get(n, (None,) * 3)[1])
    out["dst"] = out["name_dev"].map(lambda n: parsed.get(n, (None,) * 3)[2])
    out["blocking"] = (out["name"].astype(str).isin(BLOCKING_COPY_CALLS)
                       | out["src"].eq("Pageable") | out["dst"].eq("Pageable"))
    return out


def device_signals(ev: pd.DataFrame) -> dict:
    kern = of_kind(ev, KERNEL)
    comm_mask = name_mask(kern["name"], is_comm)
    mem_mask = name_mask(kern["name"], is_memory_kernel)
    return {
        "device_compute": _iv(kern, ~comm_mask & ~mem_mask),
        "device_comm": _iv(kern, comm_mask & ~mem_mask),
        "device_memory": iv.union(_iv(of_kind(ev, MEMCPY, MEMSET)), _iv(kern, mem_mask)),
        "device_any": _iv(of_kind(ev, *DEVICE_KINDS)),
        "device_pending": device_pending(ev),  # running or queued (from the launch call on)
    }


def _device_reads(items: pd.DataFrame, syncs: pd.DataFrame, copies: pd.DataFrame) -> pd.DataFrame:
    """`aten::item` / `_local_scalar_dense` calls that reached the device (a sync or a copy call inside
    them). An `.item()` on a CPU tensor -- optimizers read their step counters that way -- costs nothing."""
    starts = np.sort(np.concatenate([syncs["ts"].to_numpy(), copies["ts"].to_numpy()]))
    ts, end = items["ts"].to_numpy(), items["end"].to_numpy()
    inside = np.searchsorted(starts, end, side="left") - np.searchsorted(starts, ts, side="left")
    return items[inside > 0]


def _in_step_code(df: pd.DataFrame, steps: Steps) -> pd.DataFrame:
    """With ProfilerStep windows: only calls the step's own code made (they start inside a step's host
    window). The profiler's own synchronize at start/stop falls outside and is not the user's stall."""
    if steps.source != "ProfilerStep" or df.empty:
        return df
    return df[iv.covers(steps.host_windows(), df["ts"].to_numpy())]


def host_signals(ev: pd.DataFrame, steps: Steps, has_device: bool) -> dict:
    host = ~kind_mask(ev, DEVICE_KINDS + (DEVICE_SYNC,))  # device-side sync markers are not host work
    ann = of_kind(ev, ANNOTATION, CPU_OP)
    busy = [_iv(ev, host & ~name_mask(ev["name"], lambda n: bool(STEP_RE.match(n))))]
    if steps.source == "ProfilerStep":  # inside ProfilerStep the host is, by definition, running the step
        busy.append(steps.host_windows())
    out = {"host_dataloader": _iv(ann[name_mask(ann["name"], is_dataloader)]), "host_busy": iv.union(*busy)}
    if has_device:
        copies = _copy_calls(ev)
        blocking = copies[copies["blocking"]]
        to_host = blocking["direction"].eq("DtoH")
        rt = of_kind(ev, RUNTIME)
        out["host_transfer"] = _iv(_in_step_code(blocking[~to_host], steps))
        syncs = _in_step_code(rt[rt["name"].isin(SYNC_CALLS)], steps)
        reads = _in_step_code(_device_reads(ann[ann["name"].isin(ITEM_OPS)], syncs, copies), steps)
        dtoh = _in_step_code(blocking[to_host], steps)
        parts = (syncs, reads, dtoh)
        calls = blocking_calls(np.concatenate([p["ts"].to_numpy(np.int64) for p in parts]),
                               np.concatenate([p["end"].to_numpy(np.int64) for p in parts]),
                               np.concatenate([after_copy_start(syncs, copies)] +
                                              [p["ts"].to_numpy(np.int64) for p in parts[1:]]))
        out["host_sync_calls"] = calls  # (start, end, judge): see syncwait.charge
        out["host_sync"] = calls[:2]
    else:
        ops = of_kind(ev, CPU_OP)
        comm = name_mask(ops["name"], is_comm)
        compute = name_mask(ops["name"], lambda n: "::" in n and not is_dataloader(n))
        comm_ann = ann[name_mask(ann["name"], is_comm)]
        out["cpu_compute"] = _iv(ops, compute & ~comm)
        out["cpu_comm"] = iv.union(_iv(ops, comm), _iv(comm_ann))
    return out


def _priority(sig: dict, has_device: bool, windows: iv.Intervals, unread: bool = False) -> list:
    """(category, Intervals) in priority order: the first that covers a segment takes it. `unread`:
    the trace holds none of its device's activity (trace/devices.py): the host's op time is the
    host's, never `kernel`."""
    if not has_device:
        compute = [] if unread else [("kernel", sig["cpu_compute"])]
        return [("dataloader", sig["host_dataloader"]), *compute,
                ("communication", sig["cpu_comm"]), ("host", sig["host_busy"])]
    # A sync costs only while the host waited on a busy device, and its drain only when that wait
    # drained the device (syncwait.py); a sync on an idle device is host time (host_busy covers it).
    waited, drain = charge(sig["host_sync_calls"], sig["device_pending"], sig["device_any"], windows)
    sig["sync_waited"], sig["sync_drain"] = waited, drain
    return [("kernel", sig["device_compute"]), ("communication", sig["device_comm"]),
            ("transfer", sig["device_memory"]), ("transfer", sig["host_transfer"]),
            ("sync", waited), ("dataloader", sig["host_dataloader"]), ("sync", drain),
            ("host", sig["host_busy"])]


def attribute(trace: Trace, steps: Steps) -> Breakdown:
    ev = trace.events
    has_device = not of_kind(ev, *DEVICE_KINDS).empty
    fr = steps.frame
    st, en = fr["start"].to_numpy(np.int64), fr["end"].to_numpy(np.int64)
    sig = host_signals(ev, steps, has_device)
    if has_device:
        sig.update(device_signals(ev))
    order = _priority(sig, has_device, (st, en), unread=bool(trace.unread_device))

    bounds = [st, en] + [a for _, (s, e) in order for a in (s, e)]
    cuts = iv.distinct(np.concatenate(bounds))
    cuts = cuts[(cuts >= st.min()) & (cuts <= en.max())] if len(st) else cuts[:0]
    seg_start, seg_len = cuts[:-1], np.diff(cuts)
    step_idx = np.searchsorted(st, seg_start, side="right") - 1
    in_step = (step_idx >= 0) & (seg_start < en[np.clip(step_idx, 0, None)])

    cat_idx = np.full(seg_start.shape, CATEGORIES.index("other"), dtype=np.int8)
    unset = np.ones(seg_start.shape, dtype=bool)
    for name, intervals in order:
        hit = unset & iv.covers(intervals, seg_start)
        cat_idx[hit] = CATEGORIES.index(name)
        unset &= ~hit

    table = np.zeros((len(fr), len(CATEGORIES)), dtype=np.int64)
    np.add.at(table, (step_idx[in_step], cat_idx[in_step]), seg_len[in_step])
    busy = np.zeros(len(fr), dtype=np.int64)
    if has_device:
        dev_hit = in_step & iv.covers(sig["device_any"], seg_start)
        np.add.at(busy, step_idx[dev_hit], seg_len[dev_hit])

    for j, c in enumerate(CATEGORIES):  # where each category was charged: facts explain host time from it
        hit = in_step & (cat_idx == j)
        sig[f"as_{c}"] = iv.merge(seg_start[hit], seg_start[hit] + seg_len[hit])
    out = pd.DataFrame({"name": fr["name"].to_numpy(), "start": st, "end": en, "duration": en - st,
                        "phase": fr["phase"].to_numpy() if "phase" in fr else STEADY})
    for j, c in enumerate(CATEGORIES):
        out[c] = table[:, j]
    return Breakdown(steps=out, device_busy_ns=busy, has_device=has_device, signals=sig)

