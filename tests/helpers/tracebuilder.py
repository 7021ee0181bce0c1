"""Build small Kineto-format traces by hand, in microseconds, for unit truth.

    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("volta_sgemm_128x64_nn", host=(5, 3), device=(10, 50))
    path = tb.write(tmp_path / "t.json.gz")
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

HOST_PID, HOST_TID, DEVICE_PID, STREAM = 1000, 1000, 0, 7


class TraceBuilder:
    def __init__(self, device: bool = True, rank: int | None = 0, world_size: int | None = 1):
        self.events: list[dict] = []
        self.device = device
        self.rank, self.world_size = rank, world_size
        self._corr = 100
        self._ext = 1

    # --- host side -----------------------------------------------------------------------------
    def _x(self, cat, name, ts, dur, pid=HOST_PID, tid=HOST_TID, **args):
        ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
        self.events.append(ev)
        return ev

    def step(self, n: int, ts: float, dur: float, cat: str = "user_annotation"):
        return self._x(cat, f"ProfilerStep#{n}", ts, dur)

    def annotation(self, name: str, ts: float, dur: float, **args):
        return self._x("user_annotation", name, ts, dur, **args)

    def op(self, name: str, ts: float, dur: float, tid: int = HOST_TID, **args):
        self._ext += 1
        return self._x("cpu_op", name, ts, dur, tid=tid, **{"External id": self._ext, **args})

    def runtime(self, name: str, ts: float, dur: float, corr: int | None = None):
        args = {"cbid": 1}
        if corr is not None:
            args["correlation"] = corr
        return self._x("cuda_runtime", name, ts, dur, **args)

    def dataloader(self, ts: float, dur: float, multiprocess: bool = False):
        it = "_MultiProcessingDataLoaderIter" if multiprocess else "_SingleProcessDataLoaderIter"
        return self.annotation(f"enumerate(DataLoader)#{it}.__next__", ts, dur)

    # --- device side ---------------------------------------------------------------------------
    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def kernel(self, name: str, ts: float, dur: float, corr: int | None = None, stream: int = STREAM):
        return self._x("kernel", name, ts, dur, pid=DEVICE_PID, tid=stream, device=0, stream=stream,
                       correlation=corr if corr is not None else self._next_corr())

    def memcpy(self, name: str, ts: float, dur: float, corr: int | None = None, nbytes: int = 1024,
               stream: int = STREAM):
        return self._x("gpu_memcpy", name, ts, dur, pid=DEVICE_PID, tid=stream, device=0, stream=stream,
                       correlation=corr if corr is not None else self._next_corr(), bytes=nbytes)

    def launch(self, kernel: str, host: tuple, device: tuple, api: str = "cudaLaunchKernel"):
        """A runtime call at host=(ts, dur) whose kernel runs at device=(ts, dur)."""
        corr = self._next_corr()
        self.runtime(api, host[0], host[1], corr=corr)
        return self.kernel(kernel, device[0], device[1], corr=corr)

    def copy(self, name: str, host: tuple, device: tuple, api: str = "cudaMemcpyAsync", nbytes: int = 1024):
        corr = self._next_corr()
        self.runtime(api, host[0], host[1], corr=corr)
        return self.memcpy(name, device[0], device[1], corr=corr, nbytes=nbytes)

    # --- output --------------------------------------------------------------------------------
    def build(self) -> dict:
        doc = {"schemaVersion": 1, "traceEvents": list(self.events)}
        if self.device:
            doc["deviceProperties"] = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8,
                                        "computeMinor": 0, "totalGlobalMem": 85899345920, "numSms": 108}]
        else:
            doc["deviceProperties"] = []
        if self.rank is not None:
            doc["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": self.world_size}
        return doc

    def write(self, path: Path) -> Path:
        path = Path(path)
        data = json.dumps(self.build()).encode()
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path
