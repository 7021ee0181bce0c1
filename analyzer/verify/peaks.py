"""The peak memory of a `--verify` window (verify/child.py), for the fixes that free memory
(verify/fixes.py `peak`: zero_grad(set_to_none=True), expandable_segments on a GPU).

Without the profiler (the windows are timed), and on a CPU, where torch keeps no allocator
statistics, the one peak a process can measure is its resident set's high-water mark: Linux's VmHWM
(/proc/self/status), set back to the current resident set at each window's start by writing "5" to
/proc/self/clear_refs. Its limits, said with the number: it counts the whole process in pages (the
interpreter, libraries, buffers as well as tensors), not the DataLoader's worker processes, and
memory the C allocator keeps after a free stays resident, so a window cannot measure below the level
it starts at: a fix that frees memory shows as a lower peak when the freed memory is reused in the
window (as freed gradients are by the next forward). On a GPU, torch's caching allocator measures
exactly: `torch.cuda.max_memory_allocated` / `max_memory_reserved` after `reset_peak_memory_stats`.
Elsewhere (no /proc) nothing is measured and the window's peak is None.
"""

from __future__ import annotations

import re
import sys
from typing import Optional

_HWM = re.compile(r"^VmHWM:\s+(\d+)\s+kB", re.MULTILINE)


def _cuda():
    torch = sys.modules.get("torch")  # never imported here: the child has imported it
    try:
        return torch.cuda if torch is not None and torch.cuda.is_initialized() else None
    except Exception:
        return None


def reset() -> None:
    """A window starts: its peaks from here."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    cuda = _cuda()
    if cuda is not None:
        try:
            cuda.reset_peak_memory_stats()
        except Exception:
            pass


def rss_high_water() -> Optional[int]:
    """The process's peak resident set since the last `reset`, in bytes (None without /proc)."""
    try:
        with open("/proc/self/status") as f:
            m = _HWM.search(f.read())
    except OSError:
        return None
    return int(m.group(1)) * 1024 if m else None


def read() -> dict:
    """The window's peaks: `rss_bytes` always (None without /proc); on a GPU in use,
    `cuda_allocated_bytes` and `cuda_reserved_bytes`."""
    out = {"rss_bytes": rss_high_water()}
    cuda = _cuda()
    if cuda is not None:
        try:
            out.update(cuda_allocated_bytes=int(cuda.max_memory_allocated()),
                       cuda_reserved_bytes=int(cuda.max_memory_reserved()))
        except Exception:
            pass
    return out
