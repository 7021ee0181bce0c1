"""Load a PyTorch profiler (Kineto) Chrome trace into one columnar `Trace`.

The only module that knows the JSON. Decoding is typed (msgspec Structs): only the fields the
analysis reads are materialised, everything else in the file is skipped by the decoder.

Times are int64 nanoseconds relative to the earliest complete event (`t0_us` keeps the origin), so
interval arithmetic downstream is exact. Event kinds are normalised across trace ages and vendors
(`Kernel`/`kernel`, `Runtime`/`cuda_runtime`/`cuda_driver`, HIP names, ...).
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import msgspec
import numpy as np
import pandas as pd

from .errors import TraceError

log = logging.getLogger(__name__)

# --- normalised event kinds ---------------------------------------------------------------------
KERNEL, MEMCPY, MEMSET, RUNTIME, CPU_OP, ANNOTATION, GPU_ANNOTATION, PYTHON, DEVICE_SYNC, OTHER = range(10)
KIND_NAMES = (
    "kernel", "memcpy", "memset", "runtime", "cpu_op", "annotation", "gpu_annotation", "python",
    "device_sync", "other",
)
DEVICE_KINDS = (KERNEL, MEMCPY, MEMSET)  # work that occupies the device
_KIND_OF_CAT = {
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY, "memcpy": MEMCPY,
    "gpu_memset": MEMSET, "memset": MEMSET,
    "cuda_runtime": RUNTIME, "runtime": RUNTIME, "cuda_driver": RUNTIME, "xpu_runtime": RUNTIME,
    "mtia_runtime": RUNTIME, "privateuse1_runtime": RUNTIME, "hip_runtime": RUNTIME,
    "cpu_op": CPU_OP, "operator": CPU_OP,
    "user_annotation": ANNOTATION,
    "gpu_user_annotation": GPU_ANNOTATION,
    "python_function": PYTHON,
    "cuda_sync": DEVICE_SYNC,
}
TRACE_SUFFIXES = (".json", ".json.gz")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# --- typed decoding: only what the analysis reads --------------------------------------------------
_Num = Union[int, float, str, None]


class _Args(msgspec.Struct):
    external_id: _Num = msgspec.field(default=None, name="External id")
    correlation: _Num = None
    bytes: _Num = None
    python_id: _Num = msgspec.field(default=None, name="Python id")
    python_parent_id: _Num = msgspec.field(default=None, name="Python parent id")
    input_type: Any = msgspec.field(default=None, name="Input type")
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    name: Any = None  # metadata events: process/thread name
    labels: Any = None  # metadata events: "CPU" / "GPU 0"


_NO_ARGS = _Args()


class _Event(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Optional[_Args] = None


class _DeviceProp(msgspec.Struct):
    id: Any = None
    name: Any = None
    computeMajor: Any = None
    computeMinor: Any = None
    totalGlobalMem: Any = None
    numSms: Any = None


class _DistInfo(msgspec.Struct):
    backend: Any = None
    rank: Any = None
    world_size: Any = None


class _TraceDoc(msgspec.Struct):
    traceEvents: Optional[list[_Event]] = None
    deviceProperties: Optional[list[_DeviceProp]] = None
    distributedInfo: Optional[_DistInfo] = None
    schemaVersion: Any = None
    with_stack: Any = None
    record_shapes: Any = None
    roctracer_version: Any = None
    hip_runtime_version: Any = None
    cuda_runtime_version: Any = None


_DECODER = msgspec.json.Decoder(Union[_TraceDoc, list[_Event]])


# --- the model ------------------------------------------------------------------------------------
@dataclass
class Device:
    name: str
    compute_major: Optional[int] = None
    compute_minor: Optional[int] = None
    memory_bytes: Optional[int] = None
    num_sms: Optional[int] = None

    @property
    def compute_capability(self) -> Optional[float]:
        if self.compute_major is None:
            return None
        return float(f"{self.compute_major}.{self.compute_minor or 0}")


@dataclass
class Trace:
    """One trace file, parsed once. `events` has one row per complete ("X") event:

    ts, end, dur -- int64 ns relative to `t0_us`;  kind -- int8 code into KIND_NAMES;
    name -- categorical;  pid, tid -- int64 (-1 where the trace used a string);
    corr, ext -- correlation / External id (-1 when absent);  bytes -- int64 (-1 when absent);
    py_id, py_parent -- python_function tree links (-1 when absent);  in_type -- categorical
    "Input type" of cpu ops joined with "," ("" when not recorded).
    """

    path: str
    events: pd.DataFrame
    t0_us: float = 0.0
    raw_event_count: int = 0
    devices: list = field(default_factory=list)
    device_type: str = "cpu"  # cuda | rocm | cpu | other
    rank: Optional[int] = None
    world_size: Optional[int] = None
    backend: Optional[str] = None
    thread_names: dict = field(default_factory=dict)
    has_stacks: bool = False
    has_shapes: bool = False
    warnings: list = field(default_factory=list)

    @property
    def device_name(self) -> Optional[str]:
        names = sorted({d.name for d in self.devices if d.name})
        return ", ".join(names) if names else None

    def kind(self, *kinds: int) -> pd.DataFrame:
        return self.events[self.events["kind"].isin(kinds)]


# --- loading --------------------------------------------------------------------------------------
def find_trace_files(path: Path) -> list[Path]:
    """Trace files under a directory (tensorboard_trace_handler output: one per worker/rank)."""
    files = [p for p in sorted(path.rglob("*")) if p.is_file() and p.name.endswith(TRACE_SUFFIXES)]
    return files


def read_bytes(path: Path) -> bytes:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except IsADirectoryError:
        raise TraceError(path, "is a directory") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read file ({exc.strerror or exc})") from None
    if not raw:
        raise TraceError(path, "empty file")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceError(path, f"corrupt or truncated gzip data ({exc})") from None
        if not raw:
            raise TraceError(path, "empty file (after gunzip)")
    return raw


def _decode(path: Path, raw: bytes, warnings: list):
    try:
        return _DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        msg = str(exc)
        if "UTF-8" in msg:
            warnings.append("invalid UTF-8 bytes in the trace were replaced with U+FFFD")
            text = raw.decode("utf-8", errors="replace").encode("utf-8")
            try:
                return _DECODER.decode(text)
            except msgspec.DecodeError as exc2:
                msg = str(exc2)
        if isinstance(exc, msgspec.ValidationError) or "Expected" in msg:
            raise TraceError(path, f"not a PyTorch profiler trace (JSON is not a Chrome trace: {msg})") from None
        raise TraceError(path, f"not valid JSON ({msg})") from None


def load_trace(path: Union[str, os.PathLike]) -> Trace:
    """Parse one trace file (.json or .json.gz; gzip is detected by content)."""
    path = Path(path)
    if not path.exists():
        raise TraceError(path, "no such file or directory")
    if path.is_dir():
        raise TraceError(path, "is a directory (use analyze_path for directories)")
    warnings: list[str] = []
    doc = _decode(path, read_bytes(path), warnings)
    if isinstance(doc, list):
        events, doc = doc, _TraceDoc()
    else:
        if doc.traceEvents is None:
            raise TraceError(path, "not a PyTorch profiler trace (no 'traceEvents' list)")
        events = doc.traceEvents
    trace = Trace(path=str(path), events=_empty_frame(), raw_event_count=len(events), warnings=warnings)
    _read_metadata(trace, doc, events)
    trace.events = _build_frame(path, events, trace)
    if trace.events.empty:
        raise TraceError(path, "the trace has no complete events to analyze")
    trace.has_stacks = bool((trace.events["kind"] == PYTHON).any())
    trace.has_shapes = bool((trace.events["in_type"].cat.codes > 0).any()) if len(trace.events) else False
    trace.device_type = _device_type(trace, doc)
    return trace


def _int_or_none(v) -> Optional[int]:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v == v:
        return int(v)
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return None
    return None


def _read_metadata(trace: Trace, doc: _TraceDoc, events: list) -> None:
    for p in doc.deviceProperties or []:
        trace.devices.append(
            Device(
                name=str(p.name) if p.name is not None else "unknown device",
                compute_major=_int_or_none(p.computeMajor),
                compute_minor=_int_or_none(p.computeMinor),
                memory_bytes=_int_or_none(p.totalGlobalMem),
                num_sms=_int_or_none(p.numSms),
            )
        )
    if doc.distributedInfo is not None:
        trace.rank = _int_or_none(doc.distributedInfo.rank)
        trace.world_size = _int_or_none(doc.distributedInfo.world_size)
        b = doc.distributedInfo.backend
        trace.backend = str(b) if b is not None else None
    for e in events:
        if e.ph == "M" and e.name == "thread_name" and e.args is not None and isinstance(e.args.name, str):
            trace.thread_names[(e.pid, e.tid)] = e.args.name


def _empty_frame() -> pd.DataFrame:
    cols = {c: pd.Series(dtype="int64") for c in ("ts", "end", "dur", "pid", "tid", "corr", "ext", "bytes",
                                                   "py_id", "py_parent")}
    cols["kind"] = pd.Series(dtype="int8")
    cols["name"] = pd.Series(dtype="category")
    cols["in_type"] = pd.Series(dtype="category")
    return pd.DataFrame(cols)


def _int_column(values: list, what: str, warnings: list) -> np.ndarray:
    """Integer ids (correlation, External id, ...): absent, non-integer or beyond int64 -> -1."""
    try:
        return np.array([v if type(v) is int else -1 for v in values], dtype=np.int64)
    except OverflowError:
        warnings.append(f"{what} values beyond int64 were ignored")
        return np.array(
            [v if type(v) is int and _INT64_MIN <= v <= _INT64_MAX else -1 for v in values], dtype=np.int64
        )


def _float_column(values: list) -> np.ndarray:
    return np.array([v if type(v) in (int, float) else np.nan for v in values], dtype=np.float64)


def _build_frame(path: Path, events: list, trace: Trace) -> pd.DataFrame:
    warnings = trace.warnings
    xs = [e for e in events if e.ph == "X"]
    if not xs:
        return _empty_frame()
    ts_us = _float_column([e.ts for e in xs])
    dur_us = _float_column([e.dur for e in xs])
    bad_ts = ~np.isfinite(ts_us)
    if bad_ts.any():
        warnings.append(f"{int(bad_ts.sum())} events without a numeric timestamp were dropped")
    bad_dur = ~np.isfinite(dur_us) | (dur_us < 0)
    if (bad_dur & ~bad_ts).any():
        warnings.append(f"{int((bad_dur & ~bad_ts).sum())} events with a missing, negative or non-numeric "
                        "duration were counted as zero-length")
    dur_us = np.where(bad_dur, 0.0, dur_us)
    keep = ~bad_ts
    # Spans/Traces pseudo-processes (string pids) are the profiler's own bookkeeping, not work.
    pid_raw = [e.pid for e in xs]
    keep &= np.array([not isinstance(p, str) for p in pid_raw], dtype=bool)
    if not keep.any():
        return _empty_frame()
    t0 = float(ts_us[keep].min())
    ts_ns = np.rint((ts_us - t0) * 1000.0)
    dur_ns = np.rint(dur_us * 1000.0)
    huge = keep & ((ts_ns > 9e18) | (dur_ns > 9e18))
    if huge.any():
        warnings.append(f"{int(huge.sum())} events with absurd timestamps or durations were dropped")
        keep &= ~huge
    idx = np.flatnonzero(keep)
    xs = [xs[i] for i in idx]
    args = [e.args if e.args is not None else _NO_ARGS for e in xs]
    kinds = np.array([_KIND_OF_CAT.get(e.cat.lower() if isinstance(e.cat, str) else "", OTHER) for e in xs],
                     dtype=np.int8)
    names = [e.name if isinstance(e.name, str) else "" if e.name is None else str(e.name) for e in xs]
    in_types = [",".join(map(str, a.input_type)) if isinstance(a.input_type, list) else "" for a in args]
    bytes_raw = [a.bytes for a in args]
    df = pd.DataFrame(
        {
            "ts": ts_ns[idx].astype(np.int64),
            "dur": dur_ns[idx].astype(np.int64),
            "kind": kinds,
            "name": pd.Categorical(names),
            "pid": _int_column([e.pid for e in xs], "pid", warnings),
            "tid": _int_column([e.tid for e in xs], "tid", warnings),
            "corr": _int_column([a.correlation for a in args], "correlation", warnings),
            "ext": _int_column([a.external_id for a in args], "External id", warnings),
            "bytes": _int_column([_int_or_none(b) if isinstance(b, str) else b for b in bytes_raw], "bytes", warnings),
            "py_id": _int_column([a.python_id for a in args], "Python id", warnings),
            "py_parent": _int_column([a.python_parent_id for a in args], "Python parent id", warnings),
            "in_type": pd.Categorical(in_types, categories=sorted(set(in_types) | {""})),
        }
    )
    df["end"] = df["ts"] + df["dur"]
    dup = df.duplicated(subset=["ts", "dur", "kind", "name", "pid", "tid", "corr", "ext"])
    if dup.any():
        warnings.append(f"{int(dup.sum())} duplicate events were ignored")
        df = df[~dup]
    trace.t0_us = t0
    return df.sort_values("ts", kind="stable").reset_index(drop=True)


_HIP = re.compile(r"^hip[A-Z]")


def _device_type(trace: Trace, doc: _TraceDoc) -> str:
    ev = trace.events
    has_device_work = bool(ev["kind"].isin(DEVICE_KINDS).any())
    runtime_names = ev.loc[ev["kind"] == RUNTIME, "name"].cat.remove_unused_categories().cat.categories
    if doc.roctracer_version is not None or doc.hip_runtime_version is not None or any(
        _HIP.match(n) for n in runtime_names
    ):
        return "rocm"
    if any(n.startswith("cu") for n in runtime_names) or any(
        "nvidia" in d.name.lower() or "tesla" in d.name.lower() for d in trace.devices
    ):
        return "cuda" if has_device_work or len(runtime_names) else "cpu"
    if any(d.name.lower().startswith(("amd", "instinct")) for d in trace.devices) and has_device_work:
        return "rocm"
    if has_device_work:
        return "other"
    return "cpu"
