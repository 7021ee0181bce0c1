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
