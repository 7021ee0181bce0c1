"""What the replay needs from the facts layer: the steps the facts use, and the kernel classes.

`make_forecaster` builds an `analysis.forecast.Forecaster` from a facts `Context`: the replay runs on
the same steps as the shares and facts (the steady ones, once warm-up is told apart), and a device
node's family (gemm, conv, layout, ...) and dtype come from the same rules as the `amp` and
`channels-last` facts (`facts/device.py`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from ..analysis.forecast.forecaster import Forecaster
from ..analysis.machine import machine_facts
from ..analysis.forecast.timeline import Timeline
from .common import Context
from .core import measurement_of
from .device import _map_categories, dtype_from_name, gemm_dtypes, kernel_family


def steps_frame(ctx: Context) -> pd.DataFrame:
    """The steps the facts use, with their host windows (name, start, end, duration, host_start, host_end)."""
    st = ctx.breakdown.steady()[0][["name", "start", "end", "duration"]]  # warm-up and partial steps left out
    host = ctx.steps.frame[["name", "host_start", "host_end"]].drop_duplicates("name")
    return st.merge(host, on="name", how="left").dropna(subset=["host_start", "host_end"]).astype(
        {"host_start": np.int64, "host_end": np.int64})


def node_classes(ctx: Context, tl: Timeline) -> dict:
    """Per device node of the timeline: kernel family, and dtype (the launching op's input type when
    recorded, else the kernel name), as `device_facts` decides them."""
    names = pd.Series(tl.d_name, dtype="category")
    family = _map_categories(names, kernel_family)
    dtype = _map_categories(names, dtype_from_name)
    gemm = np.isin(family, ("gemm", "conv"))
    if gemm.any():
        frame = pd.DataFrame({"name": names[gemm].astype("category"), "corr": tl.d_corr[gemm]})
        dtype[gemm], _ = gemm_dtypes(ctx, frame)
    return {"family": family, "dtype": dtype}


def make_forecaster(ctx: Context, cpus: Optional[float] = None, values: Optional[dict] = None) -> Forecaster:
    """`values`: the facts, for the device's compute capability where the trace lists none (inferred
    from kernel names)."""
    f = Forecaster(ctx.trace, steps_frame(ctx), machine_facts(ctx.trace.run_metadata, cpus),
                   node_class=lambda tl: node_classes(ctx, tl))
    if f.inputs is not None and values:
        f.inputs.compute_capability = float(values.get("device_compute_capability") or 0.0) or None
        busy = values.get("machine_busy")
        f.inputs.machine_busy = str(values.get("machine_busy_reason") or "") if busy else ""
        if values.get("loader_cause_source") == "the stacks window":  # no stacks of its own
            f.inputs.loader_split = {k: values[k] for k in ("loader_cause", "loader_cause_share")}
    f.distortion = distortion(measurement_of(ctx))
    return f


def distortion(m: Optional[dict]) -> Optional[tuple[float, float]]:
    """(profiled, unprofiled) median steps in µs of a run whose profiled steps the profiler slowed beyond their
    noise (analysis/measurement.py: never on a machine it found busy); None otherwise."""
    if not m or not m.get("distorted"):
        return None
    prof, unprof = ((m.get(k) or {}).get("median") for k in ("profiled_step_us", "unprofiled_step_us"))
    ok = all(isinstance(v, (int, float)) and v > 0 for v in (prof, unprof))
    return (float(prof), float(unprof)) if ok else None
