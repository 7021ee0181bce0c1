"""Facts about what the host does: data loading, copies, syncs, optimizer, zero_grad, collectives."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..analysis import intervals as iv
from ..analysis.syncwait import SYNC_AFTER_COPY_NS, blocking_calls, charge, waited_at
from ..trace.model import ANNOTATION, CPU_OP, KERNEL, MEMCPY, MEMSET, RUNTIME
from ..trace.names import BLOCKING_COPY_CALLS, SYNC_CALLS, is_comm, is_copy_call, is_dataloader, name_mask, parse_memcpy
from ..trace.selection import of_kind
from .common import Context, innermost_enclosing, intersect, launched_inside, overlap_ns, span
from .locations import optimizer_sites, sites, sites_under, sync_sites

SINGLE_ITER, MULTI_ITER = "_SingleProcessDataLoaderIter", "_MultiProcessingDataLoaderIter"
ZERO_GRAD_PREFIX, OPTIMIZER_PREFIX = "Optimizer.zero_grad#", "Optimizer.step#"
FILL_OPS = frozenset({"aten::zero_", "aten::fill_"})

HOST_FACTS = {
    "dataloader_single_process": ("bool", "DataLoader events come from _SingleProcessDataLoaderIter (num_workers=0)"),
    "dataloader_multi_process": ("bool", "DataLoader events come from _MultiProcessingDataLoaderIter (num_workers>0)"),
    "dataloader_calls_per_step": ("count/step", "DataLoader/DataPipe __next__ calls"),
    "dataloader_wait_us_per_step": ("us/step", "host time inside DataLoader __next__ (whether or not the device was busy)"),
    "h2d_pageable_copies_per_step": ("count/step", "host-to-device copies from pageable memory"),
    "h2d_pageable_bytes_per_step": ("bytes/step", "bytes copied host-to-device from pageable memory"),
    "h2d_pageable_bytes_per_copy": ("bytes", "mean size of one pageable host-to-device copy"),
    "h2d_pageable_us_per_step": ("us/step", "device time of pageable host-to-device copies"),
    "h2d_pageable_host_us_per_step": ("us/step", "host time blocked in the runtime calls of pageable host-to-device copies"),
    "h2d_pinned_copies_per_step": ("count/step", "host-to-device copies from pinned memory"),
    "h2d_pinned_blocking_copies_per_step": ("count/step", "pinned host-to-device copies issued as blocking copies "
                                            "(cudaMemcpy, or the next runtime call on the thread is a synchronize "
                                            "starting within 50 µs)"),
    "h2d_pinned_blocking_bytes_per_step": ("bytes/step", "bytes of those blocking pinned copies"),
    "h2d_pinned_blocking_us_per_step": ("us/step", "host time in those blocking copy calls and the synchronize after them"),
    "sync_item_calls_per_step": ("count/step", "reads of device values on the host: aten::item / _local_scalar_dense "
                                 "that copy from the device (not .item() of CPU tensors), plus blocking "
                                 "device-to-host copies outside them (.cpu(), .numpy(), .tolist())"),
    "sync_calls_per_step": ("count/step", "explicit synchronize runtime calls (cudaStreamSynchronize, ...)"),
    "sync_dtoh_copies_per_step": ("count/step", "device-to-host copy calls (those inside aten::item included)"),
    "sync_item_us_per_step": ("us/step", "host time inside those reads"),
    "sync_item_waited_calls_per_step": ("count/step", "those reads that started while the device had work running or "
                                        "queued (the others waited for nothing and cost only their call time)"),
    "sync_item_idle_us_per_step": ("us/step", "device idle time caused by scalar reads that waited on a busy device: "
                                   "inside them while the host waited, and in the drain after a wait that emptied "
                                   "the device until the next device work (an upper bound of the saving)"),
    "sync_explicit_calls_per_step": ("count/step", "synchronize calls made by the step's code (torch.cuda.synchronize(), "
                                     "event/stream synchronize) outside reads and copies, inside the step's host window"),
    "sync_explicit_waited_calls_per_step": ("count/step", "those synchronize calls that started while the device had "
                                            "work running or queued"),
    "sync_explicit_idle_us_per_step": ("us/step", "device idle time inside those calls while the host waited on a busy "
                                       "device, and in the drain after a wait that emptied the device"),
    "optimizer_name": ("text", "optimizer class from the Optimizer.step#NAME.step annotation ('' if none)"),
    "optimizer_fused": ("bool", "the optimizer step is fused or foreach (Fused* class, _fused_/_foreach_ ops)"),
    "optimizer_us_per_step": ("us/step", "host time inside Optimizer.step annotations"),
    "optimizer_kernels_per_step": ("count/step", "kernels launched from inside Optimizer.step"),
    "zero_grad_calls_per_step": ("count/step", "Optimizer.zero_grad calls"),
    "zero_grad_us_per_step": ("us/step", "host time inside Optimizer.zero_grad annotations"),
    "zero_grad_fill_ops_per_step": ("count/step", "aten::zero_ / aten::fill_ ops inside zero_grad (0 with set_to_none=True)"),
    "zero_grad_device_us_per_step": ("us/step", "device time of kernels and memsets launched from inside zero_grad"),
    "memsets_per_step": ("count/step", "device memsets"),
    "memset_us_per_step": ("us/step", "device time of memsets"),
    "comm_kernels_per_step": ("count/step", "collective kernels (NCCL/RCCL)"),
    "comm_kernel_us_per_step": ("us/step", "device time of collective kernels (merged)"),
    "comm_exposed_fraction": ("fraction", "share of collective time not hidden behind compute (exposed / total; 0 without collectives)"),
}


def host_facts(ctx: Context) -> tuple[dict, dict]:
    v: dict = {}
    for part in (_dataloader, _copies, _optimizer, _zero_grad, _comm):
        v.update(part(ctx))
    sync_v, tables = _syncs(ctx)
    v.update(sync_v)
    tables.update(_code_sites(ctx))
    return v, tables


def _code_sites(ctx: Context) -> dict:
    """Where in the user's code the DataLoader work, the copies and zero_grad come from."""
    dl = _named(ctx.kind(ANNOTATION, CPU_OP), is_dataloader)
    c = copy_calls(ctx)
    h2d = c[c["direction"].eq("HtoD")]
    pinned = h2d[h2d["src"].eq("Pinned")]
    blocking = pinned[pinned["name"].astype(str).isin(BLOCKING_COPY_CALLS) | pinned["then_sync"]]
    return {"dataloader_sites": sites_under(ctx.trace, dl, ctx.n_steps),
            "pageable_copy_sites": sites(ctx.trace, h2d[h2d["src"].eq("Pageable")], ctx.n_steps),
            "blocking_copy_sites": sites(ctx.trace, blocking, ctx.n_steps),
            "zero_grad_sites": optimizer_sites(ctx.trace, _windows_named(ctx, ZERO_GRAD_PREFIX), ctx.n_steps,
                                               calls=True)}


def _named(ev: pd.DataFrame, pred) -> pd.DataFrame:
    return ev[name_mask(ev["name"], pred)]


def _dataloader(ctx: Context) -> dict:
    dl = _named(ctx.kind(ANNOTATION, CPU_OP), is_dataloader)
    all_names = of_kind(ctx.trace.events, ANNOTATION, CPU_OP)["name"]
    return {
        "dataloader_single_process": bool(name_mask(all_names, lambda n: SINGLE_ITER in n and "DataLoader" in n).any()),
        "dataloader_multi_process": bool(name_mask(all_names, lambda n: MULTI_ITER in n and "DataLoader" in n).any()),
        "dataloader_calls_per_step": ctx.per_step(len(dl)),
        "dataloader_wait_us_per_step": ctx.per_step_us(ctx.in_steps_ns(span(dl))),
    }


@dataclass
class ThreadOrder:
    """All runtime calls in (pid, tid, ts) order, as positions into the RUNTIME selection `rt`, with for
    each: whether the next call in that order is on the same thread, and whether the previous one on
    the thread was a copy call. Columns, not a sorted copy of every call (only copies and syncs are read)."""

    rt: pd.DataFrame
    order: np.ndarray  # thread order -> row of rt
    same_next: np.ndarray  # per position in thread order
    is_copy: np.ndarray
    after_copy: np.ndarray

    def next_of(self, pos: np.ndarray, column: str) -> np.ndarray:
        """`column` of the call after each position (thread order) on its thread: float, NaN at a thread's end."""
        if self.order.size == 0:  # no runtime call at all: int, as a shift of an empty column stays
            return np.empty(0, np.int64)
        nxt = self.order[np.minimum(pos + 1, self.order.size - 1)]
        return np.where(self.same_next[pos], self.rt[column].to_numpy(np.int64)[nxt], np.nan)


def _thread_runtime(ctx: Context) -> ThreadOrder:
    def make() -> ThreadOrder:
        rt = of_kind(ctx.trace.events, RUNTIME)
        pid, tid = rt["pid"].to_numpy(np.int64), rt["tid"].to_numpy(np.int64)
        order = np.lexsort((rt["ts"].to_numpy(np.int64), tid, pid))  # sort_values(["pid", "tid", "ts"], stable)
        p, t = pid[order], tid[order]
        same_next = np.zeros(order.size, bool)
        same_next[:-1] = (p[1:] == p[:-1]) & (t[1:] == t[:-1])
        is_copy = name_mask(rt["name"], is_copy_call)[order]
        after_copy = np.zeros(order.size, bool)
        after_copy[1:] = same_next[:-1] & is_copy[:-1]
        return ThreadOrder(rt, order, same_next, is_copy, after_copy)

    return ctx.cached("thread_runtime", make)


def copy_calls(ctx: Context) -> pd.DataFrame:
    """Runtime copy calls inside steps with their device copy: direction, src, dst, bytes, device dur,
    and the name of the next runtime call on the same thread (do not modify the frame)."""
    return ctx.cached("copy_calls", lambda: _copy_calls(ctx))


def _copy_calls(ctx: Context) -> pd.DataFrame:
    th = _thread_runtime(ctx)
    pos = np.flatnonzero(th.is_copy)  # copy calls, in thread order
    pos = pos[iv.covers(ctx.windows, th.rt["ts"].to_numpy(np.int64)[th.order[pos]])]
    rows = th.order[pos]
    names = th.rt["name"]
    nxt = th.order[np.minimum(pos + 1, max(th.order.size - 1, 0))]
    rt = pd.DataFrame({**{c: th.rt[c].to_numpy(np.int64)[rows] for c in ("ts", "end", "dur", "pid", "tid")},
                       "name": names.take(rows).values,
                       "corr": th.rt["corr"].to_numpy(np.int64)[rows],
                       "next_name": pd.Series(np.where(th.same_next[pos], names.take(nxt).astype(object).to_numpy(),
                                                       np.nan), dtype=object),
                       "next_ts": th.next_of(pos, "ts"), "next_end": th.next_of(pos, "end")})
    dev = of_kind(ctx.trace.events, MEMCPY)
    dev = dev[dev["corr"] >= 0].drop_duplicates("corr")
    dev = dev[["corr", "name", "dur", "bytes"]].rename(columns={"name": "copy", "dur": "dev_dur"})
    out = rt.merge(dev, on="corr", how="inner")
    # `.to(device)` / `.item()` without non_blocking: the copy call is followed at once by a synchronize
    out["then_sync"] = out["next_name"].isin(SYNC_CALLS) & ((out["next_ts"] - out["end"]) <= SYNC_AFTER_COPY_NS)
    out["waited_until"] = np.where(out["then_sync"], out["next_end"].fillna(out["end"]), out["end"]).astype(np.int64)
    names = out["copy"].astype(str)
    parsed = {n: parse_memcpy(n) for n in names.unique()}  # once per distinct copy name
    for i, col in enumerate(("direction", "src", "dst")):
        out[col] = names.map({n: p[i] for n, p in parsed.items()})
    out["bytes"] = out["bytes"].clip(lower=0)
    return out


def _copies(ctx: Context) -> dict:
    c = copy_calls(ctx)
    h2d = c[c["direction"].eq("HtoD")]
    pageable = h2d[h2d["src"].eq("Pageable")]
    pinned = h2d[h2d["src"].eq("Pinned")]
    blocking = pinned[pinned["name"].astype(str).isin(BLOCKING_COPY_CALLS) | pinned["then_sync"]]
    n_pageable = len(pageable)
    return {
        "h2d_pageable_copies_per_step": ctx.per_step(n_pageable),
        "h2d_pageable_bytes_per_step": ctx.per_step(pageable["bytes"].sum()),
        "h2d_pageable_bytes_per_copy": round(float(pageable["bytes"].sum()) / n_pageable, 1) if n_pageable else 0.0,
        "h2d_pageable_us_per_step": ctx.per_step_us(pageable["dev_dur"].sum()),
        "h2d_pageable_host_us_per_step": ctx.per_step_us(iv.total(span(pageable))),
        "h2d_pinned_copies_per_step": ctx.per_step(len(pinned)),
        "h2d_pinned_blocking_copies_per_step": ctx.per_step(len(blocking)),
        "h2d_pinned_blocking_bytes_per_step": ctx.per_step(blocking["bytes"].sum()),
        "h2d_pinned_blocking_us_per_step": ctx.per_step_us(
            iv.total(iv.merge(blocking["ts"].to_numpy(np.int64), blocking["waited_until"].to_numpy(np.int64)))),
    }


def _device_reads(ctx: Context, op: str) -> pd.DataFrame:
    """The `op` events that read the device: a copy or synchronize runtime call runs inside them on
    the same thread. `.item()` on a CPU tensor (optimizer step counters, CPU metrics) reads nothing."""
    ops = ctx.kind(CPU_OP)
    ops = ops[ops["name"] == op].reset_index(drop=True)
    if ops.empty:
        return ops
    rt = ctx.kind(RUNTIME)
    rt = rt[rt["name"].isin(SYNC_CALLS) | name_mask(rt["name"], is_copy_call)]
    hit = innermost_enclosing(rt, ops, max_back=4)
    return ops.iloc[np.unique(hit[hit >= 0])]


def _syncs(ctx: Context) -> tuple[dict, dict]:
    """Reads of device values on the host: aten::item / _local_scalar_dense, plus blocking
    device-to-host copies outside them (`.cpu()`, `.numpy()`, `.tolist()` of larger tensors)."""
    item, lsd = _device_reads(ctx, "aten::item"), _device_reads(ctx, "aten::_local_scalar_dense")
    scalar = lsd if len(lsd) >= len(item) else item
    item_iv = span(pd.concat([item, lsd]))
    copies = copy_calls(ctx)
    dtoh = copies[copies["direction"].eq("DtoH")]
    blocking = dtoh[dtoh["name"].astype(str).isin(BLOCKING_COPY_CALLS) | dtoh["then_sync"] | dtoh["dst"].eq("Pageable")]
    tensor_reads = blocking[~iv.covers(item_iv, blocking["ts"].to_numpy(np.int64))]
    waited_until = tensor_reads["waited_until"].to_numpy(np.int64)
    reads = pd.concat([scalar[["ts", "pid", "tid"]], tensor_reads[["ts", "pid", "tid"]]], ignore_index=True)
    read_iv = iv.union(item_iv, iv.merge(tensor_reads["ts"].to_numpy(np.int64), waited_until))
    explicit = _explicit_syncs(ctx, read_iv)
    v = {
        "sync_item_calls_per_step": ctx.per_step(len(reads)),
        "sync_calls_per_step": ctx.per_step(int(ctx.kind(RUNTIME)["name"].isin(SYNC_CALLS).sum())),
        "sync_dtoh_copies_per_step": ctx.per_step(len(dtoh)),
        "sync_item_us_per_step": ctx.per_step_us(ctx.in_steps_ns(read_iv)),
        "sync_item_waited_calls_per_step": ctx.per_step(_waited(ctx, reads["ts"])),
        "sync_item_idle_us_per_step": ctx.per_step_us(_idle_ns(ctx, read_iv)),
        "sync_explicit_calls_per_step": ctx.per_step(len(explicit)),
        "sync_explicit_waited_calls_per_step": ctx.per_step(_waited(ctx, explicit["ts"])),
        "sync_explicit_idle_us_per_step": ctx.per_step_us(_idle_ns(ctx, span(explicit))),
    }
    return v, {"sync_sites": sync_sites(ctx.trace, reads, ctx.n_steps),
               "explicit_sync_sites": sync_sites(ctx.trace, explicit, ctx.n_steps)}


def _waited(ctx: Context, starts: pd.Series) -> int:
    """How many of the calls starting at `starts` found the device with work running or queued."""
    pending = ctx.breakdown.signals.get("device_pending")
    if not ctx.breakdown.has_device or pending is None:
        return 0
    return int(waited_at(starts.to_numpy(np.int64), pending).sum())


def _idle_ns(ctx: Context, waits: iv.Intervals) -> int:
    """Device idle time while the host waited on a busy device inside `waits`, and in the drain after a
    wait that emptied the device until new device work starts (the attribution's rule, syncwait.py)."""
    sig = ctx.breakdown.signals
    if not ctx.breakdown.has_device or "device_pending" not in sig:
        return 0
    busy = sig["device_any"]
    waited, drain = charge(blocking_calls(*waits), sig["device_pending"], busy, ctx.windows)
    lost = intersect(iv.union(waited, drain), ctx.windows)
    return max(iv.total(lost) - overlap_ns(lost, busy), 0)


def _explicit_syncs(ctx: Context, read_iv: iv.Intervals) -> pd.DataFrame:
    """Synchronize calls the step's own code makes (torch.cuda.synchronize(), event/stream
    .synchronize()): inside a step's host window, not part of a read, not right after a copy call.
    Outside the host windows they are the profiler's own (start/stop) and are left out."""
    th = _thread_runtime(ctx)
    syncs = th.rt.iloc[th.order[th.rt["name"].isin(SYNC_CALLS).to_numpy()[th.order] & ~th.after_copy]]
    ts = syncs["ts"].to_numpy(np.int64)
    return syncs[iv.covers(ctx.steps.host_windows(), ts) & iv.covers(ctx.windows, ts) & ~iv.covers(read_iv, ts)]


def _windows_named(ctx: Context, prefix: str) -> pd.DataFrame:
    return _named(ctx.kind(ANNOTATION, CPU_OP), lambda n: n.startswith(prefix))


def _optimizer(ctx: Context) -> dict:
    opt = _windows_named(ctx, OPTIMIZER_PREFIX)
    names = opt["name"].astype(str).str.slice(len(OPTIMIZER_PREFIX)).str.split(".").str[0]
    name = str(names.mode().iloc[0]) if len(names) else ""
    win = span(opt)
    kernels = launched_inside(ctx.trace.events, win)
    return {
        "optimizer_name": name,
        "optimizer_fused": "fused" in name.lower() or _fused_ops_inside(ctx, win),
        "optimizer_us_per_step": ctx.per_step_us(ctx.in_steps_ns(win)),
        "optimizer_kernels_per_step": ctx.per_step(int((kernels["kind"] == KERNEL).sum())),
    }


def _fused_ops_inside(ctx: Context, win: iv.Intervals) -> bool:
    """A _foreach_ / _fused_ event starts inside the optimizer windows (and a step window)."""
    ev = ctx.trace.events
    hit = np.flatnonzero(name_mask(ev["name"], lambda n: "_foreach_" in n or "_fused_" in n))
    ts = ev["ts"].to_numpy(np.int64)[hit]
    return bool((iv.covers(win, ts) & iv.covers(ctx.windows, ts)).any())


def _zero_grad(ctx: Context) -> dict:
    zg = _windows_named(ctx, ZERO_GRAD_PREFIX)
    win = span(zg)
    ops = ctx.kind(CPU_OP)
    fills = ops[ops["name"].isin(FILL_OPS)]
    fills = fills[iv.covers(win, fills["ts"].to_numpy(np.int64))]
    if len(fills):  # aten::zero_ calls aten::fill_: count the outermost of the pair once
        fills = fills[fills["name"] == ("aten::zero_" if (fills["name"] == "aten::zero_").any() else "aten::fill_")]
    dev = launched_inside(ctx.trace.events, win)
    memsets = ctx.kind(MEMSET)
    return {
        "zero_grad_calls_per_step": ctx.per_step(len(zg)),
        "zero_grad_us_per_step": ctx.per_step_us(ctx.in_steps_ns(win)),
        "zero_grad_fill_ops_per_step": ctx.per_step(len(fills)),
        "zero_grad_device_us_per_step": ctx.per_step_us(dev["dur"].sum()),
        "memsets_per_step": ctx.per_step(len(memsets)),
        "memset_us_per_step": ctx.per_step_us(memsets["dur"].sum()),
    }


def _comm(ctx: Context) -> dict:
    kern = ctx.kind(KERNEL)
    comm = kern[name_mask(kern["name"], is_comm)]
    comm_ns = ctx.in_steps_ns(span(comm))
    exposed = int(ctx.breakdown.steady()[0]["communication"].sum()) if ctx.breakdown.has_device else 0
    return {
        "comm_kernels_per_step": ctx.per_step(len(comm)),
        "comm_kernel_us_per_step": ctx.per_step_us(comm_ns),
        "comm_exposed_fraction": round(min(1.0, exposed / comm_ns), 4) if comm_ns else 0.0,
    }

