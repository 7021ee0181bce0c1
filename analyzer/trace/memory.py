"""The allocator's events of a trace recorded with `profile_memory=True`: `[memory]` (one per
allocation, `Bytes` > 0, or free, `Bytes` < 0) and `[OutOfMemory]` instant events, as numpy
columns beside the event table (`Trace.memory`). kineto.py decodes them (`mem_*` columns of each
piece); this module puts the pieces together on the event table's clock.

Fields absent from a trace are -1 (`addr`, `allocated`, `reserved`, `device_type`, `device_id`):
torch 1.9's traces carry `Bytes` only. `ts` is int64 ns from the event table's origin
(`Trace.t0_us`), rows in time order (the file's order among equal times: an allocator's events on
one thread are written in order)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

COLUMNS = (
    "ts",
    "pid",
    "tid",
    "bytes",
    "addr",
    "allocated",
    "reserved",
    "device_type",
    "device_id",
    "oom",
)


@dataclass
class MemoryEvents:
    ts: np.ndarray  # int64 ns from the trace's origin
    pid: np.ndarray
    tid: np.ndarray
    bytes: np.ndarray  # > 0 allocation, < 0 free
    addr: np.ndarray  # -1 when not recorded
    allocated: np.ndarray  # "Total Allocated" after the event (-1 when not recorded)
    reserved: np.ndarray  # "Total Reserved" after the event (-1 when not recorded)
    device_type: np.ndarray  # c10 DeviceType: 0 CPU, 1 CUDA, ... (-1 when not recorded)
    device_id: np.ndarray  # -1 for the CPU
    oom: np.ndarray  # bool: an [OutOfMemory] event

    def __len__(self) -> int:
        return int(self.ts.size)

    def take(self, rows) -> "MemoryEvents":
        return MemoryEvents(**{c: getattr(self, c)[rows] for c in COLUMNS})


def assemble(chunks: list, t0_us: float) -> Optional[MemoryEvents]:
    """The decoded pieces' `mem_*` columns (columns.MEMORY_KEYS) as one MemoryEvents on the event
    table's clock; None when the trace has no allocator events."""
    chunks = [c for c in chunks if c is not None and len(c["mem_ts"])]
    if not chunks:
        return None
    cols = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    ts = cols["mem_ts"]
    keep = np.isfinite(ts)
    with np.errstate(invalid="ignore", over="ignore"):
        ns = np.rint((ts - t0_us) * 1000.0)
    keep &= np.abs(ns) < 2.0**62
    if not keep.any():
        return None
    order = np.flatnonzero(keep)
    order = order[np.argsort(ns[order], kind="stable")]
    out = {c: cols[f"mem_{c}"][order] for c in COLUMNS if c != "ts"}
    return MemoryEvents(ts=ns[order].astype(np.int64), **out)
