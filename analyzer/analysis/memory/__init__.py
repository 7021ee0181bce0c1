"""Memory: takes the allocator's events of a trace recorded with `profile_memory=True` (or of the
memory companion a run names), gives per device the peaks, the per-step levels and their growth, what
holds the peak and what is kept across steps (docs/schema.md#memory).

`analyze_memory(trace, steps)` gives the report's `memory` section (summary.py) from the trace's own
`[memory]` / `[OutOfMemory]` events, else from the memory companion a run names beside it
(`perfsleuth.memory_trace`), with the categories at the peak the run measured (`perfsleuth.memory`);
`events` splits them per device, `levels` measures peaks, steps and growth, `attribution` names the
ops."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ...config import MEMORY_UNAVAILABLE
from ...errors import TraceError
from ...trace.model import Trace, load_trace
from ..steps import Steps, find_steps
from .summary import CATEGORY_KEYS, summarize

log = logging.getLogger(__name__)


@dataclass
class Memory:
    """The report's `memory` (None without allocator events) and `memory_unavailable` (why, then);
    the trace the events were read from (the analysed one or the run's memory companion) and its
    steps; per device the rows behind the tables (summary.Detail)."""

    section: Optional[dict] = None
    unavailable: Optional[str] = None
    trace: Optional[Trace] = None
    steps: Optional[Steps] = None
    details: list = field(default_factory=list)


def _companion(trace: Trace) -> Optional[Path]:
    """The memory companion the run names beside the trace (a bare file name), when it is there."""
    name = trace.run_metadata.get("memory_trace") if isinstance(trace.run_metadata, dict) else None
    if not isinstance(name, str) or not name or Path(name).name != name:
        return None
    path = Path(trace.path).parent / name
    return path if path.is_file() and str(path) != str(trace.path) else None


def analyze_memory(trace: Trace, steps: Steps) -> Memory:
    run = trace.run_metadata.get("memory") if isinstance(trace.run_metadata, dict) else None
    run = run if isinstance(run, dict) else {}
    source_trace, source_steps = trace, steps
    if trace.memory is None and (path := _companion(trace)) is not None:
        try:
            source_trace = load_trace(path)
            source_steps = find_steps(source_trace)
        except TraceError as exc:
            log.warning("memory: %s", exc)
            source_trace = trace
    section, _, details = summarize(source_trace, source_steps)
    if section is None:
        why = run.get("unavailable") if isinstance(run.get("unavailable"), str) else None
        if trace.memory_profiled:
            why = why or (
                "the trace was recorded with profile_memory=True but holds no allocator events"
            )
        return Memory(None, why or MEMORY_UNAVAILABLE)
    if source_trace is not trace:
        section["trace"] = Path(source_trace.path).name
    _join_run(section, run)
    return Memory(section, None, source_trace, source_steps, details)


def _join_run(section: dict, run: dict) -> None:
    """The run's categories at the peak onto the device it measured (`source` "run" then), and what
    it knew of parameters, gradients and optimizer state and what recording memory cost."""
    cats = run.get("categories_at_peak")
    device = run.get("device")
    if isinstance(cats, dict):
        for d in section["devices"]:
            if d["device"] == device:
                d["categories_at_peak"] = {k: int(cats.get(k) or 0) for k in CATEGORY_KEYS}
                d["categories_peak_bytes"] = run.get("peak_bytes")
                section["source"] = "run"
    extra = {k: run[k] for k in ("device", "source", "known", "cost") if run.get(k) is not None}
    if extra:
        section["run"] = extra


def out_of_memory_text(section: Optional[dict]) -> Optional[str]:
    """What the verdict says first when the trace holds [OutOfMemory] events (None without)."""
    hits = [
        (d["device"], o)
        for d in (section or {}).get("devices") or []
        for o in d.get("out_of_memory") or []
    ]
    if not hits:
        return None
    device, first = hits[0]
    op = f"in {first['op']} " if first.get("op") else ""
    n = len(hits)
    return (
        f"OUT OF MEMORY on {device}: an allocation of {first['bytes']:,} bytes {op}failed"
        f"{f' ({n} such events)' if n > 1 else ''}; the step times are those of a failing run."
    )
