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


def way_in(report, ctx: Context) -> None:
    """A way into the trace for the HTML page: each top kernel's launching op and source line, and
    the timeline of the median steady step (report/timeline.py) in `report.extra["timeline"]`."""
    from .timeline import timeline

    report.top_kernels = with_launches(ctx, report.top_kernels)
    section = timeline(report.trace, report.steps)
    if section is not None:
        report.extra["timeline"] = section


def with_launches(ctx: Context, rows: list) -> list:
    """`rows` (top_kernels) with `op`, `op_share` and `source` added (a new list; rows
    unchanged)."""
    if not rows:
        return rows
    kern = ctx.kind(*DEVICE_KINDS)
    wanted = {str(r.get("name")) for r in rows}
    kern = kern[kern["name"].isin(list(wanted)).to_numpy()]  # on the categorical codes
    if kern.empty:
        return [{**r, "op": None, "op_share": None, "source": None} for r in rows]
    link, ops = launching_ops(ctx, kern)
    op_row = link["op"].to_numpy(np.int64)
    names = (
        ops["name"].astype(str).to_numpy(dtype=object) if len(ops) else np.array([], dtype=object)
    )
    df = pd.DataFrame(
        {
            "kernel": kern["name"].astype(str).to_numpy(dtype=object),
            "dur": kern["dur"].to_numpy(np.int64),
            "op": np.where(op_row >= 0, names[np.clip(op_row, 0, None)] if len(names) else "", ""),
        }
    )
    df["source"] = _sources(ctx, kern)
    total = df.groupby("kernel")["dur"].sum()
    best_op = _best(df[df["op"] != ""], "op")
    best_src = _best(df[df["source"] != ""], "source")
    startup = startup_names(ctx.trace)
    out = []
    for r in rows:
        k = str(r.get("name"))
        op = best_op.get(k)
        frame = best_src[k][0] if k in best_src else None
        src = parse_frame(frame) if frame else None
        out.append(
            {
                **r,
                "op": op[0] if op else None,
                "op_share": round(op[1] / float(total[k]), 4) if op and total.get(k) else None,
                "source": {
                    "file": src[0],
                    "line": src[1],
                    "function": src[2],
                    "line_kind": "running" if frame in startup else "function",
                }
                if src
                else None,
            }
        )
    return out


def _best(df: pd.DataFrame, column: str) -> dict:
    """kernel name -> (the value of `column` with the most kernel time, that time in ns)."""
    if df.empty:
        return {}
    g = df.groupby(["kernel", column])["dur"].sum().reset_index()
    g = g.sort_values(["kernel", "dur", column], ascending=[True, False, True], kind="stable")
    first = g.drop_duplicates("kernel")
    return {k: (v, int(d)) for k, v, d in zip(first["kernel"], first[column], first["dur"])}


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
