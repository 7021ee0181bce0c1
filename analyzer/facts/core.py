"""Facts: the named numbers (with units) and evidence tables that rules read.

Every fact has a snake_case name (`dataloader_share`, `h2d_pageable_bytes_per_step`, ...) so that a
rule condition is a plain Jinja2 expression over identifiers. `FACTS` is the registry: name -> (unit,
meaning); the engine rejects a rule that names anything else, and `compute_facts` must produce exactly
these names (a test holds it to that). Evidence tables (`sync_sites`, `gemm_dtypes`, ...) are lists of
dicts that rules can cite as locations or evidence.

Conventions: `*_share` is a fraction of the summed step time in [0, 1] unless the description says
otherwise; `*_per_step` is a total over the analysed steps divided by the number of steps; `*_us` is
microseconds. Facts are computed over events that start inside a step window. Nothing here loops
over events in Python: names are classified once per category and times are interval arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pandas as pd

from ..analysis.attribution import CATEGORIES, Breakdown
from ..analysis.measurement import measure
from ..analysis.perfsleuth_spans import own_ns
from ..analysis.phases import PARTIAL, WARMUP
from ..analysis.steps import Steps
from ..trace.model import KERNEL, Trace
from ..trace.selection import of_kind
from .common import Context, make_context
from .compile import COMPILE_FACTS, compile_facts
from .device import DEVICE_FACTS, device_facts
from .efficiency import EFFICIENCY_FACTS, efficiency_facts
from .generation import device_generation
from .host import HOST_FACTS, host_facts
from .host_time import HOST_TIME_FACTS, host_time_facts
from .limits import LIMIT_FACTS, limit_facts
from .loader import LOADER_FACTS, loader_facts
from .memory import MEMORY_FACTS, memory_facts
from .ops import OP_FACTS, op_facts
from .requirements import REQUIREMENTS  # noqa: F401  (re-exported: rules name them)
from .threads import THREAD_FACTS, thread_facts

CORE_FACTS = {
    "steps": ("count", "number of steady steps analysed (warm-up and partial steps left out)"),
    "step_source": ("text", "how steps were found: ProfilerStep, Optimizer.step or whole-trace"),
    "step_us": ("us", "mean steady step duration"),
    "step_median_us": ("us", "median steady step duration, perfsleuth's own ranges (perfsleuth#step) left out"),
    "complete_steps": ("count", "steps that ran to their end: the steady ones and the warm-up ones"),
    "warmup_steps": ("count", "leading steps classed warm-up (initialisation, autotuning, compilation, or far slower "
                              "than the rest; docs/attribution.md#steady-state)"),
    "step_max_us": ("us", "slowest complete step duration (warm-up included), perfsleuth's own ranges left out"),
    "step_max_ratio": ("ratio", "slowest complete step / median steady step (1.0 with fewer than two complete steps), "
                                "perfsleuth's own ranges left out of both"),
    "step_slowest_index": ("index", "position of the slowest step among the complete steps (0 = first)"),
    "step_slowest_is_warmup": ("bool", "the slowest complete step is a warm-up step"),
    "step_slowest_name": ("text", "the slowest complete step as the trace names it "
                                  "(ProfilerStep#8): the one step numbering of every output"),
    "machine_busy": ("bool", "the run found the machine busy (perfsleuth run's clock: steps waited "
                             "for a core, or other processes kept the cores busy; "
                             "analysis/measurement.py); false for other traces"),
    "machine_busy_reason": ("text", "why the run found the machine busy, with its numbers ('' when "
                                    "not busy)"),
    "step_excess_us_per_step": ("us/step", "mean over complete steps of max(0, step - median steady step): the time "
                                           "outlier steps add (perfsleuth's own ranges left out)"),
    "device_is_gpu": ("bool", "the trace has device work on a CUDA or ROCm GPU"),
    "device_type": ("text", "cuda, rocm, cpu or other"),
    "device_vendor": ("text", "nvidia, amd or unknown"),
    "device_compute_capability": ("capability", "compute capability of the first device (e.g. 8.0): from "
                                  "deviceProperties, else the device name or the kernel names "
                                  "(device_generation_source); 0 when unknown"),
    "device_generation": ("text", "GPU architecture (volta, turing, ampere, ada, hopper, blackwell; cdna2, cdna3 on "
                          "ROCm); '' when unknown"),
    "device_generation_source": ("text", "where the generation comes from: deviceProperties, device name, "
                                 "kernel names or unknown"),
    "device_generation_known": ("bool", "a GPU trace whose generation is known (always false on CPU-only traces)"),
    "device_busy_share": ("share", "share of step time the device runs anything"),
    "world_size": ("count", "ranks in the job (1 when the trace has no distributedInfo)"),
    "has_stacks": ("bool", "the trace, or the stacks window perfsleuth run recorded beside it, has python_function "
                           "events (with_stack=True): findings can name source lines"),
    "has_shapes": ("bool", "the trace, or the stacks window perfsleuth run recorded beside it, has cpu_op input "
                           "types (record_shapes=True)"),
}
for _c in CATEGORIES:
    CORE_FACTS[f"{_c}_share"] = ("share", f"share of step time attributed to {_c} (the breakdown)")
    CORE_FACTS[f"{_c}_us_per_step"] = ("us/step", f"time attributed to {_c} per step (the breakdown)")

FACTS: dict = {**CORE_FACTS, **HOST_FACTS, **DEVICE_FACTS, **OP_FACTS, **HOST_TIME_FACTS, **THREAD_FACTS,
               **COMPILE_FACTS, **EFFICIENCY_FACTS, **MEMORY_FACTS, **LOADER_FACTS,
               **LIMIT_FACTS}


@dataclass
class Facts:
    values: dict = field(default_factory=dict)  # fact name -> number / bool / str
    tables: dict = field(default_factory=dict)  # evidence table name -> list of dicts
    context: Optional[Context] = field(default=None, repr=False, compare=False)  # what they were computed from

    def __getitem__(self, name: str) -> Any:
        return self.values[name]


def compute_facts(trace: Trace, steps: Steps, breakdown: Breakdown, peak: Optional[dict] = None) -> Facts:
    """All facts in `FACTS` for one analysed trace, plus the evidence tables. `peak`: the device's peak
    the user gave (analysis/efficiency/peaks.user_peak), else looked up."""
    ctx = make_context(trace, steps, breakdown)
    ctx.peak = peak
    facts = Facts(context=ctx)
    for provider in (core_facts, host_facts, device_facts, op_facts, host_time_facts, thread_facts, compile_facts,
                     efficiency_facts, memory_facts, loader_facts, limit_facts):
        values, tables = provider(ctx)
        facts.values.update(values)
        facts.tables.update(tables)
    missing, extra = set(FACTS) - set(facts.values), set(facts.values) - set(FACTS)
    assert not missing and not extra, f"fact registry out of sync: missing {missing}, unregistered {extra}"
    return facts


def _device_vendor(trace: Trace) -> str:
    names = " ".join(d.name.lower() for d in trace.devices)
    if trace.device_type == "rocm" or any(w in names for w in ("amd", "instinct", "radeon")):
        return "amd"
    if trace.device_type == "cuda" or any(w in names for w in ("nvidia", "tesla")):
        return "nvidia"
    return "unknown"


def generation_of(ctx: Context) -> dict:
    """The device's generation (facts/generation.py), from its properties, name or kernel names."""
    def make() -> dict:
        names = of_kind(ctx.trace.events, KERNEL)["name"]
        kernel_names = [str(n) for n in pd.unique(names.astype(object))] if len(names) else []
        return device_generation(ctx.trace.devices, _device_vendor(ctx.trace), kernel_names)

    return ctx.cached("generation", make)


def measurement_of(ctx: Context) -> Optional[dict]:
    """The run's measurement (analysis/measurement.py), once per context: the busy facts and the forecaster
    (facts/forecasting.py) both read it."""
    return ctx.cached("measurement", lambda: measure(ctx.trace.run_metadata, ctx.steps))


def _busy(ctx: Context) -> dict:
    """Whether the run that recorded the trace found the machine busy (analysis/measurement.py)."""
    m = measurement_of(ctx)
    busy = bool(m and m.get("busy"))
    reason = str(m.get("busy_reason") or "") if busy else ""
    return {"machine_busy": busy, "machine_busy_reason": reason}


def core_facts(ctx: Context) -> tuple[dict, dict]:
    trace = ctx.trace
    st, busy_ns = ctx.breakdown.steady()
    dur = st["duration"].to_numpy(np.float64) / 1000.0
    every = ctx.breakdown.steps
    complete = every[every["phase"] != PARTIAL] if "phase" in every else every
    # Outliers are the program's: perfsleuth's own ranges (the profiler's step, run's bookkeeping: 9-14 ms in
    # the last profiled step of a 0.5 ms loop) are no step time.
    mine = own_ns(trace, st["start"], st["end"]) / 1000.0
    median = float(np.median(dur - mine)) if len(dur) else 0.0
    whole = (complete["duration"].to_numpy(np.float64) - own_ns(trace, complete["start"], complete["end"])) / 1000.0
    slowest = int(np.argmax(whole)) if len(whole) else 0
    has_device = ctx.breakdown.has_device
    gpu = bool(has_device and trace.device_type in ("cuda", "rocm"))
    gen = generation_of(ctx) if gpu else {"compute_capability": 0.0, "generation": "", "source": "unknown"}
    v = {
        "steps": ctx.n_steps,
        "step_source": ctx.steps.source,
        "step_us": round(float(dur.mean()), 3) if len(dur) else 0.0,
        "step_median_us": round(median, 3),
        "complete_steps": len(complete),
        "warmup_steps": int((complete["phase"] == WARMUP).sum()) if "phase" in complete else 0,
        "step_max_us": round(float(whole.max()), 3) if len(whole) else 0.0,
        "step_max_ratio": round(float(whole.max()) / median, 4) if len(whole) > 1 and median > 0 else 1.0,
        "step_slowest_index": slowest,
        "step_slowest_is_warmup": bool(len(whole) and "phase" in complete and complete["phase"].iloc[slowest] == WARMUP),
        "step_slowest_name": str(complete["name"].iloc[slowest])
        if len(whole) and "name" in complete else "",
        **_busy(ctx),
        "step_excess_us_per_step": round(float(np.clip(whole - median, 0, None).mean()), 3) if len(whole) else 0.0,
        "device_is_gpu": gpu,
        "device_type": trace.device_type,
        "device_vendor": _device_vendor(trace),
        "device_compute_capability": float(gen["compute_capability"]),
        "device_generation": gen["generation"],
        "device_generation_source": gen["source"],
        "device_generation_known": bool(gpu and gen["compute_capability"] > 0),
        "device_busy_share": ctx.share(busy_ns.sum()) if has_device else 0.0,
        "world_size": int(trace.world_size) if trace.world_size else 1,
        "has_stacks": bool(trace.has_stacks),
        "has_shapes": bool(trace.has_shapes),
    }
    for c in CATEGORIES:  # the steady steps' breakdown
        v[f"{c}_share"] = ctx.share(st[c].sum())
        v[f"{c}_us_per_step"] = ctx.per_step_us(st[c].sum())
    return v, {}

