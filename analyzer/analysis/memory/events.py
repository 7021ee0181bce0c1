"""The allocator's events of one device, with the level they leave behind: what every memory measure
reads.

`Trace.memory` (trace/memory.py) holds the `[memory]` / `[OutOfMemory]` events of every device;
`per_device` splits them by (`Device Type`, `Device Id`). The level after each event is the trace's
`Total Allocated` when the trace records it; an older trace (torch 1.9: `Bytes` only) gets it
rebuilt as the running sum of `Bytes`, relative to the window's start, and says so
(`DeviceEvents.missing`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ...trace.memory import MemoryEvents

# c10::DeviceType codes as torch names them in a device string (cuda:0); ROCm reports as CUDA.
DEVICE_NAMES = {
    0: "cpu",
    1: "cuda",
    6: "hip",
    12: "xpu",
    13: "mps",
    19: "mtia",
    20: "privateuseone",
}
CPU = 0


def device_label(device_type: int, device_id: int) -> str:
    """`cpu`, `cuda:0`, ... as torch spells a device (`device<type>:<id>` for a type not named
    here)."""
    if device_type == CPU:
        return "cpu"
    name = DEVICE_NAMES.get(int(device_type), f"device{int(device_type)}")
    return f"{name}:{int(device_id)}" if device_id >= 0 else name


@dataclass
class DeviceEvents:
    """The allocator's events of one device, in time order, and the allocated level after each."""

    label: str
    device_type: int
    device_id: int
    events: MemoryEvents
    level: np.ndarray  # bytes allocated after each event (the trace's total, or rebuilt from Bytes)
    has_totals: bool  # `Total Allocated` recorded (else `level` is the running sum of Bytes)
    has_reserved: bool  # `Total Reserved` recorded and non-zero somewhere: a caching allocator
    has_addr: bool  # `Addr` recorded: allocations and frees pair up
    missing: list = field(default_factory=list)  # what the trace does not record, said

    @property
    def is_cpu(self) -> bool:
        return self.device_type == CPU

    @property
    def relative(self) -> bool:
        """The levels count only what was allocated in the window (CPU, or rebuilt from Bytes)."""
        return self.is_cpu or not self.has_totals


def per_device(mem: Optional[MemoryEvents]) -> list:
    """A DeviceEvents per (Device Type, Device Id), GPUs first then the CPU, each in time order."""
    if mem is None or not len(mem):
        return []
    key = mem.device_type.astype(np.int64) * (1 << 20) + (mem.device_id.astype(np.int64) + 1)
    out = []
    for k in np.unique(key):
        rows = np.flatnonzero(key == k)
        ev = mem.take(rows)
        dtype, did = int(ev.device_type[0]), int(ev.device_id[0])
        out.append(_device(ev, dtype, did))
    out.sort(key=lambda d: (d.is_cpu, d.device_type, d.device_id))
    return out


def _device(ev: MemoryEvents, dtype: int, did: int) -> DeviceEvents:
    missing = []
    has_totals = bool((ev.allocated >= 0).all())
    if has_totals:
        level = ev.allocated.astype(np.int64)
    else:
        level = np.cumsum(ev.bytes.astype(np.int64))
        missing.append(
            "Total Allocated (older torch): levels are the running sum of Bytes from the window's "
            "start, relative"
        )
    has_addr = bool((ev.addr >= 0).all())
    if not has_addr:
        missing.append(
            "Addr (older torch): allocations and frees cannot be paired, so nothing is said of what"
            " is never freed and the ops at the peak are net bytes since the peak step's start"
        )
    has_reserved = dtype != CPU and bool((ev.reserved > 0).any())
    if dtype != CPU and not (ev.reserved >= 0).all():
        missing.append("Total Reserved: fragmentation cannot be measured")
    if dtype == -1:
        missing.append("Device Type: the device is unknown")
    return DeviceEvents(
        device_label(dtype, did), dtype, did, ev, level, has_totals, has_reserved, has_addr, missing
    )
