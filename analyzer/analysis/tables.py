"""Tables derived from the steps: the share of each category, and the kernels and ops that take the
most time inside the steps."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..config import CATEGORIES
from ..trace.model import CPU_OP, DEVICE_KINDS, Trace
from ..trace.names import is_comm, is_memory_kernel, name_mask
from ..trace.selection import of_kind
from .attribution import Breakdown
from .steps import Steps


def us(ns) -> float:
    """ns -> µs with 3 decimals: how every report number is written (docs/schema.md)."""
    return round(float(ns) / 1000.0, 3)


_us = us


def time_share(b: Breakdown) -> dict:
    total = int(b.steps["duration"].sum())
    return {c: (round(int(b.steps[c].sum()) / total, 4) if total else 0.0) for c in CATEGORIES}


def _in_steps(ev: pd.DataFrame, steps: Steps) -> pd.DataFrame:
    fr = steps.frame
    if fr.empty:
        return ev.iloc[:0]
    return ev[(ev["ts"] >= int(fr["start"].min())) & (ev["ts"] < int(fr["end"].max()))]


def top_kernels(trace: Trace, steps: Steps, n: int) -> list:
    dev = _in_steps(of_kind(trace.events, *DEVICE_KINDS), steps)
    if dev.empty:
        return []
    total = float(dev["dur"].sum()) or 1.0
    g = dev.groupby("name", observed=True)["dur"].agg(["size", "sum", "mean"]).sort_values("sum", ascending=False)
    g = g.head(n)
    names = pd.Series(pd.Categorical(g.index.astype(str)))
    comm, mem = name_mask(names, is_comm), name_mask(names, is_memory_kernel)
    types = np.where(mem, "memory", np.where(comm, "communication", "compute"))
    return [{"name": str(name), "count": int(r["size"]), "total_us": _us(r["sum"]), "mean_us": _us(r["mean"]),
             "share": round(float(r["sum"]) / total, 4), "type": str(ty)}
            for (name, r), ty in zip(g.iterrows(), types)]


def top_ops(trace: Trace, steps: Steps, n: int) -> list:
    ops = _in_steps(of_kind(trace.events, CPU_OP), steps)
    if ops.empty:
        return []
    g = ops.groupby("name", observed=True)["dur"].agg(["size", "sum", "mean"]).sort_values("sum", ascending=False)
    return [{"name": str(name), "count": int(r["size"]), "total_us": _us(r["sum"]), "mean_us": _us(r["mean"])}
            for name, r in g.head(n).iterrows()]
