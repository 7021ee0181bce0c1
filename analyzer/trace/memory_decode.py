"""The allocator's instant events in a decoded piece (`[memory]`, `[OutOfMemory]`): the Struct
kineto.py's tagged union decodes `ph: "i"` events into, and the `mem_*` columns (trace/memory.py
assembles them)."""

from __future__ import annotations

from functools import partial
from itertools import compress
from operator import attrgetter, is_
from typing import Union

import msgspec
import numpy as np


class _MemArgs(msgspec.Struct, gc=False):
    """The allocator's fields of a `[memory]` / `[OutOfMemory]` instant event (memory.py); -1 when
    absent (old traces carry `Bytes` without `Addr` and totals)."""

    bytes: int = msgspec.field(default=0, name="Bytes")
    addr: int = msgspec.field(default=-1, name="Addr")
    allocated: int = msgspec.field(default=-1, name="Total Allocated")
    reserved: int = msgspec.field(default=-1, name="Total Reserved")
    device_type: int = msgspec.field(default=-1, name="Device Type")
    device_id: int = msgspec.field(default=-1, name="Device Id")


class _Instant(msgspec.Struct, tag_field="ph", tag="i", gc=False):
    """An instant event: only the allocator's (`[memory]`, `[OutOfMemory]`) are kept."""

    name: str = ""
    pid: Union[int, str] = -1
    tid: Union[int, str] = -1
    ts: float = float("nan")
    args: _MemArgs = msgspec.field(default_factory=_MemArgs)


MEMORY_NAMES = ("[memory]", "[OutOfMemory]")
MEMORY_INT_COLUMNS = (
    "mem_pid",
    "mem_tid",
    "mem_bytes",
    "mem_addr",
    "mem_allocated",
    "mem_reserved",
    "mem_device_type",
    "mem_device_id",
)
_NAME, _TS, _ARGS = attrgetter("name"), attrgetter("ts"), attrgetter("args")
_MEM_FIELDS = ("pid", "tid", "bytes", "addr", "allocated", "reserved", "device_type", "device_id")


def memory_columns(evs: list, types: list) -> dict:
    """The allocator's instant events of a piece as columns (`mem_*`; ts in float µs, `mem_oom` for
    `[OutOfMemory]`); `types` is each event's Struct type. A piece without instant events (the common
    case) is not scanned; the instants are picked and each column filled by C-level `map`s (280 k
    events on the x10 benchmark)."""
    mems = list(compress(evs, map(partial(is_, _Instant), types))) if types.count(_Instant) else []
    names = list(map(_NAME, mems))
    if names.count("[memory]") + names.count("[OutOfMemory]") != len(mems):  # other instants: rare
        mems = [e for e, name in zip(mems, names) if name in MEMORY_NAMES]
        names = list(map(_NAME, mems))
    n = len(mems)
    oom = np.zeros(n, dtype=bool)
    if names.count("[memory]") != n:  # list.count runs in C: OOM events are rare
        oom[[i for i, name in enumerate(names) if name == "[OutOfMemory]"]] = True
    out = {"mem_ts": np.fromiter(map(_TS, mems), dtype=np.float64, count=n), "mem_oom": oom}
    args = list(map(_ARGS, mems))
    for key, f in zip(MEMORY_INT_COLUMNS, _MEM_FIELDS):
        src, get = (mems if f in ("pid", "tid") else args), attrgetter(f)
        try:
            out[key] = np.fromiter(map(get, src), dtype=np.int64, count=n)
        except (TypeError, ValueError):  # string pids / tids
            values = list(map(get, src))
            out[key] = np.array([v if type(v) is int else -1 for v in values], dtype=np.int64)
    return out


def lax_memory_columns(evs: list, _lax_int, _lax_float) -> dict:
    """The same columns from leniently decoded events (dicts), with kineto's sanitising helpers."""
    mems = [e for e in evs if e.get("ph") == "i" and e.get("name") in MEMORY_NAMES]
    args = [e["args"] if isinstance(e.get("args"), dict) else {} for e in mems]
    out = {
        "mem_ts": np.array([_lax_float(e.get("ts")) for e in mems], dtype=np.float64),
        "mem_oom": np.array([e.get("name") == "[OutOfMemory]" for e in mems], dtype=bool),
        "mem_pid": np.array([_lax_int(e.get("pid")) for e in mems], dtype=np.int64),
        "mem_tid": np.array([_lax_int(e.get("tid")) for e in mems], dtype=np.int64),
    }
    for key, name, absent in (
        ("mem_bytes", "Bytes", 0),
        ("mem_addr", "Addr", -1),
        ("mem_allocated", "Total Allocated", -1),
        ("mem_reserved", "Total Reserved", -1),
        ("mem_device_type", "Device Type", -1),
        ("mem_device_id", "Device Id", -1),
    ):
        out[key] = np.array(
            [_lax_int(a[name]) if name in a else absent for a in args], dtype=np.int64
        )
    return out
