"""What a file's first bytes say it is, before its JSON is decoded (docs/robustness.md).

- bz2 and xz are inflated here, within the bounds gzip has (files.check_inflated: at most 100 times the
  compressed size once 64 MiB are out, at most a share of the machine's memory); gzip is left to the
  gzip paths (document.py).
- zip, zstd, 7z, pickles and other formats are named, with what to do, instead of "invalid character".
- Text: a UTF-8 byte-order mark is dropped; UTF-16 and UTF-32 (with a byte-order mark, or UTF-16 without
  one) are re-encoded as UTF-8 (`text`, called on the document as decoded, gzip or not).
"""

from __future__ import annotations

import bz2
import codecs
import lzma

from ..errors import TraceError
from . import files

BZ2_MAGIC, XZ_MAGIC = b"BZh", b"\xfd7zXZ\x00"
_NAMED = (
    (b"PK\x03\x04", "a zip archive: unzip it first, or read the trace in it as zip://NAME::PATH"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed: decompress it first (zstd -d)"),
    (b"7z\xbc\xaf\x27\x1c", "a 7z archive: extract it first"),
    (b"\x04\x22\x4d\x18", "lz4-compressed: decompress it first (lz4 -d)"),
    (b"\x80\x04", "a Python pickle (torch's memory snapshot?), not a trace"),
    (b"\x80\x05", "a Python pickle (torch's memory snapshot?), not a trace"),
    (b"\x89HDF", "an HDF5 file, not a trace"),
    (b"SQLite format 3", "an SQLite database (an Nsight Systems export?), not a trace"),
)
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF8, "utf-8"),
         (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def _head(raw, n: int = 16) -> bytes:
    data = getattr(raw, "map", raw)  # a kineto.MappedFile: its mapping
    return bytes(data[:n])


def decompress(path, raw):
    """`raw` as read: bz2 and xz inflated (bounded), formats that are no trace named; anything else as it is."""
    head = _head(raw)
    if head.startswith(BZ2_MAGIC) and head[3:4].isdigit():
        return _inflate(path, raw, bz2.BZ2Decompressor(), "bz2")
    if head.startswith(XZ_MAGIC):
        return _inflate(path, raw, lzma.LZMADecompressor(), "xz")
    for magic, what in _NAMED:
        if head.startswith(magic):
            raise TraceError(path, f"is {what}")
    return raw


def _inflate(path, raw, inflater, name: str) -> bytes:
    """One stream inflated OUT_BYTES at a time, its size checked as it grows (files.check_inflated)."""
    if hasattr(raw, "read_all"):
        raw = raw.read_all()
    ceiling = files.max_document_bytes()
    data, out, pos = memoryview(raw), bytearray(), 0
    try:
        while not inflater.eof:
            if inflater.needs_input:
                if pos >= len(data):
                    raise TraceError(path, f"corrupt or truncated {name} data (the stream ends early)")
                chunk = data[pos:pos + files.IN_BYTES]
                pos += len(chunk)
            else:
                chunk = b""
            out += inflater.decompress(chunk, files.OUT_BYTES)
            files.check_inflated(path, len(out), pos, ceiling)
    except (OSError, EOFError, lzma.LZMAError, ValueError) as exc:
        raise TraceError(path, f"corrupt or truncated {name} data ({exc})") from None
    if not out:
        raise TraceError(path, f"empty file (after {name})")
    return bytes(out)


def text(path, raw):
    """The document as UTF-8 bytes: a byte-order mark dropped, UTF-16/32 re-encoded; others unchanged."""
    head = _head(raw, 4)
    for bom, codec in _BOMS:
        if head.startswith(bom):
            return _recode(path, raw, len(bom), codec)
    if len(head) >= 4 and head[0] in b"[{" and head[1] == 0 and head[3] == 0:
        return _recode(path, raw, 0, "utf-16-le")
    if len(head) >= 4 and head[1] in b"[{" and head[0] == 0 and head[2] == 0:
        return _recode(path, raw, 0, "utf-16-be")
    return raw


def _recode(path, raw, skip: int, codec: str) -> bytes:
    data = bytes(memoryview(raw)[skip:])
    if codec == "utf-8":
        return data
    try:
        return data.decode(codec).encode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(path, f"is not valid JSON: it reads as {codec.upper()} text (its first bytes), which does "
                               f"not decode ({exc.reason} at byte {exc.start + skip:,})") from None
