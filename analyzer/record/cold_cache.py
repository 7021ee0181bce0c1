"""The cores' own caches emptied before each call the batched-op probe times (record/batched_probe.py, issue 39,
twelfth round).

A training step does not call one op on the same tensors again and again: between a batched op's calls run all
the step's other ops, and its inputs (saved for the backward, a gradient from another node) and its output (memory
the allocator last handed to some other tensor) are no longer in the core's cache. Timed back to back on the same
tensors, the probe had them there: on this project's 2-core machine, a `mul` of a [16, 16, 16, 16] tensor by a
number took 8 µs so and 30 µs in the heads rewrite's own step, its `softmax` 63 against 83, its `masked_fill` 66
against 86 (without the profiler, the rewrite's calls timed in place). With twice a core's per-core cache written
before each timed call: 24, 69 and 84. Every fitted miss of the eleventh round was a forecast too high, the model's
step after the rewrite 0.59-0.87 of the measured one.

`Evict(torch, threads)`: a scratch tensor of EVICT_TIMES the per-core cache (`core_cache_bytes`) per thread, which
its call writes (an in-place add: intra-op threads split it, each core writing its share).
"""

from __future__ import annotations

from pathlib import Path

SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")
FALLBACK = 2 << 20  # a core's L2 on today's x86 and Arm servers (1-2 MiB) when sysfs does not say
EVICT_TIMES = 2  # the scratch written is this many times the cache: an LRU-like cache keeps none of what was before
MOST = 64 << 20  # never more than this (a machine reporting a shared cache as a core's)


def _bytes(text: str) -> int:
    """'2048K' -> 2097152, '1M' -> 1048576, '512' -> 512; 0 when unreadable."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    try:
        return int(text.rstrip("KMG")) * scale
    except ValueError:
        return 0


def core_cache_bytes(root: Path = SYSFS) -> int:
    """The largest cache of one core (Linux sysfs: a data or unified cache of level 2 or lower); FALLBACK when none
    is readable. A level-3 cache is shared by the cores and holds what a step's other ops leave there; the probe
    empties only what a core keeps to itself."""
    best = 0
    try:
        for index in root.glob("index*"):
            try:
                level = int((index / "level").read_text())
                kind = (index / "type").read_text().strip()
                size = _bytes((index / "size").read_text())
            except (OSError, ValueError):
                continue
            if level <= 2 and kind in ("Data", "Unified"):
                best = max(best, size)
    except OSError:
        return FALLBACK
    return best or FALLBACK


class Evict:
    """Called before each timed call: writes a scratch tensor of EVICT_TIMES the per-core cache for each of
    `threads` (at most MOST bytes), so the timed op's tensors come from beyond the core's cache, as in a step."""

    def __init__(self, torch, threads: int, per_core: int | None = None):
        size = EVICT_TIMES * (per_core or core_cache_bytes()) * max(int(threads), 1)
        self.nbytes = min(size, MOST)
        self.scratch = torch.zeros(self.nbytes // 4, dtype=torch.float32)

    def __call__(self) -> None:
        self.scratch.add_(1.0)
