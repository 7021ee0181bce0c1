"""The `Report`: everything one analysis found, and its stable JSON form (`perfsleuth/report@1`).

Rendering (terminal, HTML, Markdown) works from `Report.to_dict()`; nothing here prints.
"""

from __future__ import annotations

import contextlib
import gc
import math
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ..analysis.attribution import Breakdown
from ..analysis.measurement import measure
from ..analysis.ranks.summary import RankSummary
from ..analysis.steps import Steps
from ..analysis.tables import time_share
from ..analysis.tables import us as _us
from ..config import CATEGORIES, MEMORY_UNAVAILABLE
from ..trace.companion import companion_of
from ..trace.model import Trace
from ..version import __version__

SCHEMA = "perfsleuth/report@1"
SET_SCHEMA = "perfsleuth/report-set@1"


@dataclass
class Report:
    trace: Trace
    steps: Steps
    breakdown: Breakdown
    verdict: str
    verdict_reason: str
    findings: list = field(default_factory=list)  # finding dicts, ordered by saving (engine/evaluate.order)
    top_kernels: list = field(default_factory=list)
    top_ops: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # optional analyses (e.g. HTA's), keyed by name
    degree: Optional[str] = None  # low | moderate | high: how much of the step the verdict's category takes
    verdict_text: str = ""  # the verdict in words: "moderately dataloader-bound: 14% of each step waits ..."
    # Stalls the verdict passed over because removing them is forecast to buy nothing (engine/reconsider.py):
    # [{"category", "share", "rule", "speedup", "kind"}]
    verdict_ruled_out: list = field(default_factory=list)
    # What verdict_reason says beyond verdict_text (engine/reconsider.py): the outputs print the
    # verdict once, then these (issue 37); None where the analysis did not check the verdict (a
    # report built by hand).
    verdict_notes: Optional[list] = None
    not_checked: list = field(default_factory=list)  # rules that lacked a fact: {rule, title, missing, reason}
    host_time: dict = field(default_factory=dict)  # host time's consumers and, when unexplained, the statement
    generation: dict = field(default_factory=dict)  # GPU generation: {name, compute_capability, source}
    # What the cross-rank analysis needs from this rank (analysis/ranks/summary.py); survives slim().
    rank_summary: Optional[RankSummary] = None
    # The allocator's events (analysis/memory/, docs/schema.md#memory): None with `memory_unavailable` saying why.
    memory: Optional[dict] = None
    memory_unavailable: Optional[str] = None

    def slim(self) -> "Report":
        """Drop the event table and interval signals (everything to_dict needs stays): cheap to send
        between processes."""
        self.trace.events = self.trace.events.iloc[:0]
        self.breakdown.signals = {}
        return self

    @property
    def warnings(self) -> list:
        """Each warning once, in the order first said (the trace's, the steps', the measurement's)."""
        m = self.measurement
        flag = [m["note"]] if m and (m.get("distorted") or m.get("busy")) and m.get("note") else []
        return list(dict.fromkeys(str(w) for w in [*self.trace.warnings, *self.steps.warnings, *flag]))

    @property
    def measurement(self) -> Optional[dict]:
        """Unprofiled against profiled step times, from the clock `perfsleuth run` recorded (None otherwise)."""
        return measure(self.trace.run_metadata, self.steps)

    @property
    def stacks_trace(self) -> Optional[str]:
        """The stacks companion beside the trace (source lines), when there is one."""
        path = companion_of(self.trace.path, self.trace.run_metadata)
        return str(path) if path else None

    @property
    def time_share(self) -> dict:
        return time_share(self.breakdown)

    @property
    def device_busy(self) -> Optional[float]:
        if not self.breakdown.has_device:
            return None
        st, busy = self.breakdown.steady()
        total = int(st["duration"].sum())
        return round(float(busy.sum()) / total, 4) if total else None

    def step_time_us(self) -> dict:
        """Over the steady steps."""
        d = self.breakdown.steady()[0]["duration"].to_numpy(np.float64) / 1000.0
        if not d.size:
            return {"median": None, "mean": None, "p90": None}
        return {"median": round(float(np.median(d)), 3), "mean": round(float(d.mean()), 3),
                "p90": round(float(np.percentile(d, 90)), 3)}

    def to_dict(self) -> dict:
        t = self.trace
        caps = [d.compute_capability for d in t.devices if d.compute_capability is not None]
        data = _clean({
            "schema": SCHEMA,
            "tool": {"name": "perfsleuth", "version": __version__},
            "trace": {"path": t.path, "device": t.device_name, "device_type": t.device_type,
                      "program": t.run_metadata.get("program"),
                      "compute_capability": caps[0] if caps else None, "rank": t.rank,
                      "world_size": t.world_size, "events": int(t.event_count),
                      "has_stacks": t.has_stacks, "has_shapes": t.has_shapes, "stacks_trace": self.stacks_trace,
                      "generation": self.generation.get("name"),
                      "generation_source": self.generation.get("source", "unknown"),
                      "compute_capability_inferred": self.generation.get("compute_capability")},
            "steps_source": self.steps.source,
            "steps": None,  # below: built from the columns (a trace may hold 300,000 steps)
            "summary": {"step_time_us": self.step_time_us(), "time_share": self.time_share,
                        "device_busy": self.device_busy, "steps": self.steps.counts()},
            "measurement": self.measurement,
            "memory": self.memory,
            "memory_unavailable": None if self.memory is not None else (self.memory_unavailable
                                                                        or MEMORY_UNAVAILABLE),
            "verdict": self.verdict,
            "degree": self.degree,
            "verdict_text": self.verdict_text,
            "verdict_reason": self.verdict_reason,
            "verdict_ruled_out": self.verdict_ruled_out,
            "verdict_notes": self.verdict_notes,
            "findings": self.findings,
            "not_checked": self.not_checked,
            "host_time": self.host_time,
            "top_kernels": self.top_kernels,
            "top_ops": self.top_ops,
            "warnings": self.warnings,
            **self.extra,
        })
        reasons = self.steps.frame["phase_reason"].to_numpy() if "phase_reason" in self.steps.frame else None
        data["steps"] = _step_dicts(self.breakdown.steps, reasons)
        return data


def _micros(column) -> list:
    """µs per row (rounded to 3 decimals as `_us`), as Python floats, a whole column at a time."""
    values = column.to_numpy()
    if values.dtype.kind in "iu":  # whole nanoseconds: n / 1000 is already the nearest float to 3 decimals
        return (values / 1000.0).tolist()
    return [_us(v) for v in values.tolist()]


def _step_dicts(frame, reasons=None) -> list:
    """The `steps` list of report@1, column-wise: building it row by row (DataFrame.to_dict, then
    `_clean` over every value) took most of `to_dict` on traces of many steps (docs/robustness.md).
    Each step carries its `phase`; the few set apart (warm-up, partial) also why (`phase_reason`)."""
    names = [str(n) for n in frame["name"].tolist()]
    per_category = [_micros(frame[c]) for c in CATEGORIES]
    phases = [str(p) for p in frame["phase"].tolist()] if "phase" in frame else ["steady"] * len(names)
    with _no_gc():  # hundreds of thousands of small acyclic dicts: the cyclic GC only slows their making
        out = [{"name": name, "start_us": start, "duration_us": duration, "time_us": dict(zip(CATEGORIES, cats)),
                "phase": phase}
               for name, start, duration, phase, *cats in zip(names, _micros(frame["start"]), _micros(frame["duration"]),
                                                               phases, *per_category)]
    if reasons is not None and len(reasons) == len(out):
        for i in np.flatnonzero(np.asarray(phases, dtype=object) != "steady"):  # the leading warm-up, a partial one
            out[i]["phase_reason"] = str(reasons[i])
    return out


@contextlib.contextmanager
def _no_gc():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _clean(obj):
    """JSON-safe: numpy scalars to Python, NaN/inf to None."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


@dataclass
class ReportSet:
    """Several traces (one per rank/worker file in a directory), one report each."""

    path: str
    reports: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # (path, problem) of files that were not traces
    # analysis.stragglers.CrossRank of the one job the traces form (docs/ranks.md), else None
    cross: Optional[Any] = None
    jobs: list = field(default_factory=list)  # a CrossRank per job of 2+ traces (analysis/ranks/jobs.py)
    warnings: list = field(default_factory=list)  # why traces were split into jobs or left out of one

    def to_dict(self) -> dict:
        """One job: its cross-rank report's keys (`ranks`, `collectives`, `stragglers`, `job`) beside
        `reports`; several: `jobs`, a list of those four-key objects."""
        out = {"schema": SET_SCHEMA, "tool": {"name": "perfsleuth", "version": __version__},
               "path": self.path, "reports": [r.to_dict() for r in self.reports],
               "skipped": [{"path": p, "problem": why} for p, why in self.skipped],
               "warnings": [str(w) for w in self.warnings]}
        if self.cross is not None:
            out.update(_clean(self.cross.to_dict()))
        elif len(self.jobs) > 1:
            out["jobs"] = [_clean(j.to_dict()) for j in self.jobs]
        return out
