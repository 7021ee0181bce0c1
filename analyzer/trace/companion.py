"""The stacks companion of a trace: a short second trace recorded with Python stacks, beside the main one.

`perfsleuth run` and `profile()` record the window that feeds shares and verdict without Python stacks
(they cost most of the profiler's overhead) and then a few steps with stacks, for source lines only
(docs/run.md). Before that, a memory window (`trace.memory.pt.trace.json.gz`, named by `perfsleuth.memory_trace`)
records allocations; a listing leaves it out like the stacks companion. The companion of `trace.pt.trace.json.gz` is `trace.stacks.pt.trace.json.gz` in the same
folder; the main trace names it in its metadata (`perfsleuth.stacks_trace`). A directory listing leaves a
companion out when its main trace is there, and perfsleuth's own report.json, so `analyze DIR` of a run's
output folder gives that run's report (and `diff DIR_A DIR_B` compares two runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..errors import TraceError
from . import files

MAIN_MARK, STACKS_MARK = ".pt.trace.json", ".stacks.pt.trace.json"
MEMORY_MARK = ".memory.pt.trace.json"  # the memory window's trace (record/memory_window.py)


def companion_name(main: str, mark: str = STACKS_MARK) -> str:
    """`rank0.pt.trace.json.gz` -> `rank0.stacks.pt.trace.json.gz` (any other name: `X.stacks.pt.trace.json.gz`);
    with `mark=MEMORY_MARK`, `rank0.memory.pt.trace.json.gz`."""
    if MAIN_MARK in main and STACKS_MARK not in main and MEMORY_MARK not in main:
        return main.replace(MAIN_MARK, mark, 1)
    stem = main[: -len(".json.gz")] if main.endswith(".json.gz") else main.removesuffix(".json")
    return f"{stem}{mark}.gz"


def memory_name(main: str) -> str:
    """`rank0.pt.trace.json.gz` -> `rank0.memory.pt.trace.json.gz`: the memory companion."""
    return companion_name(main, MEMORY_MARK)


def main_of(companion: Path) -> Optional[Path]:
    """The main trace a companion (stacks or memory) belongs to (None when `companion` is not named like one)."""
    name = companion.name
    for mark in (STACKS_MARK, MEMORY_MARK):
        if mark in name:
            return companion.with_name(name.replace(mark, MAIN_MARK, 1))
    return None


def without_companions(files: list) -> list:
    """`files` less the stacks companions whose main trace is among them, and less perfsleuth's own JSON
    reports (a run's output folder holds report.json beside the traces)."""
    present = set(files)
    return [f for f in files if main_of(f) not in present and not is_perfsleuth_report(f)]


def is_perfsleuth_report(path: Path) -> bool:
    """A JSON document perfsleuth wrote (report@1, report-set@1, diff@1): its first key is the schema."""
    if not path.name.endswith(".json"):
        return False
    try:  # opened as a regular file only: a FIFO named *.json must not hang the listing (docs/robustness.md)
        with files.open_regular(path) as f:
            head = f.read(256)
    except (OSError, TraceError):
        return False
    return head.lstrip(b"\xef\xbb\xbf \t\r\n{").startswith(b'"schema": "perfsleuth/')


def companion_of(trace_path: str, run_metadata: dict) -> Optional[Path]:
    """The stacks companion a trace names in its metadata, when that file is there beside it."""
    name = run_metadata.get("stacks_trace") if isinstance(run_metadata, dict) else None
    if not isinstance(name, str) or not name or Path(name).name != name:  # a bare file name, nothing else
        return None
    path = Path(trace_path).parent / name
    return path if path.is_file() else None
