"""Hand-built traces for the rule tests: `tracebuilder.TraceBuilder` plus what rules look at
(python stacks, cpu ops with input types that launch kernels, memsets, compute capability).

Times are microseconds. `analyze(tb, tmp_path)` returns (report dict, facts) for one built trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from perfsleuth.api import analyze_file
from perfsleuth.config import Config
from perfsleuth.facts.core import compute_facts
from tracebuilder import DEVICE_PID, HOST_PID, HOST_TID, STREAM, TraceBuilder

PAGEABLE_HTOD = "Memcpy HtoD (Pageable -> Device)"
PINNED_HTOD = "Memcpy HtoD (Pinned -> Device)"
DTOH = "Memcpy DtoH (Device -> Pageable)"
SINGLE_LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MULTI_LOADER = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


class RuleTraceBuilder(TraceBuilder):
    def __init__(self, device: bool = True, compute: Optional[tuple] = (8, 0), name: str = "NVIDIA A100-SXM4-80GB",
                 **kw):
        super().__init__(device=device, **kw)
        self.compute, self.device_name = compute, name
        self._py = 1000
        self.run_metadata: Optional[dict] = None  # the `perfsleuth` object `perfsleuth run` records

    def build(self) -> dict:
        doc = super().build()
        if self.run_metadata is not None:
            doc["perfsleuth"] = self.run_metadata
        if self.device:
            if self.compute is None:
                doc["deviceProperties"] = []
            else:
                doc["deviceProperties"][0].update(name=self.device_name, computeMajor=self.compute[0],
                                                  computeMinor=self.compute[1])
        return doc

    def py(self, name: str, ts: float, dur: float, parent: Optional[int] = None) -> int:
        """A python_function event; returns its Python id for children."""
        self._py += 1
        args = {"Python id": self._py, "Python thread": 0}
        if parent is not None:
            args["Python parent id"] = parent
        self._x("python_function", name, ts, dur, **args)
        return self._py

    def typed_launch(self, op: str, in_type: list, kernel: str, host: tuple, device: tuple):
        """A cpu_op with `Input type` whose runtime call (same External id) launches `kernel`."""
        ev = self.op(op, host[0], host[1], **{"Input type": in_type})
        corr = self._next_corr()
        self._x("cuda_runtime", "cudaLaunchKernel", host[0] + 1, max(host[1] - 2, 1),
                **{"External id": ev["args"]["External id"], "correlation": corr, "cbid": 211})
        return self.kernel(kernel, device[0], device[1], corr=corr)

    def memset(self, ts: float, dur: float, host: tuple):
        corr = self._next_corr()
        self.runtime("cudaMemsetAsync", host[0], host[1], corr=corr)
        return self._x("gpu_memset", "Memset (Device)", ts, dur, pid=DEVICE_PID, tid=STREAM, device=0,
                       stream=STREAM, correlation=corr, bytes=1024)


def run_metadata(cores: int = 2, threads: int = 1, workers: int = 0, load: float = 0.5, **host) -> dict:
    """What `perfsleuth run` records (record/trace_metadata.py), with the counts a test needs."""
    return {"version": 1,
            "host": {"cpu_count": cores, "affinity_cpus": cores, "torch_threads": threads, "torch_interop_threads": 2,
                     "omp_num_threads": None, "loadavg": [load * cores, 0.0, 0.0], "torch_version": "2.13.0",
                     "accelerator": "cpu", "rank": None, "world_size": None, "local_world_size": None, **host},
            "loaders": [{"dataset": "MyDataset", "num_workers": workers, "batch_size": 8, "pin_memory": False,
                         "persistent_workers": False, "prefetch_factor": None, "collate_fn": "default_collate"}]}


def analyze(tb: TraceBuilder, tmp_path: Path, config: Optional[Config] = None, name: str = "t.json.gz"):
    """(report dict, Facts) for the built trace."""
    report = analyze_file(tb.write(tmp_path / name), config)
    facts = compute_facts(report.trace, report.steps, report.breakdown)
    return report.to_dict(), facts


def rule_severity(slug: str, facts) -> str:
    """The built-in rule's own severity on these facts (its `severity_when` thresholds): what its finding
    shows when it has no forecast or measurement, at most medium (engine/evaluate.rate)."""
    from perfsleuth.engine.catalog import load_catalog
    from perfsleuth.engine.evaluate import rule_severity as severity

    return severity(next(r for r in load_catalog() if r.slug == slug), facts)


def rated(finding: dict, rule_says: str) -> bool:
    """The finding's severity is what issue 24 prescribes: from its forecast (>= 1.25x high, >= 1.05x
    medium, else low; at most medium for a rule whose forecasts missed on programs the models were not fitted
    to, engine/unseen_record.py) when it has one, else `rule_says` (the rule's own severity), at most medium."""
    from perfsleuth.report.numbers import capped, severity_for

    forecast = finding.get("forecast") or {}
    speedup = forecast.get("speedup")
    if speedup is not None:
        unseen = forecast.get("unseen") or {}
        missed = unseen.get("right", 0) < unseen.get("checked", 0)
        expected = capped(severity_for(speedup)) if missed else severity_for(speedup)
        return (finding["severity"], finding["severity_from"]) == (expected, "forecast")
    return (finding["severity"], finding["severity_from"]) == (capped(rule_says), "rule")


def fired(report: dict) -> dict:
    """slug -> finding for every finding in the report."""
    return {f["rule"]: f for f in report["findings"]}


__all__ = ["RuleTraceBuilder", "analyze", "fired", "rule_severity", "rated", "run_metadata", "HOST_PID", "HOST_TID", "PAGEABLE_HTOD", "PINNED_HTOD", "DTOH",
           "SINGLE_LOADER", "MULTI_LOADER"]
