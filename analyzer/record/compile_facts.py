"""torch.compile's own account of a run, recorded by `perfsleuth run` and `perfsleuth.profile()` into the
trace's metadata (`perfsleuth.compile`): what a trace cannot show -- why dynamo recompiled, why graphs
broke, whether the recompile limit was hit -- and which timed steps compiled, the unprofiled ones included
(analysis/measurement.py leaves those out of the unprofiled step time).

    "compile": {"version": 1,
                "steps": {"wait": [µs, ...], "warmup": [...], "active": [...], ...},  # compile time of each timed
                                                                   # step, in the order of perfsleuth.clock's lists
                "compiles": [{"id": "0/3", "frame", "file", "line", "phase", "step", "us", "reason", "failed",
                              "own"}, ...],          # own: perfsleuth's step hooks caused it (OWN_GUARD)
                "graph_breaks": [{"reason", "count"}, ...],
                "counters": {"frames", "frames_ok", "graphs", "graph_breaks", "recompile_limit_hits"},
                "config": {"recompile_limit", "automatic_dynamic_shapes", "suppress_errors"}}

Everything comes from torch's public bookkeeping, never from its log output: `torch._dynamo.utils.counters`,
`torch._dynamo.utils.get_compilation_metrics()` (one record per compilation: its id, frame, start, duration,
recompile reason, failure) and `torch._dynamo.config`. Nothing is imported: a script that never called
torch.compile has no `torch._dynamo.utils` module loaded, and gets no `compile` section.
"""

from __future__ import annotations

import bisect
import re
import sys
import time
from typing import Any, Optional

MAX_REASON = 200  # characters of a reason kept (its first line)
MAX_ROWS = 20  # graph-break reasons kept, most frequent first
LIMIT_TEXT = "recompile limit"  # in the failure of a compilation that hit torch._dynamo.config.recompile_limit
# A guard on the global module hooks: `perfsleuth run` installs global forward hooks until it knows where steps
# come from (step_hooks.py) and removes them then; a model compiled while they were there compiles again.
OWN_GUARD = re.compile(r"_global_forward(?:_pre)?_hooks")


def _text(value: Any) -> str:
    """First line of a reason, printable, at most MAX_REASON characters."""
    line = str(value or "").strip().splitlines()[0] if str(value or "").strip() else ""
    line = "".join(ch if ch.isprintable() else " " for ch in line)
    return line[:MAX_REASON]


class CompileWatch:
    """Notes when each step starts (wall clock, µs: the clock torch stamps its compilation records with)."""

    def __init__(self, clock=time.time_ns):
        self.clock = clock
        self.marks: list = []  # (phase, µs) of each step boundary: step k runs from marks[k] to marks[k + 1]

    def boundary(self, phase: str) -> None:
        """A step starts now, in `phase` (step_clock.phase_of)."""
        self.marks.append((phase, self.clock() // 1000))

    def facts(self) -> Optional[dict]:
        """The `compile` section, or None when torch.compile never ran (or its records cannot be read)."""
        utils = sys.modules.get("torch._dynamo.utils")
        if utils is None:
            return None
        try:
            return self._facts(utils, sys.modules.get("torch._dynamo.config"))
        except Exception:  # torch's bookkeeping changed shape: the run is never the worse for it
            return None

    def _facts(self, utils: Any, config: Any) -> Optional[dict]:
        records = list(utils.get_compilation_metrics())
        counters = getattr(utils, "counters", {})
        if not records and not counters.get("frames"):
            return None
        compiles = _merged([self._compile(r) for r in records])
        return {"version": 1, "steps": self._per_step(compiles), "compiles": compiles,
                "graph_breaks": _reasons(counters.get("graph_break") or {}),
                "counters": _counts(counters), "config": _config(config)}

    def _where(self, start_us: Optional[int]) -> tuple:
        """(phase, step position) of the step a compilation started in; ('start', -1) before the first
        boundary, ('open', k) in the step still running."""
        k = bisect.bisect_right([t for _, t in self.marks], start_us) - 1 if start_us is not None else -1
        return (self.marks[k][0], k) if k >= 0 else ("start", -1)

    def _compile(self, r: Any) -> dict:
        start = getattr(r, "start_time_us", None)
        phase, k = self._where(start)
        fail = _text(getattr(r, "fail_reason", None))
        return {"id": str(getattr(r, "compile_id", None) or "?"), "frame": _text(getattr(r, "co_name", None)),
                "file": _text(getattr(r, "co_filename", None)), "line": getattr(r, "co_firstlineno", None),
                "phase": phase, "step": k, "us": int(getattr(r, "duration_us", None) or 0),
                "reason": _text(getattr(r, "recompile_reason", None)), "failed": fail,
                "own": bool(OWN_GUARD.search(str(getattr(r, "recompile_reason", None) or "")))}

    def _per_step(self, compiles: list) -> dict:
        """Compile µs of each step, by phase, in step order. Metadata is taken inside a boundary hook, after the
        step clock closed the step that just ended: the last mark's step is complete too."""
        per = [0] * len(self.marks)
        for c in compiles:
            if 0 <= c["step"] < len(per):
                per[c["step"]] += c["us"]
        out: dict = {}
        for (phase, _), us in zip(self.marks, per):
            out.setdefault(phase, []).append(us)
        return out


def _merged(compiles: list) -> list:
    """One row per compile id: torch records a compilation's lazy backward apart, with the same id (and no
    frame or reason); its time is part of that compilation."""
    out: dict = {}
    for c in compiles:
        row = out.get(c["id"])
        if row is None or c["id"] == "?":
            out[c["id"] if c["id"] != "?" else f"?{len(out)}"] = dict(c)
            continue
        row["us"] += c["us"]
        for key in ("frame", "file", "line", "reason", "failed", "own"):
            row[key] = row[key] or c[key]
    return list(out.values())


def _reasons(table: dict) -> list:
    """counters['graph_break']: {reason text: count} -> the most frequent first lines."""
    merged: dict = {}
    for reason, n in table.items():
        key = _text(reason)
        merged[key] = merged.get(key, 0) + int(n or 0)
    return [{"reason": k, "count": n} for k, n in sorted(merged.items(), key=lambda kv: -kv[1])[:MAX_ROWS]]


def _counts(counters: dict) -> dict:
    frames, stats = counters.get("frames") or {}, counters.get("stats") or {}
    unimplemented = counters.get("unimplemented") or {}
    return {"frames": int(frames.get("total", 0)), "frames_ok": int(frames.get("ok", 0)),
            "graphs": int(stats.get("unique_graphs", 0)),
            "graph_breaks": int(sum((counters.get("graph_break") or {}).values())),
            "recompile_limit_hits": int(sum(n for k, n in unimplemented.items() if LIMIT_TEXT in str(k).lower()))}


def _config(config: Any) -> dict:
    limit = getattr(config, "recompile_limit", None)
    if limit is None:
        limit = getattr(config, "cache_size_limit", None)  # its name before torch 2.6
    return {"recompile_limit": limit if isinstance(limit, int) else None,
            "automatic_dynamic_shapes": bool(getattr(config, "automatic_dynamic_shapes", False)),
            "suppress_errors": bool(getattr(config, "suppress_errors", False))}
