"""`perfsleuth run` under torchrun: rank 0 adds the cross-rank report once every rank has written its
trace (docs/ranks.md).

Every rank writes `rank{r}.pt.trace.json.gz` into the launch's shared folder, atomically (a trace
that exists is complete). Rank 0 waits for the others' traces of this launch (written since the
launcher started) at most RANK_WAIT_S seconds, then analyses the traces it has: a rank that never
wrote one is named in a warning and left out, and nothing waits for ever.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from .paths import _launcher_start, rank_info, trace_name

RANK_WAIT_S = 120.0  # how long rank 0 waits for the other ranks' traces
POLL_S = 0.2


def with_other_ranks(report, trace_path: Path, warnings: Sequence[str] = (), wait_s: Optional[float] = None,
                     environ=os.environ, clock: Callable[[], float] = time.monotonic):
    """Rank 0 of a multi-rank launch: a ReportSet of every rank that wrote its trace (with the
    cross-rank report), and the one-line note about ranks that did not (None when all did). Other
    processes, or a launch of one rank: `report` as it is."""
    rank, world = rank_info(environ)
    if rank != 0 or not world or world < 2:
        return report, None
    folder = Path(trace_path).parent
    paths = {r: folder / trace_name(r) for r in range(world)}
    since = _launcher_start() or 0.0
    deadline = clock() + (RANK_WAIT_S if wait_s is None else wait_s)
    missing = _missing(paths, since)
    while missing and clock() < deadline:
        time.sleep(POLL_S)
        missing = _missing(paths, since)
    note = None
    if missing:
        waited = RANK_WAIT_S if wait_s is None else wait_s
        note = (f"rank(s) {', '.join(map(str, missing))} wrote no trace within {waited:g} s: the cross-rank "
                f"report covers rank(s) {', '.join(str(r) for r in paths if r not in missing)}")
    found = [p for r, p in paths.items() if r not in missing]
    if len(found) < 2:
        return report, note
    from ..api import analyze_files

    result = analyze_files(found, jobs=1, root=str(folder))  # no fork from a process running torch
    if hasattr(result, "reports"):
        result.reports[0].steps.warnings.extend(warnings)
        if note and result.cross is not None:
            result.cross.warnings.append(note)
    return result, note


def _missing(paths: dict, since: float) -> list:
    out = []
    for r, p in paths.items():
        try:
            if p.stat().st_mtime + 1.0 < since:  # a trace left by an earlier launch into this folder
                out.append(r)
        except OSError:
            out.append(r)
    return out
