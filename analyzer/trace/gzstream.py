"""Inflate a .json.gz into memory that forked workers share, handing out byte ranges of the event
array as soon as they are inflated: decoding overlaps the inflation, which is one sequential stream
and would otherwise run before any decoding starts (0.75 s for the 28 MB x10 benchmark trace).

The ranges are cut as in byteranges.py and proved the same way (the header check once the document
is complete, then every range decoding); `finish` returns None when the stream is not one complete
gzip member of the size its trailer states, or the array cannot be placed, and the caller decodes
the document another way.
"""

from __future__ import annotations

import mmap
import zlib
from typing import Iterator, Optional

from ..config import LIMITS
from . import byteranges, files

IN_BYTES = 1 << 18  # compressed bytes inflated at a time (~4 MB of JSON)
_START_WITHIN = 16 << 20  # the array must start in the document's first 16 MB


def shared_buffer(gz) -> Optional[mmap.mmap]:
    """Anonymous shared memory (seen by workers forked after this) of the size the gzip trailer
    states (ISIZE: the size modulo 2**32), or None when that is small: inflating at once is as quick."""
    size = int.from_bytes(gz[-4:], "little") if len(gz) >= 18 else 0
    if size < byteranges.MIN_BYTES or size > LIMITS.inflate_ratio * len(gz) or size > files.max_document_bytes():
        return None  # small; or a bomb, which files.inflate refuses with the reason
    try:
        return mmap.mmap(-1, size)
    except (OSError, ValueError):
        return None


class Stream:
    """Iterating inflates `gz` into `buf` and yields (start, end) spans of the array's elements of
    about `size` bytes as soon as they are inflated; then `finish` gives the header and the rest."""

    def __init__(self, gz, buf: mmap.mmap, size: int):
        self.gz, self.buf, self.size = memoryview(gz), buf, size
        self.inflater = zlib.decompressobj(wbits=31)  # gzip framing
        self.pos = 0  # bytes inflated so far
        self.first: Optional[int] = None  # the array's first byte
        self.start: Optional[int] = None  # where the next span starts
        self.complete = False

    def __iter__(self) -> Iterator[tuple]:
        """Raises zlib.error on corrupt data."""
        for i in range(0, len(self.gz), IN_BYTES):
            if self.inflater.eof:
                break
            if not self._append(self.inflater.decompress(self.gz[i:i + IN_BYTES])):
                return
            yield from self._spans()
        if self._append(self.inflater.flush()):
            self.complete = self.inflater.eof and not self.inflater.unused_data and self.pos == len(self.buf)

    def _append(self, out: bytes) -> bool:
        if self.pos + len(out) > len(self.buf):  # bigger than the trailer said (over 4 GB, or several members)
            return False
        self.buf[self.pos:self.pos + len(out)] = out
        self.pos += len(out)
        return True

    def _spans(self) -> Iterator[tuple]:
        if self.start is None:
            if self.pos > _START_WITHIN:
                return  # not the usual layout: finish() says None
            self.first = self.start = byteranges.array_start(self.buf, self.pos)
            if self.start is None:
                return
        while self.start + self.size < self.pos:
            cut = byteranges.CUT.search(self.buf, self.start + self.size, self.pos)
            if cut is None:
                return
            yield self.start, cut.start() + 1
            self.start = cut.end() - 1

    def finish(self, header_decoder) -> Optional[tuple]:
        """(header, the remaining spans) once the whole document is in, or None."""
        if not self.complete or self.first is None:
            return None
        found = byteranges.array_end(self.buf, self.first, header_decoder)
        if found is None:
            return None
        header, end = found
        if self.start > end:  # (the next span starts after every span handed out ends)
            return None  # a span ran past the array: the cuts were not all between events
        return header, list(byteranges.cuts(self.buf, self.start, end, self.size))
