"""Where `perfsleuth run` writes: the rank under torchrun, the trace's file name, the default output
folder (shared by all ranks of one launch), and the no-clobber check made before the script runs."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional, Sequence

from ..render import safe_write

DEFAULT_ROOT = "perfsleuth-out"


def rank_info(environ=os.environ) -> tuple[Optional[int], Optional[int]]:
    """(rank, world size) under torchrun (RANK and WORLD_SIZE set), else (None, None)."""
    try:
        return int(environ["RANK"]), int(environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None, None


def trace_name(rank: Optional[int]) -> str:
    return "trace.pt.trace.json.gz" if rank is None else f"rank{rank}.pt.trace.json.gz"


def default_out_dir(stem: str, root: Path = Path(DEFAULT_ROOT), now: Optional[float] = None) -> Path:
    """`perfsleuth-out/<script>-<timestamp>/`. Under torchrun every rank must pick the same folder:
    the timestamp is the launcher's (the ranks' common parent process) start time where it can be read."""
    rank, _ = rank_info()
    stamp = _launcher_start() if rank is not None else None
    stamp = stamp or (now if now is not None else time.time())
    base = root / f"{stem}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(stamp))}"
    if rank is not None:
        return base
    candidate, n = base, 2
    while candidate.exists():
        candidate, n = base.with_name(f"{base.name}-{n}"), n + 1
    return candidate


def _launcher_start() -> Optional[float]:
    """Start time (epoch seconds) of the parent process, from /proc (Linux); None elsewhere."""
    try:
        stat = Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
        return boot + int(stat[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def check_outputs(out_dir: Path, paths: Sequence[Optional[str]], force: bool) -> None:
    """Refuse before the script runs, not after: an existing non-empty folder or report file needs --force;
    a folder that cannot be written, or a target that is a device, is refused outright.
    Under torchrun the ranks share the folder and start at different moments: each replaces its own files."""
    from ..render.outputs import check_outputs as check_report_outputs

    torchrun = rank_info()[0] is not None
    check_report_outputs(out_dir=None if torchrun else out_dir, json_path=paths[0], html=paths[1],
                         markdown=paths[2], force=force)
    safe_write.check_target(out_dir / trace_name(rank_info()[0]), "trace", force=force or torchrun)
