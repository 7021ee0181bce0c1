"""An analysis allocates each large array once and reads it a few times: transparent huge pages cost
more than they give there.

numpy asks the kernel for transparent huge pages (madvise) on every array of 4 MB and more. Where THP
runs in "madvise" mode with synchronous defrag (a common default), a page fault on such an array may
first compact memory, and the analysis of a large trace takes many such faults. Measured on the
x20 benchmark trace (857 MB, docs/perf.md): `perfsleuth analyze` 4.7-5.0 s with huge pages, 4.25-4.5 s
without; no difference on x10. The setting is numpy's own and process-wide, so it is restored on exit.
"""

from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def without_huge_pages() -> Iterator[None]:
    try:
        from numpy._core.multiarray import _set_madvise_hugepage  # numpy 2
    except ImportError:
        try:
            from numpy.core.multiarray import _set_madvise_hugepage  # numpy 1
        except ImportError:  # pragma: no cover - a numpy without the switch
            yield
            return
    previous = _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(previous)


def release_free_memory() -> None:
    """Hand the heap memory freed since the start back to the operating system (glibc's malloc_trim).

    Decoding a large trace allocates and frees many column chunks; glibc keeps the freed pages in its
    heap (its mmap threshold grows past the chunks' size after the first large free), and the
    analysis then reaches its peak on top of them: on the x10 benchmark trace 128 MB of the 350 MB
    held after loading were free memory (docs/perf.md). Elsewhere than glibc, nothing happens."""
    global _TRIM
    if _TRIM is None:
        try:
            import ctypes

            _TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM:
        _TRIM(0)


_TRIM = None  # glibc's malloc_trim once found, False where there is none
