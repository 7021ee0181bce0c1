"""Hand-built traces with allocator events ([memory], [OutOfMemory]) as torch writes them, for exact
numbers.

tb = MemoryTraceBuilder(capacity=1 << 20) tb.step(1, 0, 100) tb.op("aten::mm", 10, 20) tb.alloc(12,
4096, addr=1)     # Total Allocated / Reserved kept by the builder tb.free(25, addr=1)"""

from __future__ import annotations

from typing import Optional

from tracebuilder import HOST_PID, HOST_TID
from tracebuilder_rules import RuleTraceBuilder


class MemoryTraceBuilder(RuleTraceBuilder):
    def __init__(
        self,
        capacity: Optional[int] = None,
        device_type: int = 1,
        device_id: int = 0,
        totals: bool = True,
        addr: bool = True,
        base: int = 0,
        reserved: int = 0,
        **kw,
    ):
        super().__init__(**kw)
        self.capacity, self.device_type, self.device_id = capacity, device_type, device_id
        self.totals, self.with_addr = totals, addr
        self.allocated, self.reserved = base, reserved
        self.sizes: dict = {}
        self.profile_memory: Optional[int] = 1

    def build(self) -> dict:
        doc = super().build()
        if self.capacity is not None and doc.get("deviceProperties"):
            doc["deviceProperties"][0]["totalGlobalMem"] = self.capacity
        if self.profile_memory is not None:
            doc["profile_memory"] = self.profile_memory
        return doc

    def _event(self, name: str, ts: float, nbytes: int, addr: int, tid: int = HOST_TID) -> dict:
        args = {"Device Type": self.device_type, "Device Id": self.device_id, "Bytes": nbytes}
        if self.with_addr:
            args["Addr"] = addr
        if self.totals:
            args.update({"Total Allocated": self.allocated, "Total Reserved": self.reserved})
        ev = {
            "ph": "i",
            "cat": "cpu_instant_event",
            "s": "t",
            "name": name,
            "pid": HOST_PID,
            "tid": tid,
            "ts": ts,
            "args": args,
        }
        self.events.append(ev)
        return ev

    def alloc(
        self, ts: float, nbytes: int, addr: int, reserve: int = 0, tid: int = HOST_TID
    ) -> dict:
        """An allocation; `reserve` more bytes taken by the caching allocator first."""
        self.allocated += nbytes
        self.reserved = max(self.reserved + reserve, self.allocated if self.device_type != 0 else 0)
        self.sizes[addr] = nbytes
        return self._event("[memory]", ts, nbytes, addr, tid)

    def free(self, ts: float, addr: int, tid: int = HOST_TID) -> dict:
        nbytes = self.sizes.pop(addr)
        self.allocated -= nbytes
        return self._event("[memory]", ts, -nbytes, addr, tid)

    def oom(self, ts: float, nbytes: int, tid: int = HOST_TID) -> dict:
        return self._event("[OutOfMemory]", ts, nbytes, 0, tid)


def leaky(
    steps: int = 4, leak: int = 1000, temp: int = 100, base: int = 5000, **kw
) -> MemoryTraceBuilder:
    """`steps` steps of 100 µs, each: aten::mm allocates `temp` bytes and frees them; aten::add
    allocates `leak` bytes that are never freed (a loss kept with its graph). The level starts at
    `base` (allocated before)."""
    tb = MemoryTraceBuilder(base=base, reserved=base, **kw)
    for i in range(steps):
        t0 = i * 100
        tb.step(i + 1, t0, 100)
        tb.op("aten::mm", t0 + 10, 20)
        tb.alloc(t0 + 12, temp, addr=10_000 + i)
        tb.op("aten::add", t0 + 40, 10)
        if leak:
            tb.alloc(t0 + 42, leak, addr=20_000 + i)
        tb.free(t0 + 60, addr=10_000 + i)
    return tb
