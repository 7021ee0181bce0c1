"""How a trace document is cut for decoding, and by whom (see docs/perf.md).

- With workers, a large plain document is cut into byte ranges (byteranges.py) that forked workers
  decode straight from the memory-mapped file; a large .json.gz is inflated into shared memory while
  the workers decode the ranges already inflated (gzstream.py).
- Otherwise, and whenever a range does not decode: the top level is decoded once with every event
  left as a raw slice (kineto.split_document), and the slices are decoded CHUNK events per task (in
  workers too when there are enough chunks). This path also words every error about bad JSON.
"""

from __future__ import annotations

import contextlib
import os
import zlib
from functools import partial
from pathlib import Path
from typing import Callable, Optional

from ..errors import TraceError
from . import byteranges, gzstream, kineto, workers
from .memory_child import MemoryChild

CHUNK = 100_000  # events per task on the sequential path (and per progress step)
PIECE = 5_000  # events decoded at a time: their objects stay in the CPU cache while columns are read
MIN_PARALLEL_CHUNKS = 4  # below this, forking workers costs more than it saves


def _identity(columns: dict) -> dict:
    return columns


def decode_events(path: Path, raw, warnings: list, transform: Callable = _identity, jobs: int = 1,
                  progress: Optional[Callable[[int, int], None]] = None,
                  idle: Optional[Callable[[], None]] = None) -> tuple:
    """(header, `transform(columns)` of each chunk of events in document order, entries of traceEvents)
    for the file as read by kineto.read_file (closed here). Columns: X events as arrays and lists, M
    events as tuples. `progress(done, total)` counts bytes or events: only the ratio means anything.
    `idle()` is called in this process once workers decode (not at all when none do)."""
    parallel = jobs > 1 and workers.can_fork()
    done, buf, ranges_tried = None, raw, False
    if isinstance(raw, kineto.MappedFile):  # cut on the mapping; each range read (pread) by a worker
        ranges_tried = True
        with contextlib.closing(raw):
            if parallel:
                done = _ranges(path, raw.map, partial(_file_pieces, raw.fd), transform, jobs, progress, idle)
            if done is None:
                buf = raw.read_all()  # the sequential path decodes private bytes, never the mapping
    elif raw[:2] == kineto.GZIP_MAGIC:
        done, inflated = _inflating(path, raw, transform, jobs, progress, idle) if parallel else (None, None)
        ranges_tried = inflated is not None  # inflated while cutting: the ranges failed already
        if done is None:
            buf = inflated if ranges_tried else kineto.inflate(path, raw)
    if done is None and parallel and not ranges_tried:
        done = _ranges(path, buf, partial(_span_pieces, buf), transform, jobs, progress, idle)
    if done is not None:
        header, outs, entries, new = done
        warnings.extend(w for w in new if w not in warnings)
        return header, outs, entries
    return _sequential(path, buf, warnings, transform, jobs if parallel else 1, progress, idle)


def _ranges(path: Path, buf, pieces_of: Callable, transform, jobs: int, progress, idle) -> Optional[tuple]:
    """(header, outputs, entries, warnings) with the document cut into byte ranges (byteranges.py) that
    forked workers decode, or None when it is small, cannot be placed, or a range does not decode."""
    if len(buf) < byteranges.MIN_BYTES:
        return None
    planned = byteranges.plan(buf, kineto._HEADER, byteranges.range_size(len(buf), jobs))
    if planned is None:
        return None
    # with workers the allocator's events are decoded apart, off the critical path (memory_child.py): its
    # process forked first (the smallest process, no threads yet), the workers leave those events to it
    child = MemoryChild(path, pieces_of, planned[1])
    done = workers.run(path, pieces_of, planned[1], transform, jobs, _end, len(buf), progress, fallible=True,
                       idle=idle, memory=False)
    return None if done is None else (planned[0], *_with_memory(done, child))


def _with_memory(done: Optional[tuple], child: MemoryChild) -> Optional[tuple]:
    """The workers' (outputs, entries, warnings), the first output carrying the memory child (model.py
    asks it when the analysis reads the allocator's events); the child ended when not needed."""
    if done is None or not done[0]:
        child.cancel()
    else:
        done[0][0][0]["memory"] = child
    return done


def _span_pieces(buf, span: tuple):
    return byteranges.pieces(buf, *span)


def _file_pieces(fd: int, span: tuple):
    start, end = span
    data = os.pread(fd, end - start, start)  # the file may have been cut short since it was planned
    if len(data) != end - start:
        raise TraceError(f"fd {fd}", "the file changed while it was read")  # fallible: the caller reads it again
    return byteranges.pieces(data, 0, len(data))


def _end(span: tuple) -> int:
    return span[1]


def _inflating(path: Path, gz, transform, jobs: int, progress, idle) -> tuple:
    """(header, outputs, entries, warnings) decoded while the document is inflated, or None; and
    the inflated document when that much was done (the fallback then starts from it)."""
    buf = gzstream.shared_buffer(gz)
    if buf is None:
        return None, None
    stream = gzstream.Stream(gz, buf, byteranges.range_size(len(buf), jobs))
    total = len(buf)
    spans: list = []  # for the memory child, forked once the workers are done (no pool thread then)
    with workers.Decoder(path, partial(_span_pieces, buf), transform, jobs, fallible=True,
                         memory=False) as decoder:
        try:
            for span in stream:
                spans.append(span)
                decoder.submit(span)
                if progress is not None:
                    progress(stream.pos // 2, total)  # the first half of the bar: inflating
        except zlib.error:
            return None, None  # corrupt: kineto.inflate says so
        finished = stream.finish(kineto._HEADER)
        if finished is None:
            return None, buf if stream.complete else None
        header, rest = finished
        for span in rest:
            spans.append(span)
            decoder.submit(span)
        done = decoder.results(lambda span: (total + span[1]) // 2, total, progress, idle)
    if done is None:
        return None, buf
    return (header, *_with_memory(done, MemoryChild(path, partial(_span_pieces, buf), spans))), None


def _sequential(path: Path, buf, warnings: list, transform, jobs: int, progress, idle) -> tuple:
    header, parts = kineto.split_document(path, buf, warnings)
    starts = range(0, len(parts), CHUNK)
    outs, _, new = workers.run(path, partial(_parts_pieces, parts), starts, transform,
                               jobs if len(starts) >= MIN_PARALLEL_CHUNKS else 1,
                               lambda i: min(i + CHUNK, len(parts)), len(parts), progress, idle=idle)
    warnings.extend(w for w in new if w not in warnings)
    return header, outs, len(parts)


def _parts_pieces(parts: list, i: int):
    """Chunk i of the sequential path as JSON array documents of PIECE events each."""
    stop = min(i + CHUNK, len(parts))
    return (b"[" + b",".join(parts[j:min(j + PIECE, stop)]) + b"]" for j in range(i, stop, PIECE))
