"""Source lines and input dtypes from the stacks companion: the short window `perfsleuth run` records with
Python stacks and input shapes after the analysed one (trace/companion.py). The analysed trace has neither
(they would slow the steps it measures): its findings take their locations from the companion's evidence
tables, and, without recorded input types, the GEMM dtype split (fractions of GEMM time, applied to the
analysed trace's own GEMM time) from the companion's."""

from __future__ import annotations

import logging

from ..analysis.attribution import attribute
from ..analysis.steps import find_steps
from ..errors import TraceError
from ..trace.companion import companion_of
from ..trace.model import Trace, load_trace

log = logging.getLogger(__name__)
DTYPE_FRACTIONS = ("gemm_fp32_share", "gemm_tf32_share", "gemm_reduced_share", "gemm_dtype_from_inputs")


def is_location_table(rows) -> bool:
    """An evidence table of source locations: rows with a file and a line (sync_sites, ...)."""
    return isinstance(rows, list) and bool(rows) and all(isinstance(r, dict) and "file" in r and "line" in r
                                                          for r in rows)


def join_companion(facts, trace: Trace) -> None:
    """Fill `facts`' empty location tables from the trace's stacks companion, when it has one and no stacks
    of its own (`has_stacks` then says that source lines are known); and its GEMM dtype split when the
    trace has no input types but the companion has (`has_shapes`)."""
    from .core import compute_facts

    if trace.has_stacks and trace.has_shapes:
        return
    path = companion_of(trace.path, trace.run_metadata)
    if path is None:
        return
    try:
        comp = load_trace(path)
    except TraceError as exc:
        log.warning("source lines: %s", exc)
        return
    steps = find_steps(comp)
    theirs = compute_facts(comp, steps, attribute(comp, steps))
    if comp.has_stacks and not trace.has_stacks:
        for name, rows in theirs.tables.items():
            if is_location_table(rows) and not facts.tables.get(name):
                facts.tables[name] = rows
        facts.values["has_stacks"] = True
    if comp.has_shapes and not trace.has_shapes and theirs.values.get("gemm_us_per_step"):
        _join_dtypes(facts, theirs)


def _join_dtypes(facts, theirs) -> None:
    """The companion's dtype fractions of GEMM time, applied to this trace's GEMM time."""
    gemm_us = float(facts.values.get("gemm_us_per_step") or 0.0)
    for name in DTYPE_FRACTIONS:
        facts.values[name] = theirs.values[name]
    facts.values["gemm_fp32_us_per_step"] = round(gemm_us * float(theirs.values["gemm_fp32_share"]), 3)
    facts.tables["gemm_dtypes"] = [dict(r, us_per_step=round(gemm_us * float(r["fraction"]), 3))
                                   for r in theirs.tables.get("gemm_dtypes") or []]
    facts.values["has_shapes"] = True
