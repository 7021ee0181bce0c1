"""Source lines and input dtypes from the stacks companion: the short window `perfsleuth run` records with
Python stacks and input shapes after the analysed one (trace/companion.py). The analysed trace has neither
(they would slow the steps it measures): its findings take their locations from the companion's evidence
tables, and, without recorded input types, the GEMM dtype split (fractions of GEMM time, applied to the
analysed trace's own GEMM time) from the companion's.

Loading the companion costs more than the rest of an analysis when its steps are large (Python stacks
record every Python call), so `Companion` loads it at most once and only when asked: the dtypes only for a
GPU trace with GEMM time (a rule's condition reads them), the source lines only once the findings are known
and one of them cites a location table that is empty (api.py). And never a companion larger on disk than
the main trace (or than `Config.companion_free_bytes`, below which any loads in well under a second):
analysing a run's trace never costs more than the main trace does. Such a companion is skipped with a
one-line note that says how to get its lines (`perfsleuth analyze` of the companion itself).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

from ..analysis.attribution import attribute
from ..analysis.steps import find_steps
from ..errors import TraceError
from ..trace.companion import companion_of
from ..trace.model import Trace, load_trace
from .loader import join_split

log = logging.getLogger(__name__)
DTYPE_FRACTIONS = ("gemm_fp32_share", "gemm_tf32_share", "gemm_reduced_share", "gemm_dtype_from_inputs")
PER_STEP_KEYS = ("count_per_step", "us_per_step")


def is_location_table(rows) -> bool:
    """An evidence table of source locations: rows with a file and a line (sync_sites, ...)."""
    return isinstance(rows, list) and bool(rows) and all(isinstance(r, dict) and "file" in r and "line" in r
                                                          for r in rows)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


class Companion:
    """The stacks companion of `trace`, loaded at most once, on first use; `note` says why it was not."""

    def __init__(self, trace: Trace, free_bytes: int, loaded: Optional[tuple] = None):
        self.trace, self.free_bytes = trace, free_bytes
        # (Trace, Steps) of a companion the analysis has already read (the memory companion, when a
        # run names one file for both): that file is not read a second time
        self.preloaded = loaded
        self.path: Optional[Path] = None
        if not (trace.has_stacks and trace.has_shapes):
            self.path = companion_of(trace.path, trace.run_metadata)
        self.note: Optional[str] = None
        self.loaded = False  # the companion's facts were computed (tests, and api's lazy join)
        self._facts = None
        self._tried = False

    def _too_large(self) -> Optional[str]:
        """The one-line note when the companion costs more to load than the main trace (None when it does not)."""
        try:
            size, main = os.path.getsize(self.path), os.path.getsize(self.trace.path)
        except OSError:
            return None  # a path that is not a local file (a URL): load_trace says what is wrong
        if size <= max(main, self.free_bytes):
            return None
        return (f"source lines not loaded: the stacks trace {self.path.name} ({_mb(size)}) is larger than the trace "
                f"({_mb(main)}); `perfsleuth analyze {self.path}` shows the findings of its own steps with their lines")

    def facts(self):
        """The companion's facts, or None (no companion, too large, unreadable)."""
        if self._tried:
            return self._facts
        self._tried = True
        if self.path is None:
            return None
        self.note = self._too_large()
        if self.note is not None:
            log.info("%s", self.note)
            return None
        from .core import compute_facts

        if self._same_as_preloaded():
            comp, steps = self.preloaded
        else:
            try:
                comp = load_trace(self.path)
            except TraceError as exc:
                log.warning("source lines: %s", exc)
                return None
            steps = find_steps(comp)
        self._facts = compute_facts(comp, steps, attribute(comp, steps))
        self.loaded = True
        return self._facts

    def _same_as_preloaded(self) -> bool:
        if not self.preloaded or self.preloaded[0] is None or self.preloaded[1] is None:
            return False
        try:
            return os.path.samefile(self.path, self.preloaded[0].path)
        except (OSError, TypeError):
            return False

    def join_dtypes(self, facts) -> bool:
        """The companion's dtype fractions of GEMM time onto `facts` when the trace has no input types and GEMM
        time on a GPU (the one use rule conditions make of the companion); True when joined."""
        v = facts.values
        if self.path is None or self.trace.has_shapes or not v.get("device_is_gpu") or not v.get("gemm_us_per_step"):
            return False
        theirs = self.facts()
        if theirs is None or not theirs.context.trace.has_shapes or not theirs.values.get("gemm_us_per_step"):
            return False
        _join_dtypes(facts, theirs)
        return True

    def join_loader(self, facts, min_share: float) -> bool:
        """The stacks window's split of an in-process DataLoader's time (decoding, I/O, Python,
        tensor ops: facts/loader.py `join_split`) onto a trace without stacks, before the rules read
        it: only where the loader waits at least `min_share` of the step
        (`Config.companion_loader_share`). True when joined."""
        v = facts.values
        if (self.path is None or self.trace.has_stacks or not v.get("dataloader_single_process")
                or float(v.get("dataloader_share") or 0.0) < min_share):
            return False
        theirs = self.facts()
        return theirs is not None and join_split(v, theirs.values)

    def join_lines(self, facts) -> bool:
        """Fill `facts`' empty location tables from the companion (`has_stacks` then says that source lines are
        known); True when it has stacks and the trace has none."""
        if self.path is None or self.trace.has_stacks:
            return False
        theirs = self.facts()
        if theirs is None or not theirs.context.trace.has_stacks:
            return False
        scale = _scale(theirs.context.trace.run_metadata)
        for name, rows in theirs.tables.items():
            if is_location_table(rows) and not facts.tables.get(name):
                facts.tables[name] = [_scaled(r, scale) for r in rows]
        facts.values["has_stacks"] = True
        return True


def _scale(meta: dict) -> float:
    """A stacks window cut short inside a step (step_clock.StacksBudget `cut`) holds part of one step: its
    per-step numbers are multiplied back by `scale` (the closure calls of a whole step)."""
    window = meta.get("stacks_window") if isinstance(meta, dict) else None
    try:
        scale = float(window.get("scale") or 1.0) if isinstance(window, dict) and window.get("cut") else 1.0
    except (TypeError, ValueError):
        scale = 1.0
    return scale if scale > 0 else 1.0


def _scaled(row: dict, scale: float) -> dict:
    if scale == 1.0:
        return row
    return {k: round(v * scale, 3) if k in PER_STEP_KEYS and isinstance(v, (int, float)) else v for k, v in row.items()}


def _join_dtypes(facts, theirs) -> None:
    """The companion's dtype fractions of GEMM time, applied to this trace's GEMM time."""
    gemm_us = float(facts.values.get("gemm_us_per_step") or 0.0)
    for name in DTYPE_FRACTIONS:
        facts.values[name] = theirs.values[name]
    facts.values["gemm_fp32_us_per_step"] = round(gemm_us * float(theirs.values["gemm_fp32_share"]), 3)
    facts.tables["gemm_dtypes"] = [dict(r, us_per_step=round(gemm_us * float(r["fraction"]), 3))
                                   for r in theirs.tables.get("gemm_dtypes") or []]
    facts.values["has_shapes"] = True
