"""Load a PyTorch profiler (Kineto) Chrome trace into one columnar `Trace`.

Decoding lives in kineto.py (typed msgspec Structs, chunked: only the fields the analysis reads are
materialised); this module turns the column chunks into the event table and the trace metadata.

Times are int64 nanoseconds relative to the earliest complete event (`t0_us` keeps the origin), so
interval arithmetic downstream is exact. Event kinds are normalised across trace ages and vendors
(`Kernel`/`kernel`, `Runtime`/`cuda_runtime`/`cuda_driver`, HIP names, ...).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from ..errors import TraceError
from . import devices, files, kineto, reading, sources, times, validate
from .memory import MemoryEvents, assemble as assemble_memory
from .memory_child import FAILED as MEMORY_FAILED, MemoryChild
# the normalised event kinds, defined with the decoding workers' transform (no pandas there)
from .columns import (ANNOTATION, CPU_OP, DEVICE_KINDS, DEVICE_SYNC, GPU_ANNOTATION, KERNEL,  # noqa: F401
                      KIND_NAMES, MEMCPY, MEMSET, OTHER, PYTHON, RUNTIME, FLOAT_COLUMNS)
from .hugepages import release_free_memory

log = logging.getLogger(__name__)

TRACE_SUFFIXES = (".json", ".json.gz", ".json.bz2", ".json.xz")
TRIM_AFTER_ENTRIES = 200_000  # a load this large leaves tens of MB of freed heap (hugepages.release_free_memory)


# --- the model ------------------------------------------------------------------------------------
@dataclass
class Device:
    name: str
    compute_major: Optional[int] = None
    compute_minor: Optional[int] = None
    memory_bytes: Optional[int] = None
    num_sms: Optional[int] = None
    id: Optional[int] = None  # deviceProperties' `id` (the allocator events' `Device Id`)

    @property
    def compute_capability(self) -> Optional[float]:
        if self.compute_major is None:
            return None
        return float(f"{self.compute_major}.{self.compute_minor or 0}")


class PendingMemory:
    """The allocator's events a MemoryChild decodes, assembled when first read (Trace.memory)."""

    def __init__(self, child: MemoryChild, t0_us: float, warnings: list):
        self.child, self.t0_us, self.warnings = child, t0_us, warnings

    def resolve(self) -> Optional[MemoryEvents]:
        columns = self.child.result()
        if columns is None:
            self.warnings.append(MEMORY_FAILED)
            return None
        return assemble_memory([columns] if columns else [], self.t0_us)

    def __reduce__(self):  # a pickled Trace carries the events, not the process
        return _identity, (self.resolve(),)


def _identity(value):
    return value


class _Memory:
    """`Trace.memory`: a data descriptor (a dataclass field's default), so that a PendingMemory set
    there is resolved on the first read and replaced by what it gives."""

    def __set_name__(self, owner, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return None  # the field's default
        value = obj.__dict__.get(self.slot)
        if isinstance(value, PendingMemory):
            value = obj.__dict__[self.slot] = value.resolve()
        return value

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot] = value


@dataclass
class Trace:
    """One trace file, parsed once. `events` has one row per complete ("X") event:

    ts, end, dur -- int64 ns relative to `t0_us`;  kind -- int8 code into KIND_NAMES;
    name -- categorical;  pid, tid -- int64 (-1 where the trace used a string);
    corr, ext -- correlation / External id (-1 when absent);  bytes -- int64 (-1 when absent);
    py_id, py_parent -- python_function tree links (-1 when absent; int8 -1 throughout when the trace has none,
    as seq and peer);  in_type -- categorical
    "Input type" of cpu ops joined with "," ("" when not recorded);  in_shape -- categorical "Input Dims"
    and "Concrete Inputs" of cpu ops as raw JSON joined by "\\x1f" ("" when not recorded);  pg -- categorical process group
    name of collectives ("" when absent);  seq -- their sequence number in it (-1 when absent);
    peer -- of a send or recv, the other rank in that group ("Dst Rank" / "Src Rank"; -1 when absent).
    """

    path: str
    events: pd.DataFrame
    t0_us: float = 0.0
    raw_event_count: int = 0  # entries of traceEvents, all phases
    event_count: int = 0  # complete events analysed (kept when `events` is dropped after analysis)
    devices: list = field(default_factory=list)
    device_type: str = "cpu"  # cuda | rocm | mtia | cpu | other
    rank: Optional[int] = None
    world_size: Optional[int] = None
    backend: Optional[str] = None
    # distributedInfo.pg_config: process group name -> the global ranks in it ({} when not recorded)
    process_groups: dict = field(default_factory=dict)
    thread_names: dict = field(default_factory=dict)
    has_stacks: bool = False
    time_resolution_ns: int = 0  # the finest difference the timestamps carry as read (_resolution)
    device_categories: dict = field(default_factory=dict)  # events of the device categories read apart (MTIA, ...)
    unread_device: Optional[str] = None  # the device whose activity the trace does not hold, said (devices.py)
    has_shapes: bool = False
    warnings: list = field(default_factory=list)
    # What `perfsleuth run` / `profile()` recorded about the machine and the DataLoaders (the trace's
    # top-level `perfsleuth` object, see record/trace_metadata.py, with the keys of `perfsleuth_final` that `run`
    # wrote when it finished the file after the window); {} for other traces.
    run_metadata: dict = field(default_factory=dict)
    # The allocator's events ([memory], [OutOfMemory]; trace/memory.py), None when the trace has none;
    # memory_profiled: the trace's own `profile_memory` option (None when it does not say).
    memory: Optional[MemoryEvents] = _Memory()  # type: ignore[assignment]  # a PendingMemory until first read
    memory_profiled: Optional[bool] = None

    @property
    def device_name(self) -> Optional[str]:
        names = sorted({d.name for d in self.devices if d.name})
        return ", ".join(names) if names else None

    def kind(self, *kinds: int) -> pd.DataFrame:
        return self.events[self.events["kind"].isin(kinds)]


# --- loading --------------------------------------------------------------------------------------
def find_trace_files(path: Path) -> list[Path]:
    """Trace files under a directory (tensorboard_trace_handler output: one per worker/rank)."""
    return scan_trace_files(path)[0]


def scan_trace_files(path: Path) -> tuple[list[Path], list[tuple[str, str]]]:
    """(trace files under a directory, sorted; (folder, problem) for each folder that could not be
    listed). Every entry named like a trace is returned, whatever it is: reading it says what is wrong
    (a FIFO, a link loop, no permission), so nothing is skipped silently."""
    found: list[Path] = []
    problems: list[tuple[str, str]] = []

    def unlisted(exc: OSError) -> None:
        problems.append((str(exc.filename), f"cannot list this folder: {files.describe_os_error(exc.filename, exc)}"))

    for folder, subfolders, names in os.walk(path, onerror=unlisted):
        subfolders.sort()
        found += [Path(folder) / n for n in names if n.endswith(TRACE_SUFFIXES)]
    from .companion import without_companions  # a run's stacks companion belongs to its main trace

    return without_companions(sorted(found)), problems


def load_trace(path: Union[str, os.PathLike], progress: Optional[Callable[[int, int], None]] = None,
               jobs: int = 1) -> Trace:
    """Parse one trace file (.json or .json.gz; gzip is detected by content).

    `progress(done, total)` is called after each chunk of events (for a progress bar; only the ratio
    means anything). `jobs` > 1 decodes the chunks of a large trace in that many forked processes."""
    return build_trace(*reading.read_events(path, progress, jobs))


def build_trace(path, header: kineto.Header, outs: list, entries: int, warnings: list[str]) -> Trace:
    """The Trace from a decoded document: its header and the decoded pieces (`outs`, consumed)."""
    # absolute: a report read later, from another folder, still names the right file
    trace = Trace(path=sources.absolute(path), events=_empty_frame(), raw_event_count=entries, warnings=warnings)
    _read_header(trace, header)
    memory = [out[0].pop("memory", None) for out in outs]
    child = next((m for m in memory if isinstance(m, MemoryChild)), None)  # decoded apart (memory_child.py)
    frames = [_take_chunk(out, trace) for out in outs]
    outs.clear()  # the caller's list too: the decoded pieces go before the columns are assembled
    trace.events = _assemble(frames, trace)
    trace.memory = PendingMemory(child, trace.t0_us, trace.warnings) if child else assemble_memory(memory, trace.t0_us)
    if entries >= TRIM_AFTER_ENTRIES:
        release_free_memory()  # the decode's freed chunks, before the analysis builds on top of them
    if trace.events.empty:
        if any("not event objects" in w for w in trace.warnings):
            raise TraceError(path, "not a PyTorch profiler trace (traceEvents holds no event objects)")
        raise TraceError(path, "the trace has no complete events to analyze")
    trace.event_count = len(trace.events)
    trace.has_stacks = bool((trace.events["kind"] == PYTHON).any())
    trace.has_shapes = bool((trace.events["in_type"].cat.codes > 0).any())
    _read_devices(trace, header)
    return trace


def _int_or_none(v) -> Optional[int]:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and abs(v) < 2**63:
        return int(v)
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return None
    return None


def _read_header(trace: Trace, header: kineto.Header) -> None:
    props = header.deviceProperties if isinstance(header.deviceProperties, list) else []
    for p in props:
        if not isinstance(p, dict):
            continue
        name = p.get("name")
        trace.devices.append(Device(
            name=str(name) if name is not None else "unknown device",
            compute_major=_int_or_none(p.get("computeMajor")), compute_minor=_int_or_none(p.get("computeMinor")),
            memory_bytes=_int_or_none(p.get("totalGlobalMem")), num_sms=_int_or_none(p.get("numSms")),
            id=_int_or_none(p.get("id"))))
    meta, final = header.perfsleuth, header.perfsleuth_final  # the values measured after the window win
    merged = {**meta, **final} if isinstance(meta, dict) and isinstance(final, dict) else meta
    trace.run_metadata = validate.run_metadata(merged, trace.warnings)
    if header.profile_memory is not None:
        trace.memory_profiled = bool(header.profile_memory)
    dist = header.distributedInfo
    if isinstance(dist, dict):
        trace.rank = _int_or_none(dist.get("rank"))
        trace.world_size = _int_or_none(dist.get("world_size"))
        trace.backend = str(dist["backend"]) if dist.get("backend") is not None else None
        trace.process_groups = _process_groups(dist.get("pg_config"))


def _process_groups(config) -> dict:
    """{pg_name: [ranks]} from distributedInfo.pg_config (a list of {pg_name, ranks, ...})."""
    out: dict = {}
    for g in config if isinstance(config, list) else []:
        if isinstance(g, dict) and g.get("pg_name") is not None and isinstance(g.get("ranks"), list):
            out[str(g["pg_name"])] = [r for r in (_int_or_none(x) for x in g["ranks"]) if r is not None]
    return out


def _empty_frame() -> pd.DataFrame:
    cols = {c: pd.Series(dtype="int64") for c in ("ts", "end", "dur") + kineto.INT_COLUMNS}
    cols["kind"] = pd.Series(dtype="int8")
    cols["name"] = pd.Series(dtype="category")
    cols["in_type"] = pd.Series(dtype="category")
    cols["in_shape"] = pd.Series(dtype="category")
    cols["pg"] = pd.Series(dtype="category")
    return pd.DataFrame(cols)


_NUMERIC = FLOAT_COLUMNS + kineto.INT_COLUMNS + ("kind",)
# Ids most traces have none of (no Python stacks, no collectives): int8 -1 then, which every selection and
# copy of the table carries at 4 bytes a row instead of 32 (readers convert with .to_numpy(np.int64)).
_SPARSE = ("py_id", "py_parent", "seq", "peer")
_ORDER = ("ts", "dur") + kineto.INT_COLUMNS + ("kind", "name", "in_type", "in_shape", "pg", "end")  # the frame's columns


def _take_chunk(out: tuple, trace: Trace) -> dict:
    cols, meta, skipped, seen = out
    for cat, n in seen.items():
        trace.device_categories[cat] = trace.device_categories.get(cat, 0) + n
    if skipped:
        trace.warnings.append(f"{skipped} entries of traceEvents that are not event objects were ignored")
    for pid, tid, name, value in meta:
        if name == "thread_name" and isinstance(value, str) and isinstance(pid, (int, str)) and isinstance(tid, (int, str)):
            trace.thread_names[(pid, tid)] = value
    for k in ("name", "in_type", "in_shape", "pg"):  # (codes, sorted categories) from the workers' columns.chunk_columns
        codes, categories = cols[k]
        cols[k] = pd.Categorical.from_codes(codes, categories=pd.Index(categories))
    return cols


def _assemble(frames: list, trace: Trace) -> pd.DataFrame:
    """One frame from the chunks' columns: times to int ns from the earliest event, sorted by start,
    without events that have no timestamp, absurd times, or that repeat an earlier event exactly.
    Works on numpy columns and builds the DataFrame once (pandas row filters copy every column)."""
    frames[:] = [f for f in frames if len(f["ts"])]
    if not frames:
        return _empty_frame()
    cols = {k: np.concatenate([f[k] for f in frames]) for k in _NUMERIC}
    names = union_categoricals([f["name"] for f in frames])
    in_types = union_categoricals([f["in_type"] for f in frames])
    in_shapes = union_categoricals([f["in_shape"] for f in frames])
    pgs = union_categoricals([f["pg"] for f in frames])
    frames.clear()  # the caller's list: each column is held once from here on
    if "" not in in_types.categories:
        in_types = in_types.add_categories([""])
    cols["name"] = names
    cols["pg"] = pgs
    cols["in_type"] = in_types.reorder_categories([""] + [x for x in in_types.categories if x != ""])
    cols["in_shape"] = in_shapes
    rows = times.normalise(cols, trace)
    if rows is None:
        return _empty_frame()
    for k in list(cols):  # one column at a time, so that one column is the only extra copy
        cols[k] = cols[k].take(rows)
    dup = _duplicates(cols)
    if dup.any():
        trace.warnings.append(f"{int(dup.sum())} duplicate events were ignored")
        for k in list(cols):
            cols[k] = cols[k][~dup]
    cols["end"] = cols["ts"] + cols["dur"]
    for k in _SPARSE:  # a column no event of the trace has a value in: -1 in one byte, not eight
        if not (cols[k] != -1).any():
            cols[k] = np.full(cols[k].size, -1, dtype=np.int8)
    return pd.DataFrame({k: cols[k] for k in _ORDER}, copy=False)  # no consolidating copy


_IDENTITY = ("ts", "dur", "kind", "name", "pid", "tid", "corr", "ext")


def _duplicates(cols: dict) -> np.ndarray:
    """Rows (sorted by start) that repeat an earlier event exactly. A repeat starts when the event it
    repeats does, so only rows that share their start with a neighbour get the exact comparison."""
    ts = cols["ts"]
    same = ts[1:] == ts[:-1]
    cand = np.zeros(len(ts), dtype=bool)
    cand[1:] |= same
    cand[:-1] |= same
    dup = np.zeros(len(ts), dtype=bool)
    if cand.any():
        idx = np.flatnonzero(cand)
        sub = pd.DataFrame({c: cols[c].codes[idx] if c == "name" else cols[c][idx] for c in _IDENTITY})
        dup[idx] = sub.duplicated().to_numpy()
    return dup


def _read_devices(trace: Trace, header: kineto.Header) -> None:
    """The device type and name, and what the trace says of a device whose activity it does not hold (devices.py)."""
    ev = trace.events
    has_work = bool(ev["kind"].isin(DEVICE_KINDS).any())
    runtime_names = ev.loc[ev["kind"] == RUNTIME, "name"].cat.remove_unused_categories().cat.categories
    trace.device_type = devices.device_type(trace, header, has_work, runtime_names)
    if trace.device_type == "mtia" and not trace.devices:
        trace.devices.append(Device(name="MTIA"))
    launches = devices.launch_calls(ev, RUNTIME)
    captures = devices.capture(ev, runtime_names, RUNTIME, DEVICE_KINDS)
    trace.unread_device = devices.unread(trace, has_work, runtime_names, launches, captures)
