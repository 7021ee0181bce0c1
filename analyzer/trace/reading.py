"""A trace file (or URL) to its decoded column chunks, without pandas: what load_trace does before the
event table is built (model.build_trace).

A large trace is decoded in forked workers (document.py); `idle` is called once in this process while
they work, so that the analysis can be imported meanwhile (api.analyze_file): the workers, forked
before it, carry only what decoding needs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, NamedTuple, Optional, Union

from . import columns, document, encodings, kineto, sources


class Decoded(NamedTuple):
    path: Union[str, Path]
    header: kineto.Header
    outs: list  # columns.chunk_columns of each chunk, in document order
    entries: int  # entries of traceEvents, all phases
    warnings: list


def read_events(path: Union[str, os.PathLike], progress: Optional[Callable[[int, int], None]] = None,
                jobs: int = 1, idle: Optional[Callable[[], None]] = None) -> Decoded:
    """The decoded chunks of one trace file (.json, .json.gz, .bz2, .xz; gzip is detected by content)
    or URL. `progress(done, total)` after each chunk; `jobs` > 1 decodes a large trace's chunks in that
    many forked processes, and `idle()` runs here while they do (or after the decode, when none did)."""
    warnings: list[str] = []
    path = sources.local_path(os.fspath(path))
    if sources.is_url(path):
        buf = sources.read_url(path)  # bytes: decoded like a local file's
    else:
        path = Path(path)
        buf = kineto.read_file(path)  # regular files only; a missing file, a loop, a FIFO said as such
    buf = encodings.decompress(path, buf)  # bz2 / xz inflated within bounds; a zip, zstd, pickle ... named
    idled = idle is None

    def while_decoding() -> None:  # once: during the decode when workers run it, else after it
        nonlocal idled
        if not idled:
            idled = True
            idle()

    header, outs, entries = document.decode_events(path, buf, warnings, columns.chunk_columns, jobs, progress,
                                                   while_decoding)
    del buf  # the document (decode_events closed a mapped one) goes before the columns are assembled
    while_decoding()
    return Decoded(path, header, outs, entries, warnings)
