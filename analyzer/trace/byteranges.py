"""Cut the `traceEvents` array of a large trace into byte ranges without decoding it.

Splitting a 2M-event document into one raw slice per event (kineto.split_document) is a sequential
pass that costs as much as reading the file, and every chunk must then be joined back together. Here
a regex finds the array and cuts it between two events (`}` `,` `{`, any whitespace), so the forked
workers start at once and each decodes only its own bytes, straight from the page cache.

The cuts are guesses that decoding proves:
- the header, i.e. the document with the array replaced by a one-element sentinel, must decode with
  exactly that sentinel as `traceEvents`, which pins the array's true start and end and proves it is
  the top-level key the sequential path reads (not a nested one, nor an earlier duplicate);
- every range must then decode as a list of complete JSON values. The first range starts at the
  array's true start, and a range that decodes ends at a true boundary between elements (a cut inside
  a string or a nested object leaves it unterminated), so by induction every cut is right.
When a check fails the caller falls back to the sequential split, which also reports bad JSON well.
"""

from __future__ import annotations

import mmap
import re
from typing import Optional

import msgspec

RANGE_BYTES = 16 << 20  # at most ~80k events of a typical trace per worker task
PIECE_BYTES = 1 << 20  # decoded at a time within a range: its objects stay in the CPU cache (docs/perf.md)
MIN_BYTES = 16 << 20  # below this, forking workers costs about what they save (docs/perf.md)
_START = re.compile(rb'"traceEvents"\s*:\s*\[')
CUT = re.compile(rb"\}\s*,\s*\{")  # between two objects
_TAIL_BYTES = 1 << 20  # the array's closing bracket is looked for in the document's last MiB
_TAIL_TRIES = 64


def plan(buf, header_decoder: msgspec.json.Decoder, size: Optional[int] = None) -> Optional[tuple]:
    """(header, [(start, end), ...]) byte ranges covering the array's elements, or None when the
    document does not look like `{..., "traceEvents": [...], ...}` with the array found."""
    first = array_start(buf)
    found = None if first is None else array_end(buf, first, header_decoder)
    if found is None:
        return None
    header, end = found
    return header, list(cuts(buf, first, end, size or RANGE_BYTES))


def array_start(buf, end: Optional[int] = None) -> Optional[int]:
    """The offset just after the array's "[" (searched before `end`), or None."""
    m = _START.search(buf, 0, len(buf) if end is None else end)
    return None if m is None else m.end()


def array_end(buf, first: int, header_decoder: msgspec.json.Decoder) -> Optional[tuple]:
    """(header, offset of the array's "]"), or None; `first` is array_start's answer."""
    return _array_end(buf, first, bytes(buf[:first]), header_decoder)


def range_size(total: int, jobs: int) -> int:
    """About four ranges per worker (balanced work), within [PIECE_BYTES, RANGE_BYTES]."""
    return min(RANGE_BYTES, max(PIECE_BYTES, total // (4 * jobs)))


def cuts(buf, start: int, end: int, size: int):
    """(start, end) of consecutive runs of about `size` bytes of array elements, cut between two."""
    while start + size < end and (cut := CUT.search(buf, start + size, end)) is not None:
        yield start, cut.start() + 1
        start = cut.end() - 1
    yield start, end


def pieces(buf, start: int, end: int, size: Optional[int] = None):
    """One range as JSON array documents of about `size` bytes each (cut like the ranges). Pages of a
    memory-mapped file are let go once copied: they stay in the page cache, not in this process."""
    for a, b in cuts(buf, start, end, size or PIECE_BYTES):
        out = blob(buf, a, b)
        if isinstance(buf, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
            low = a - a % mmap.PAGESIZE
            buf.madvise(mmap.MADV_DONTNEED, low, b - low)
        yield out


class _Phase(msgspec.Struct):
    ph: str  # what makes an object a trace event


_EVENT = msgspec.json.Decoder(_Phase)
_LAST_EVENT_BYTES = 1 << 16  # the array's last element is looked for this far back
_SPACE = b" \t\r\n"


def _array_end(buf, first: int, prefix: bytes, header_decoder) -> Optional[tuple]:
    """The header and the offset of the array's "]", searched from the document's end: a "]" after
    which the document, with the array emptied, decodes as a header whose traceEvents is empty, and
    before which comes an event (or nothing). Lists after the array (Kineto writes deviceProperties or
    trace warnings there in some versions) pass the first test but not the second."""
    end, low = len(buf), max(first, len(buf) - _TAIL_BYTES)
    for _ in range(_TAIL_TRIES):
        end = buf.rfind(b"]", low, end)
        if end < 0:
            return None
        if not _after_an_event(buf, first, end):
            continue
        try:  # a sentinel element: the array cut out must be the one the top level keeps
            header = header_decoder.decode(prefix + _SENTINEL + bytes(buf[end:]))
        except (msgspec.DecodeError, UnicodeError, RecursionError):
            continue
        if not _is_sentinel(header.traceEvents):
            return None  # a nested or an earlier duplicate "traceEvents": the sequential path reads the document
        header.traceEvents = []
        return header, end
    return None


_SENTINEL = b"0"


def _is_sentinel(events) -> bool:
    return isinstance(events, list) and len(events) == 1 and bytes(events[0]) == _SENTINEL


def _after_an_event(buf, first: int, end: int) -> bool:
    """Whether the elements before `end` are none, or end with an object that has a "ph"."""
    last = end - 1
    while last >= first and buf[last] in _SPACE:
        last -= 1
    if last < first:
        return True  # an empty array
    if buf[last] != 0x7D:  # "}"
        return False
    window = max(first, end - _LAST_EVENT_BYTES)
    start = first
    for cut in CUT.finditer(buf, window, end):
        start = cut.end() - 1
    if start == first and window > first:
        return False  # the last element is too long to find: not the usual layout
    try:
        _EVENT.decode(bytes(buf[start:last + 1]))
    except (msgspec.DecodeError, UnicodeError, RecursionError):
        return False
    return True


def blob(buf, start: int, end: int) -> bytearray:
    """One range as a JSON array document (one copy of its bytes)."""
    out = bytearray(end - start + 2)
    out[0], out[-1] = 0x5B, 0x5D  # "[" and "]"
    out[1:-1] = memoryview(buf)[start:end]
    return out
