"""Forecast models of device-side fixes: syncs and reads removed, pinned and non-blocking copies, AMP,
CUDA graphs, channels-last. Each edits a `whatif.Plan` and returns its assumptions (see forecast.py);
"low" is the pessimistic variant, "high" the optimistic one."""

from __future__ import annotations

import numpy as np

from ....trace.names import BLOCKING_COPY_CALLS, ITEM_OPS, SYNC_CALLS, parse_memcpy
from ... import intervals as iv
from ..registry import Inputs, NoForecast, model
from ..throughput import PCIE_GBPS, PINNED_EFFICIENCY, amp_ratio, generation, pcie_generation
from ..timeline import CALL, Timeline
from ..plan import Plan, act_device, act_host, drop_waits, scale_device

SYNC_AFTER_COPY_NS = 50_000.0  # a synchronize this soon after a copy call belongs to it
GRAPH_LAUNCH_NS = 10_000.0  # one cudaGraphLaunch per step replaces the launches of the captured region
GRAPH_KERNEL_GAP_NS = 1_000.0  # between the kernels of a graph on the device
KERNEL_FLOOR_NS = 2_000.0  # no kernel gets shorter than this (launch and tail of the smallest grids)


def _require_device(x: Inputs) -> None:
    if x.tl.n_nodes == 0:
        raise NoForecast("no device work in the replayed steps")


def _last_per_step(tl: Timeline, mask: np.ndarray) -> np.ndarray:
    """Of the items in `mask`, the last one of each step."""
    idx = np.flatnonzero(mask)
    keep = np.zeros_like(mask)
    if idx.size:
        last = np.r_[tl.step[idx][1:] != tl.step[idx][:-1], True]
        keep[idx[last]] = True
    return keep


def _node_of_item(tl: Timeline) -> np.ndarray:
    """For each item that launched device work itself: one node it launched (-1 otherwise)."""
    out = np.full(tl.n_items, -1)
    own = tl.d_call == tl.t[tl.d_item]
    out[tl.d_item[own]] = np.flatnonzero(own)
    return out


def _copy_kind(tl: Timeline) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per item: the direction, source and destination of the copy it launched ('' if none)."""
    node = _node_of_item(tl)
    parsed = {n: parse_memcpy(n) for n in set(tl.d_name.tolist())}
    names = np.where(node >= 0, tl.d_name[np.clip(node, 0, None)] if tl.n_nodes else "", "")
    cols = [np.array([(parsed.get(n) or (None,) * 3)[i] or "" for n in names], dtype=object) for i in range(3)]
    return cols[0], cols[1], cols[2]


def _then_sync(tl: Timeline, items: np.ndarray) -> np.ndarray:
    """The synchronize items that directly follow one of `items` (within 50 µs)."""
    prev = np.r_[False, items[:-1]]
    close = np.r_[False, (tl.t[1:] - tl.e[:-1]) <= SYNC_AFTER_COPY_NS]
    return prev & close & np.isin(tl.name, list(SYNC_CALLS))


def read_items(x: Inputs) -> np.ndarray:
    """Host items that read device values: the copy and synchronize calls inside aten::item /
    _local_scalar_dense, and blocking device-to-host copies (.cpu(), .tolist()) with their sync."""
    tl = x.tl
    ops = x.ops
    reads = ops[np.isin(ops["name"].to_numpy(), list(ITEM_OPS))]
    spans = iv.merge(reads["ts"].to_numpy(np.int64), reads["end"].to_numpy(np.int64))
    inside = iv.covers(spans, tl.t.astype(np.int64)) & (tl.kind == CALL)
    direction, _, dst = _copy_kind(tl)
    dtoh = (direction == "DtoH") & ((dst == "Pageable") | np.isin(tl.name, list(BLOCKING_COPY_CALLS)))
    dtoh |= (direction == "DtoH") & _then_sync(tl, direction == "DtoH")
    mask = inside | dtoh | _then_sync(tl, dtoh)
    waits = np.zeros(tl.n_items, bool)
    waits[tl.w_dst] = True
    return mask & waits


def _sync_removal(x: Inputs, p: Plan, variant: str, items: np.ndarray, what: str) -> dict:
    _require_device(x)
    if not items.any():
        raise NoForecast(f"no {what} waited for the device in the replayed steps")
    if variant == "low":  # still read once per step (metrics, a loss for logging)
        items = items & ~_last_per_step(x.tl, items)
    dropped = drop_waits(p, items)
    tl = x.tl
    depth = f"{tl.queue_depth} launches ({'read off the trace' if tl.queue_observed else 'assumed: none blocked'})"
    return {"removed": f"{dropped} wait(s) of {what} in {len(tl.steps)} step(s); the calls themselves stay",
            "launch_queue": f"the host runs ahead until the launch queue is full: {depth}",
            "pessimistic": "one read per step remains"}


@model("no-scalar-reads")
def no_scalar_reads(x: Inputs, p: Plan, variant: str) -> dict:
    return _sync_removal(x, p, variant, read_items(x), "scalar reads (.item(), .cpu(), .tolist())")


@model("no-explicit-sync")
def no_explicit_sync(x: Inputs, p: Plan, variant: str) -> dict:
    tl = x.tl
    direction, _, _ = _copy_kind(tl)
    is_copy = direction != ""
    after_copy = np.r_[False, is_copy[:-1]]
    syncs = (tl.kind == CALL) & np.isin(tl.name, list(SYNC_CALLS)) & ~after_copy & ~read_items(x)
    waits = np.zeros(tl.n_items, bool)
    waits[tl.w_dst] = True
    return _sync_removal(x, p, variant, syncs & waits, "explicit synchronize calls")


def _pinned_gbps(x: Inputs, variant: str) -> tuple[float, str]:
    tl = x.tl
    direction, src, _ = _copy_kind(tl)
    node = _node_of_item(tl)
    pinned = (direction == "HtoD") & (src == "Pinned") & (node >= 0)
    n = node[pinned]
    big = tl.d_bytes[n] >= 256 * 1024 if n.size else np.zeros(0, bool)
    if big.any() and variant != "high":
        gbps = float(np.median(tl.d_bytes[n][big] / np.maximum(tl.d_dur[n][big], 1.0)))
        return gbps, f"{gbps:.1f} GB/s, the pinned host-to-device copies of this trace"
    devices = x.trace.devices
    gen = pcie_generation((devices[0].compute_capability if devices else None) or x.compute_capability)
    if gen is None:
        raise NoForecast("the PCIe generation is unknown (no compute capability in the trace)")
    eff = 1.0 if variant == "high" else PINNED_EFFICIENCY
    gbps = PCIE_GBPS[gen] * eff
    return gbps, f"{gbps:.1f} GB/s ({eff:.0%} of PCIe {gen}.0 x16, the GPU generation's host link)"


@model("pinned-copies")
def pinned_copies(x: Inputs, p: Plan, variant: str) -> dict:
    _require_device(x)
    tl = x.tl
    direction, src, _ = _copy_kind(tl)
    items = (direction == "HtoD") & (src == "Pageable")
    if not items.any():
        raise NoForecast("no pageable host-to-device copies in the replayed steps")
    dropped = drop_waits(p, items | _then_sync(tl, items))
    node = _node_of_item(tl)[items]
    out = {"copies": f"{int(items.sum())} pageable copies become pinned, non-blocking ({dropped} host waits removed)"}
    if variant == "low":
        out["bandwidth"] = "unchanged (pessimistic: only the host stops waiting)"
        return out
    gbps, why = _pinned_gbps(x, variant)
    new = tl.d_bytes[node] / gbps  # bytes / (GB/s) = ns
    act_device(p, node)
    p.dur[node] = np.where(tl.d_bytes[node] > 0, np.minimum(p.dur[node], new), p.dur[node])
    out["bandwidth"] = why
    return out


@model("non-blocking-copies")
def non_blocking(x: Inputs, p: Plan, variant: str) -> dict:
    _require_device(x)
    tl = x.tl
    direction, src, _ = _copy_kind(tl)
    pinned = (direction == "HtoD") & (src == "Pinned")
    blocking = pinned & (np.isin(tl.name, list(BLOCKING_COPY_CALLS)) | np.r_[_then_sync(tl, pinned)[1:], False])
    if not blocking.any():
        raise NoForecast("no blocking pinned copies in the replayed steps")
    dropped = drop_waits(p, blocking | _then_sync(tl, blocking))
    return {"copies": f"{int(blocking.sum())} pinned copies issued with non_blocking=True ({dropped} host waits removed)"}


@model("amp")
def amp(x: Inputs, p: Plan, variant: str) -> dict:
    _require_device(x)
    trace = x.trace
    cc = trace.devices[0].compute_capability if trace.devices else None
    cc = cc or x.compute_capability
    vendor = "amd" if trace.device_type == "rocm" else "nvidia"
    row = generation(trace.device_name or "", cc, vendor)
    if row is None:
        raise NoForecast(f"no datasheet throughput for this device ({trace.device_name or 'unknown'}, "
                         f"compute capability {cc or 'unknown'})")
    cls = x.classes()
    gemm = np.isin(cls["family"], ("gemm", "conv"))
    out = {"device": row["name"]}
    floor = KERNEL_FLOOR_NS
    hit = 0
    for dtype in ("fp32", "tf32"):
        nodes = gemm & (cls["dtype"] == dtype)
        ratio = amp_ratio(row, dtype)
        if not nodes.any() or ratio is None:
            continue
        factor = 1.0 / (np.sqrt(ratio) if variant == "low" else ratio)
        scale_device(p, nodes, factor, floor_ns=floor)
        hit += int(nodes.sum())
        out[f"{dtype}_gemm"] = (f"{int(nodes.sum())} {dtype.upper()} GEMM/conv kernels run {ratio:.1f}x faster "
                                f"(BF16/FP16 dense peak / {dtype.upper()} peak; datasheet)")
    if not hit:
        raise NoForecast("no FP32/TF32 GEMM or convolution kernels in the replayed steps")
    out["other_kernels"] = "unchanged (memory-bound and elementwise kernels, copies, collectives)"
    out["pessimistic"] = "square root of the throughput ratio (GEMMs that are not compute-bound)"
    return out


@model("cuda-graphs")
def cuda_graphs(x: Inputs, p: Plan, variant: str) -> dict:
    """The launches and the host work between them disappear into one graph launch per step; kernel
    times stay. Calls that wait (syncs, blocking copies), DataLoader items and step ends keep theirs."""
    _require_device(x)
    tl = x.tl
    launches = (tl.kind == CALL) & (_node_of_item(tl) >= 0)
    waits = np.zeros(tl.n_items, bool)
    waits[tl.w_dst[p.waits]] = True
    captured = launches & ~waits
    if not captured.any():
        raise NoForecast("no asynchronous launches in the replayed steps")
    keep = {"low": 0.3, "central": 0.0, "high": 0.0}[variant]
    before = float(p.a[captured].sum())
    act_host(p, captured, p.a[captured])
    # Launch overhead is the dispatch between launches; a long gap before a launch is the user's own
    # Python (metrics, logging), which stays: at most the 90th percentile of the gaps goes.
    cap = float(np.percentile(tl.gap[captured], 90)) + tl.own[captured]
    p.a[captured] = np.maximum(p.a[captured] - cap * (1.0 - keep), 0.0)
    first = np.flatnonzero(captured)
    firsts = first[np.r_[True, tl.step[first][1:] != tl.step[first][:-1]]]
    p.a[firsts] += GRAPH_LAUNCH_NS
    graphed = captured[tl.d_item] & (tl.d_call == tl.t[tl.d_item])
    p.dur[graphed] += np.maximum(GRAPH_KERNEL_GAP_NS - tl.d_pre[graphed], 0.0)  # eager kernels had their own gap
    p.removed_ns += before - float(p.a[captured].sum())
    n_steps = len(tl.steps)
    gone = before - float(p.a[captured].sum())
    return {"captured": f"{int(captured.sum()) // max(n_steps, 1)} launches per step and the dispatch before each "
                        f"({gone / n_steps / 1000:.0f} µs per step) become one graph launch (~10 µs); gaps longer "
                        "than the 90th percentile keep their excess (the user's own Python)",
            "kernels": "kernel times unchanged; 1 µs between the kernels of the graph (or the gap they had)",
            "pessimistic": "30% of that host work stays (parts of the step cannot be captured)"}


@model("channels-last")
def channels_last(x: Inputs, p: Plan, variant: str) -> dict:
    _require_device(x)
    layout = x.classes()["family"] == "layout"
    if not layout.any():
        raise NoForecast("no layout transform kernels in the replayed steps")
    act_device(p, layout)
    p.dur[layout] *= 0.5 if variant == "low" else 0.0
    return {"layout_kernels": f"{int(layout.sum())} NCHW<->NHWC transform kernels disappear",
            "convolutions": "convolution kernel times unchanged", "pessimistic": "half of the transform time stays"}

