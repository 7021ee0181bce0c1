"""What the host does with its time: runtime and driver calls (device malloc/free, launches, syncs),
ops, Python between ops, garbage collection, and the user functions it all comes from.

"Host time" is the time the breakdown charged to `host` (analysis/attribution.py: the device idle
-- or, on a CPU-only trace, no op computing -- while the host runs something). It is split among its
consumers in this order, each taking what the ones before left: runtime/driver calls by name, then
outermost ops by name, then the rest, which is Python and framework code between ops (split by the
user function it runs in when the trace has python stacks).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..analysis import intervals as iv
from ..trace.model import ANNOTATION, PYTHON, RUNTIME
from ..trace.names import name_mask
from ..trace.selection import of_kind
from .common import Context, covered_ns, intersect, span, subtract
from .locations import location_rows, sites, startup_names, user_frames
from .ops import dispatched, top_ops

# Device memory allocation and release (not the stream-ordered *Async pool calls, which are cheap).
ALLOC_CALLS = re.compile(r"^(?:cuda|hip)(?:Malloc|Free|MallocManaged|ExtMallocWithFlags)$|^cuMem(?:Alloc|Free)(?:_v2)?$")
LAUNCH_CALLS = re.compile(r"LaunchKernel|LaunchCooperativeKernel|GraphLaunch|^cuLaunch")
GC_FRAMES = frozenset({"<built-in function collect>"})  # gc.collect() calls in python stacks
MAX_OPS_NAMED = 30  # op names whose host time is measured one by one (the largest by time)
TOP_CONSUMERS = 5

HOST_TIME_FACTS = {
    "runtime_calls_per_step": ("count/step", "runtime and driver API calls (cudaLaunchKernel, hipFree, ...)"),
    "runtime_us_per_step": ("us/step", "host time inside runtime and driver API calls"),
    "alloc_calls_per_step": ("count/step", "device memory allocations and frees (cudaMalloc, cudaFree, hipMalloc, "
                             "hipFree, cuMemAlloc, cuMemFree; not the *Async pool calls)"),
    "alloc_us_per_step": ("us/step", "host time inside those allocation and free calls"),
    "launch_calls_per_step": ("count/step", "kernel launch calls (cudaLaunchKernel, hipLaunchKernel, ...)"),
    "launch_us_per_step": ("us/step", "host time inside kernel launch calls"),
    "gc_calls_per_step": ("count/step", "gc.collect() calls seen in python stacks (automatic collections are not "
                          "recorded)"),
    "gc_us_per_step": ("us/step", "host time inside gc.collect() calls"),
    "host_python_us_per_step": ("us/step", "host time (the breakdown's) outside any op or runtime call: Python and "
                                "framework code between ops"),
    "host_top_share": ("fraction", "share of the host time taken by its largest consumer (host_consumers[0])"),
}


def _named(df: pd.DataFrame, rx) -> pd.DataFrame:
    return df[name_mask(df["name"], lambda n: bool(rx.search(n)))]


def main_thread(ctx: Context) -> tuple:
    """(pid, tid) of the thread that runs the steps (the ProfilerStep annotations), else the busiest."""
    return ctx.cached("main_thread", lambda: _main_thread(ctx))


def _main_thread(ctx: Context) -> tuple:
    ann = of_kind(ctx.trace.events, ANNOTATION)
    steps = ann[name_mask(ann["name"], lambda n: n.startswith("ProfilerStep#"))]
    src = steps if len(steps) else dispatched(ctx)
    if src.empty:
        src = of_kind(ctx.trace.events, PYTHON)
    if src.empty:
        return (-1, -1)
    top = src.groupby(["pid", "tid"])["dur"].sum().idxmax()
    return int(top[0]), int(top[1])


def time_by_user_frame(ctx: Context, host: iv.Intervals, *parts: iv.Intervals) -> list:
    """For each of `parts` (sub-sets of `host`; `host` itself when none): its ns per user frame of the
    main thread, as a frame indexed by frame name with columns count and ns. `host` is cut once at the
    main thread's python frame boundaries and each piece named once; parts weigh the pieces they cover."""
    parts = parts or (host,)
    empty = pd.DataFrame(columns=["count", "ns"])
    py = of_kind(ctx.trace.events, PYTHON)
    if py.empty or iv.total(host) == 0:
        return [empty for _ in parts]
    pid, tid = main_thread(ctx)
    py = py[(py["pid"] == pid) & (py["tid"] == tid)]
    cuts = iv.distinct(np.concatenate([host[0], host[1], py["ts"].to_numpy(np.int64), py["end"].to_numpy(np.int64)]))
    starts, ends = cuts[:-1], cuts[1:]
    keep = iv.covers(host, starts)
    starts, ends = starts[keep], ends[keep]
    frames = user_frames(ctx.trace, pd.DataFrame({"ts": starts, "pid": pid, "tid": tid})).to_numpy()
    named = frames != ""
    out = []
    for part in parts:
        ns = covered_ns(part, starts, ends).astype(np.float64)
        df = pd.DataFrame({"name": frames[named], "count": (ns[named] > 0).astype(np.int64), "ns": ns[named]})
        g = df.groupby("name").sum()
        out.append(g[g["ns"] > 0].sort_values("ns", ascending=False))
    return out


def host_time_facts(ctx: Context) -> tuple[dict, dict]:
    host = intersect(ctx.breakdown.signals.get("as_host", iv.EMPTY), ctx.windows)  # the steady steps
    host_ns = iv.total(host)
    rt = ctx.kind(RUNTIME)
    alloc, launch = _named(rt, ALLOC_CALLS), _named(rt, LAUNCH_CALLS)
    consumers = _by_name(ctx, rt, host, "runtime call")
    after_rt = subtract(host, span(rt))
    top = top_ops(ctx)
    consumers += _by_name(ctx, top, after_rt, "op")[:MAX_OPS_NAMED]
    rest = subtract(after_rt, span(top))
    python_ns = iv.total(rest)
    empty = pd.DataFrame(columns=["count", "ns"])
    hot, by_frame = time_by_user_frame(ctx, host, host, rest) if ctx.trace.has_stacks else (empty, empty)
    for name, r in by_frame.head(TOP_CONSUMERS).iterrows():
        consumers.append({"name": str(name), "kind": "python", "us_per_step": ctx.per_step_us(r["ns"]),
                          "share": ctx.share(r["ns"]), "calls_per_step": None, "max_call_us": None})
    unnamed = python_ns - int(by_frame["ns"].sum()) if len(by_frame) else python_ns
    if unnamed > 0:
        consumers.append({"name": "Python and framework code between ops", "kind": "python",
                          "us_per_step": ctx.per_step_us(unnamed), "share": ctx.share(unnamed),
                          "calls_per_step": None, "max_call_us": None})
    consumers.sort(key=lambda r: -r["us_per_step"])
    gc = of_kind(ctx.trace.events, PYTHON)
    gc = gc[gc["name"].isin(GC_FRAMES) & iv.covers(ctx.windows, gc["ts"].to_numpy(np.int64))]
    values = {
        "runtime_calls_per_step": ctx.per_step(len(rt)),
        "runtime_us_per_step": ctx.per_step_us(ctx.in_steps_ns(span(rt))),
        "alloc_calls_per_step": ctx.per_step(len(alloc)),
        "alloc_us_per_step": ctx.per_step_us(ctx.in_steps_ns(span(alloc))),
        "launch_calls_per_step": ctx.per_step(len(launch)),
        "launch_us_per_step": ctx.per_step_us(ctx.in_steps_ns(span(launch))),
        "gc_calls_per_step": ctx.per_step(len(gc)),
        "gc_us_per_step": ctx.per_step_us(ctx.in_steps_ns(span(gc))),
        "host_python_us_per_step": ctx.per_step_us(python_ns),
        "host_top_share": round(consumers[0]["us_per_step"] * ctx.n_steps * 1000.0 / host_ns, 4)
        if consumers and host_ns else 0.0,
    }
    return values, {"host_consumers": consumers[: 2 * TOP_CONSUMERS],
                    "host_sites": location_rows(hot, ctx.n_steps, startup_names(ctx.trace)) if len(hot) else [],
                    "alloc_sites": sites(ctx.trace, alloc, ctx.n_steps)}


def _by_name(ctx: Context, events: pd.DataFrame, where: iv.Intervals, kind: str) -> list:
    """Consumer rows: per event name, how much of `where` its events cover (largest first)."""
    if events.empty:
        return []
    ns = covered_ns(where, events["ts"].to_numpy(np.int64), events["end"].to_numpy(np.int64))
    names = events["name"]
    codes = names.cat.codes.to_numpy()
    if (codes < 0).any():  # a missing name (never in a decoded trace): group the texts themselves
        df = pd.DataFrame({"name": names.astype(str).to_numpy(), "ns": ns, "dur": events["dur"].to_numpy()})
        g = df.groupby("name").agg(ns=("ns", "sum"), calls=("ns", "size"), longest=("dur", "max"))
    else:  # by category code, no string hashing; then in the names' order, as grouping by them gives it
        df = pd.DataFrame({"code": codes, "ns": ns, "dur": events["dur"].to_numpy()})
        g = df.groupby("code").agg(ns=("ns", "sum"), calls=("ns", "size"), longest=("dur", "max"))
        g.index = pd.Index(names.cat.categories.take(g.index.to_numpy()).astype(str), name="name")
        g = g.sort_index()
    g = g[g["ns"] > 0].sort_values("ns", ascending=False)  # ties keep the names' order
    return [{"name": str(name), "kind": kind, "us_per_step": ctx.per_step_us(r["ns"]), "share": ctx.share(r["ns"]),
             "calls_per_step": ctx.per_step(r["calls"]), "max_call_us": round(float(r["longest"]) / 1000.0, 3)}
            for name, r in g.iterrows()]
