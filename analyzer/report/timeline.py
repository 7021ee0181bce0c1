"""The report's `timeline`: the events of one steady step (the median one), bounded, for the HTML
page.

Host threads and device streams are lanes; each event carries the breakdown category its kind and
name point to (the same seven as the time breakdown), its start within the step and its nesting
depth in its lane. Bounded for huge traces: events shorter than TIMELINE_MERGE_FRACTION of the step
are merged per lane and category (one block says how many), then at most TIMELINE_MAX_EVENTS of the
longest are kept, and lanes are at most TIMELINE_MAX_DEPTH deep; `merged`, `dropped` and `note` say
what was left out. Selecting and merging are vectorised; only the kept events (a bounded few) are
nested one by one. docs/schema.md#timeline documents the section.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from ..analysis.steps import STEP_RE, Steps
from ..config import (
    CATEGORIES,
    TIMELINE_MAX_DEPTH,
    TIMELINE_MAX_EVENTS,
    TIMELINE_MAX_NAME,
    TIMELINE_MERGE_FRACTION,
)
from ..trace.model import ANNOTATION, CPU_OP, KERNEL, MEMCPY, MEMSET, RUNTIME, Trace
from ..trace.names import (
    ITEM_OPS,
    OWN_SPAN,
    SYNC_CALLS,
    is_comm,
    is_copy_call,
    is_dataloader,
    is_memory_kernel,
    name_mask,
)
from ..trace.selection import of_kind
from .present import fmt_us

HOST_KINDS = (CPU_OP, RUNTIME, ANNOTATION)
DEVICE_LANE_KINDS = (KERNEL, MEMCPY, MEMSET)
_CAT = {c: i for i, c in enumerate(CATEGORIES)}


def median_step(steps: Steps) -> Optional[int]:
    """Row of `steps.frame` of the median steady step (the lower median by duration; the earlier of
    equal ones), None without a steady step."""
    fr = steps.frame
    rows = np.flatnonzero(steps.steady_mask())
    if not rows.size:
        return None
    dur = (fr["end"].to_numpy(np.int64) - fr["start"].to_numpy(np.int64))[rows]
    order = np.argsort(dur, kind="stable")
    return int(rows[order[(rows.size - 1) // 2]])


def categories(kind: np.ndarray, names: pd.Series) -> np.ndarray:
    """Each event's category index (into CATEGORIES): kernels `kernel`, collectives `communication`,
    copies and memsets `transfer`; on the host, sync calls and `.item()` `sync`, copy calls
    `transfer`, DataLoader spans `dataloader`, other ops and runtime calls `host`, annotations
    `other`."""
    out = np.full(len(kind), _CAT["other"], dtype=np.int8)
    comm = name_mask(names, is_comm)
    memk = name_mask(names, is_memory_kernel)
    sync = name_mask(names, lambda n: n in SYNC_CALLS or n in ITEM_OPS)
    copy = name_mask(names, is_copy_call)
    loader = name_mask(names, is_dataloader)
    host = np.isin(kind, (CPU_OP, RUNTIME))
    out[host] = _CAT["host"]
    out[host & copy] = _CAT["transfer"]
    out[host & sync] = _CAT["sync"]
    out[kind == KERNEL] = _CAT["kernel"]
    out[(kind == KERNEL) & comm] = _CAT["communication"]
    out[np.isin(kind, (MEMCPY, MEMSET)) | ((kind == KERNEL) & memk)] = _CAT["transfer"]
    out[loader & ~np.isin(kind, DEVICE_LANE_KINDS)] = _CAT["dataloader"]
    return out


def timeline(trace: Trace, steps: Steps) -> Optional[dict]:
    """The `timeline` section (None when there is no steady step)."""
    row = median_step(steps)
    if row is None:
        return None
    st = steps.frame.iloc[row]
    lo, hi = int(st["start"]), int(st["end"])
    ev = of_kind(trace.events, *HOST_KINDS, *DEVICE_LANE_KINDS)
    ts, end = ev["ts"].to_numpy(np.int64), ev["end"].to_numpy(np.int64)
    inside = (ts < hi) & (end > lo)
    ev = ev[inside]
    keep = ~name_mask(ev["name"], lambda n: bool(STEP_RE.match(n)) or n.startswith(OWN_SPAN))
    ev = ev[keep]
    frame = pd.DataFrame(
        {
            "kind": ev["kind"].to_numpy(),
            "pid": ev["pid"].to_numpy(np.int64),
            "tid": ev["tid"].to_numpy(np.int64),
            "start": np.maximum(ev["ts"].to_numpy(np.int64), lo) - lo,
            "end": np.minimum(ev["end"].to_numpy(np.int64), hi) - lo,
            "cat": categories(ev["kind"].to_numpy(), ev["name"]),
            "name": ev["name"].astype(str).to_numpy(dtype=object),
            "count": 1,
        }
    )
    frame["device"] = np.isin(frame["kind"].to_numpy(), DEVICE_LANE_KINDS)
    lanes, frame["lane"] = _lanes(frame, trace)
    total = len(frame)
    threshold = max(1, int((hi - lo) * TIMELINE_MERGE_FRACTION))
    frame = _merge_tiny(frame, threshold)
    merged_blocks = int((frame["count"] > 1).sum())
    dropped = {"events": 0, "us": 0.0}
    if len(frame) > TIMELINE_MAX_EVENTS:
        order = np.argsort(-(frame["end"] - frame["start"]).to_numpy(), kind="stable")
        cut = frame.iloc[order[TIMELINE_MAX_EVENTS:]]
        dropped = {
            "events": int(cut["count"].sum()),
            "us": _us(int((cut["end"] - cut["start"]).sum())),
        }
        frame = frame.iloc[np.sort(order[:TIMELINE_MAX_EVENTS])]
    events, deep = _nest(frame)
    if deep:
        dropped = {"events": dropped["events"] + deep[0], "us": round(dropped["us"] + deep[1], 3)}
    for lane in lanes:
        lane["depth"] = 1 + max(
            (e["depth"] for e in events if e["lane"] == lane["index"]), default=-1
        )
    name = str(st["name"])
    return {
        "step": name,
        "step_row": row,
        "start_us": _us(lo),
        "duration_us": _us(hi - lo),
        "steady_steps": int(steps.steady_mask().sum()),
        "lanes": [{k: v for k, v in lane.items() if k != "index"} for lane in lanes],
        "events": events,
        "events_in_step": total,
        "merge_under_us": _us(threshold),
        "merged_blocks": merged_blocks,
        "dropped": dropped,
        "note": _note(total, threshold, merged_blocks, dropped),
    }


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def _lanes(frame: pd.DataFrame, trace: Trace) -> tuple[list[dict], np.ndarray]:
    """Lanes: host threads first, then device streams, each by (pid, tid); and each event's lane."""
    cols = [frame[c].to_numpy(np.int64) for c in ("device", "pid", "tid")]
    keys, lane = rows_of(cols)  # sorted by (device, pid, tid)
    lanes = []
    for i, (device, pid, tid) in enumerate(keys.tolist()):
        label = trace.thread_names.get((pid, tid)) if not device else None
        # a stream by its device; a thread by the trace's name for it, else its id
        name = f"device {pid} · stream {tid}" if device else f"{label or f'thread {tid}'} · pid {pid}"
        lanes.append({"index": i, "name": name, "kind": "device" if device else "host",
                      "pid": pid, "tid": tid})
    return lanes, lane.reshape(-1).astype(np.int64)


def rows_of(cols: list) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of the integer columns `cols` (sorted, as a 2-D array) and each row's index
    in them: np.unique(axis=0) without its slow sort of rows as opaque bytes."""
    order = np.lexsort(cols[::-1])
    ordered = [c[order] for c in cols]
    new = np.ones(len(order), dtype=bool)
    if len(order):
        new[1:] = np.any([c[1:] != c[:-1] for c in ordered], axis=0)
    ids = np.empty(len(order), dtype=np.int64)
    ids[order] = np.cumsum(new) - 1
    return np.stack([c[new] for c in ordered], axis=1), ids


def _merge_tiny(frame: pd.DataFrame, threshold: int) -> pd.DataFrame:
    """Events shorter than `threshold` ns become blocks: consecutive ones of one lane and category,
    less than `threshold` apart, are one event named for how many it holds."""
    tiny = np.flatnonzero((frame["end"] - frame["start"]).to_numpy() < threshold)
    if not tiny.size:
        return frame
    col = {c: frame[c].to_numpy()[tiny] for c in ("lane", "cat", "start", "end", "count")}
    order = np.lexsort((col["start"], col["cat"], col["lane"]))  # by lane, category, start
    lane, cat, start, end, count = (col[c][order] for c in ("lane", "cat", "start", "end", "count"))
    run = np.ones(len(order), dtype=bool)  # the first event of a lane and category
    run[1:] = (lane[1:] != lane[:-1]) | (cat[1:] != cat[:-1])
    offset = (np.cumsum(run) - 1) * (int(end.max()) + 1)
    reach = np.maximum.accumulate(end + offset) - offset  # the latest end so far, per run
    new = run.copy()
    new[1:] |= start[1:] - reach[:-1] >= threshold
    at = np.flatnonzero(new)
    blocks = frame.iloc[tiny[order[at]]].copy()
    blocks["start"] = np.minimum.reduceat(start, at)
    blocks["end"] = np.maximum.reduceat(end, at)
    blocks["count"] = np.add.reduceat(count, at)
    many = blocks["count"].to_numpy() > 1
    label = f"events under {fmt_us(_us(threshold))} each, merged"
    blocks.loc[many, "name"] = [f"{n} {label}" for n in blocks.loc[many, "count"].tolist()]
    rest = np.ones(len(frame), dtype=bool)
    rest[tiny] = False
    out = pd.concat([frame[rest], blocks], ignore_index=True)
    return out.sort_values(["lane", "start"], kind="stable", ignore_index=True)


def _nest(frame: pd.DataFrame) -> tuple[list[dict], tuple]:
    """The kept events as dicts with their depth in the lane (an event inside a longer one is one
    level deeper); those deeper than TIMELINE_MAX_DEPTH are left out: (their count, their µs)."""
    frame = frame.assign(length=frame["end"] - frame["start"]).sort_values(
        ["lane", "start", "length"], ascending=[True, True, False], kind="stable"
    )
    out, deep_n, deep_ns = [], 0, 0
    stack: list[int] = []
    lane_now = None
    for lane, start, end, cat, name, count in zip(
        frame["lane"].tolist(),
        frame["start"].tolist(),
        frame["end"].tolist(),
        frame["cat"].tolist(),
        frame["name"].tolist(),
        frame["count"].tolist(),
    ):
        if lane != lane_now:
            stack, lane_now = [], lane
        while stack and stack[-1] <= start:
            stack.pop()
        if len(stack) >= TIMELINE_MAX_DEPTH:
            deep_n, deep_ns = deep_n + count, deep_ns + end - start
            continue
        out.append(
            {
                "lane": int(lane),
                "depth": len(stack),
                "start_us": _us(start),
                "dur_us": _us(end - start),
                "name": name[:TIMELINE_MAX_NAME],
                "category": CATEGORIES[int(cat)],
                "count": int(count),
            }
        )
        stack.append(end)
    return out, ((deep_n, _us(deep_ns)) if deep_n else ())


def _note(total: int, threshold: int, blocks: int, dropped: dict) -> str:
    parts = [f"{total:,} events in the step"]
    if blocks:
        parts.append(f"events under {fmt_us(_us(threshold))} merged into {blocks:,} "
                     f"block{'s' if blocks != 1 else ''} per lane and category")
    if dropped["events"]:
        parts.append(
            f"{dropped['events']:,} events (their durations total {fmt_us(dropped['us'])}) "
            f"left out: only the {TIMELINE_MAX_EVENTS} longest are drawn, at most "
            f"{TIMELINE_MAX_DEPTH} levels deep"
        )
    return "; ".join(parts)
