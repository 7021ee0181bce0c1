"""Kernel -> launching op -> source line, for the rows of `top_kernels`.

A kernel's runtime call shares its correlation id; the call's External id (or, failing that, the
innermost op enclosing it on its thread) names the op that launched it (facts/device.launching_ops);
the first user frame enclosing the call (facts/locations.user_frames, traces recorded with stacks)
names the line. Each row gets the op and line that launched most of that kernel's time in the steady
steps: `op` (null where no instance could be linked), `op_share` (of the kernel's time launched by
that op), `source` ({file, line, function, line_kind} as a finding's locations; null without
stacks).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..facts.common import Context
from ..facts.device import launching_ops
from ..facts.locations import parse_frame, startup_names, user_frames
from ..trace.lookup import by_id
from ..trace.model import DEVICE_KINDS, RUNTIME
from ..trace.selection import of_kind
from .timeline import rows_of


def way_in(report, ctx: Context) -> None:
    """A way into the trace for the HTML page: each top kernel's launching op and source line, and
    the timeline of the median steady step (report/timeline.py) in `report.extra["timeline"]`."""
    from .timeline import timeline

    report.top_kernels = with_launches(ctx, report.top_kernels)
    section = timeline(report.trace, report.steps)
    if section is not None:
        report.extra["timeline"] = section


def sources_from(report, companion) -> None:
    """Kernels without a source line take the line their name has in the run's stacks window
    (`perfsleuth run` records Python stacks only there; facts/stacks.Companion), marked
    `"window": "stacks"`. Only when the analysis already loaded that window for the findings: the
    kernels' lines never cost a load of their own."""
    if not companion.loaded or all(r.get("source") for r in report.top_kernels):
        return
    theirs = companion.facts()
    if theirs is None or not theirs.context.trace.has_stacks:
        return
    found = {r["name"]: r.get("source") for r in with_launches(theirs.context, report.top_kernels)}
    report.top_kernels = [
        {**r, "source": {**found[r["name"]], "window": "stacks"}}
        if not r.get("source") and found.get(r["name"]) else r for r in report.top_kernels]


def with_launches(ctx: Context, rows: list) -> list:
    """`rows` (top_kernels) with `op`, `op_share` and `source` added (a new list; rows
    unchanged)."""
    if not rows:
        return rows
    kern = ctx.kind(*DEVICE_KINDS)
    kern = kern[kern["name"].isin([str(r.get("name")) for r in rows]).to_numpy()]  # on the codes
    if kern.empty:
        return [{**r, "op": None, "op_share": None, "source": None} for r in rows]
    link, ops = launching_ops(ctx, kern)
    op_row = link["op"].to_numpy(np.int64)
    kcode = kern["name"].cat.codes.to_numpy(np.int64)
    dur = kern["dur"].to_numpy(np.int64)
    op_codes = ops["name"].cat.codes.to_numpy(np.int64) if len(ops) else np.zeros(1, np.int64)
    ocode = np.where(op_row >= 0, op_codes[np.clip(op_row, 0, None)], -1)
    scode, frames = pd.factorize(_sources(ctx, kern), sort=True)  # '' (no frame) sorts first
    if len(frames) and frames[0] == "":
        scode = scode - 1
        frames = frames[1:]
    total = np.bincount(kcode, weights=dur, minlength=len(kern["name"].cat.categories))
    best_op, best_src = _best(kcode, ocode, dur), _best(kcode, scode, dur)
    code_of = {str(n): i for i, n in enumerate(kern["name"].cat.categories)}
    op_names = ops["name"].cat.categories if len(ops) else []
    startup = startup_names(ctx.trace)
    out = []
    for r in rows:
        k = code_of.get(str(r.get("name")), -1)
        op, src = best_op.get(k), best_src.get(k)
        frame = str(frames[src[0]]) if src else None
        where = parse_frame(frame) if frame else None
        out.append({**r, "op": str(op_names[op[0]]) if op else None,
                    "op_share": round(op[1] / float(total[k]), 4) if op and total[k] else None,
                    "source": {"file": where[0], "line": where[1], "function": where[2],
                               "line_kind": "running" if frame in startup else "function"}
                    if where else None})
    return out


def _best(key: np.ndarray, value: np.ndarray, dur: np.ndarray) -> dict:
    """key -> (the value (>= 0) with the most `dur` under that key, that time in ns); equal times:
    the lower value (names sort with their codes)."""
    keep = value >= 0
    if not keep.any():
        return {}
    pairs, inv = rows_of([key[keep], value[keep]])
    sums = np.bincount(inv, weights=dur[keep])
    order = np.lexsort((pairs[:, 1], -sums, pairs[:, 0]))  # by key, the most time first
    ordered = pairs[order, 0]
    first = order[np.r_[True, ordered[1:] != ordered[:-1]]]
    return {int(pairs[i, 0]): (int(pairs[i, 1]), int(sums[i])) for i in first}


def _sources(ctx: Context, kern: pd.DataFrame) -> np.ndarray:
    """The first user frame enclosing each kernel's runtime call ('' without stacks or a call)."""
    trace = ctx.trace
    out = np.full(len(kern), "", dtype=object)
    if not trace.has_stacks:
        return out
    rt = of_kind(trace.events, RUNTIME)
    row = by_id(trace.events, (RUNTIME,), "corr").find(kern["corr"].to_numpy(np.int64))
    found = np.flatnonzero(row >= 0)
    if not found.size:
        return out
    points = pd.DataFrame({c: rt[c].to_numpy(np.int64)[row[found]] for c in ("ts", "pid", "tid")})
    out[found] = user_frames(trace, points).to_numpy(dtype=object)
    return out
