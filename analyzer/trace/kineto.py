"""The Kineto Chrome-trace format: reading a file, its top level, and decoding pieces of its event
list into columns. The only module that knows the JSON; document.py decides how a document is cut.

A piece (~5k events, so they are still in the CPU cache when read out) is decoded into typed,
GC-untracked Structs that name only the fields the analysis reads (a union tagged by `ph` skips
flows, instants and counters undecoded), turned into numpy columns with C-level `map(attrgetter)`
loops, and dropped: no Python object per event is held for the whole file. Sane events take the
strict (fast) Structs; a piece that does not fit them (string timestamps, ids beyond int64, ...) is
decoded again with lenient Structs and sanitised value by value.
"""

from __future__ import annotations

import mmap
import os
import sys
from functools import partial
from itertools import chain, compress
from operator import attrgetter, is_
from pathlib import Path
from typing import Any, Optional, Union

import msgspec
import numpy as np

from ..errors import TraceError
from . import encodings, files
from .lenient import lenient_columns
from .memory_decode import MEMORY_INT_COLUMNS, _Instant, memory_columns  # noqa: F401

MMAP_BYTES = 1 << 20  # plain files from this size are memory-mapped rather than read


# --- strict structs: the fast path ---------------------------------------------------------------
class _Args(msgspec.Struct, gc=False):
    external_id: int = msgspec.field(default=-1, name="External id")
    correlation: int = -1
    bytes: int = -1
    python_id: int = msgspec.field(default=-1, name="Python id")
    python_parent_id: Optional[int] = msgspec.field(default=-1, name="Python parent id")
    # left undecoded (a slice of the buffer): few distinct values, each decoded once (joined_input_types)
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(b"null"), name="Input type")
    # likewise (analysis/efficiency): shapes and scalar arguments (stride, causal, ...)
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b"null"), name="Input Dims")
    concrete: msgspec.Raw = msgspec.field(default=msgspec.Raw(b"null"), name="Concrete Inputs")
    name: Optional[str] = None  # metadata events: process / thread name
    # Collectives (record_param_comms and, in newer traces, NCCL kernels): the process group, and the
    # collective's sequence number in it where the trace records one (analysis/ranks/summary.py matches on them).
    pg: Optional[str] = msgspec.field(default=None, name="Process Group Name")
    seq: int = msgspec.field(default=-1, name="Seq")
    # Point-to-point ops (send / recv): the peer's rank in the process group (analysis/ranks/p2p.py pairs them).
    dst_rank: int = msgspec.field(default=-1, name="Dst Rank")
    src_rank: int = msgspec.field(default=-1, name="Src Rank")


class _Complete(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event: the only kind the analysis times."""

    cat: str = ""
    name: str = ""
    pid: Union[int, str] = -1
    tid: Union[int, str] = -1
    ts: float = float("nan")
    dur: float = 0.0
    args: _Args = msgspec.field(default_factory=_Args)


class _Meta(msgspec.Struct, tag_field="ph", tag="M", gc=False):
    name: str = ""
    pid: Union[int, str] = -1
    tid: Union[int, str] = -1
    args: _Args = msgspec.field(default_factory=_Args)


def _skipped_phase(ph: str) -> type:
    """Other Chrome-trace phases (flows, instants, counters, ...): the decoder skips their content."""
    return msgspec.defstruct(f"_Phase_{ord(ph)}", [], tag_field="ph", tag=ph, gc=False)


# Tagged by "ph": msgspec picks the struct from the phase and skips what the analysis never reads.
# A phase not listed here sends its chunk to the lenient path below.
_EVENT = Union[(_Complete, _Meta, _Instant) + tuple(_skipped_phase(p) for p in "BEICbnestfPNODVvRc")]
# The same phases with the allocator's instants skipped (their columns decoded apart: memory_child.py), and
# with all but them skipped (what that decodes).
_TIMED_EVENT = Union[(_Complete, _Meta) + tuple(_skipped_phase(p) for p in "BEiICbnestfPNODVvRc")]
_MEMORY_EVENT = Union[(_Instant,) + tuple(_skipped_phase(p) for p in "XMBEICbnestfPNODVvRc")]


class Header(msgspec.Struct):
    """The top level of the document; each event is left undecoded (a raw slice of the buffer)."""

    traceEvents: Optional[list[msgspec.Raw]] = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    schemaVersion: Any = None
    roctracer_version: Any = None
    hip_runtime_version: Any = None
    perfsleuth: Any = None  # machine and loader facts recorded by `perfsleuth run` (record/trace_metadata.py)
    perfsleuth_final: Any = None  # keys of `perfsleuth` as they stood when run finished the file (record/outputs.py)
    profile_memory: Any = None  # torch's profiler option, recorded at the top level (1 when on)


_HEADER = msgspec.json.Decoder(Header)
_SPLIT = msgspec.json.Decoder(list[msgspec.Raw])
_STRICT = msgspec.json.Decoder(list[_EVENT])
_STRICT_TIMED = msgspec.json.Decoder(list[_TIMED_EVENT])
_STRICT_MEMORY = msgspec.json.Decoder(list[_MEMORY_EVENT])
_LAX = msgspec.json.Decoder(list[Any])  # anything at all; non-objects are skipped
INT_COLUMNS = ("pid", "tid", "corr", "ext", "bytes", "py_id", "py_parent", "seq", "peer")


GZIP_MAGIC = b"\x1f\x8b"


class MappedFile:
    """A large plain file: memory-mapped for the few small reads that place the cuts (byteranges.py),
    read by workers with pread (`fd`) and by the sequential path with read_all: decoding never runs on
    the mapping, so a file cut short meanwhile reads as bad JSON instead of killing the process (SIGBUS)."""

    def __init__(self, fh):
        self.map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self.fd = os.dup(fh.fileno())

    def __len__(self) -> int:
        return len(self.map)

    def read_all(self) -> bytes:
        size = os.fstat(self.fd).st_size
        return os.pread(self.fd, size, 0) if size else b""

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)


def read_file(path: Path):
    """The file as stored: a MappedFile for a large plain file, else its bytes (gzip left compressed).
    Only a regular file is read (files.open_regular)."""
    try:
        with files.open_regular(path) as fh:
            magic = fh.read(2)
            info = os.fstat(fh.fileno())
            if magic != GZIP_MAGIC and info.st_size >= MMAP_BYTES:
                try:
                    return MappedFile(fh)
                except (OSError, ValueError):
                    pass  # no mmap here (some file systems): read it
            raw = magic + fh.read()
    except OSError as exc:
        raise TraceError(path, files.describe_os_error(path, exc)) from None
    if not raw:
        raise TraceError(path, "empty file")
    return raw


def inflate(path: Path, raw):
    """`raw` gunzipped (within files.inflate's bounds) when it is gzip, else `raw`."""
    if raw[:2] != GZIP_MAGIC:
        return raw
    raw = files.inflate(path, raw)
    if not raw:
        raise TraceError(path, "empty file (after gunzip)")
    return raw


def _json_error(path: Path, exc: Exception) -> TraceError:
    if isinstance(exc, RecursionError):
        return TraceError(path, too_deep())
    msg = str(exc)
    if isinstance(exc, msgspec.ValidationError):
        return TraceError(path, f"not a PyTorch profiler trace ({msg})")
    return TraceError(path, f"not valid JSON ({msg})")


def too_deep() -> str:
    """The problem with a document nested deeper than the decoder goes (it recurses: RecursionError)."""
    return f"JSON nested too deeply (the limit is about {sys.getrecursionlimit():,} levels)"


def split_document(path: Path, raw: bytes, warnings: list) -> tuple[Header, list]:
    """Top level and the per-event raw slices. A bare JSON list of events is accepted (old traces). A byte-order
    mark is dropped and UTF-16/32 re-encoded first (encodings.text)."""
    raw = encodings.text(path, raw)
    try:
        return _split(path, raw)
    except RecursionError as exc:
        raise _json_error(path, exc) from None
    except msgspec.DecodeError as exc:
        if "UTF-8" not in str(exc):
            raise _json_error(path, exc) from None
    warnings.append("invalid UTF-8 bytes in the trace were replaced with U+FFFD")
    try:
        return _split(path, bytes(raw).decode("utf-8", errors="replace").encode("utf-8"))
    except (msgspec.DecodeError, RecursionError) as exc:
        raise _json_error(path, exc) from None


def _split(path: Path, raw: bytes) -> tuple[Header, list]:
    start = raw[:64].lstrip()
    first = start[:1]
    if first == b"[":
        if start[1:].lstrip()[:1] == b"[":  # rows, not events
            raise TraceError(path, "not a PyTorch profiler trace: a JSON list of lists, as in torch.profiler's memory "
                                   "timeline (export_memory_timeline's .raw.gz: [time, action, bytes, category] rows)")
        return Header(), _SPLIT.decode(raw)
    if first != b"{":
        msgspec.json.decode(raw)  # raises the decoder's own message for non-JSON
        raise TraceError(path, "not a PyTorch profiler trace (the JSON is not an object with 'traceEvents')")
    try:
        header = _HEADER.decode(raw)  # one pass: top level + the slice of every event
    except msgspec.ValidationError as exc:
        if "traceEvents" in str(exc):
            raise TraceError(path, "not a PyTorch profiler trace ('traceEvents' is not a list)") from None
        raise
    if header.traceEvents is None:
        raise TraceError(path, "not a PyTorch profiler trace (no 'traceEvents' list)")
    parts, header.traceEvents = header.traceEvents, None
    return header, parts


def merge(pieces: list) -> dict:
    """The columns of consecutive pieces as one chunk's."""
    if len(pieces) == 1:
        return pieces[0]
    out: dict = {}
    for key in dict.fromkeys(k for p in pieces for k in p):
        first = next(p[key] for p in pieces if key in p)
        if isinstance(first, np.ndarray):
            out[key] = np.concatenate([p[key] for p in pieces])
        elif isinstance(first, list):
            out[key] = list(chain.from_iterable(p[key] for p in pieces))
        else:  # counts: entries, skipped
            out[key] = sum(p.get(key, 0) for p in pieces)
    return out


def decode_piece(path: Path, blob: bytes, warnings: list, memory: bool = True) -> dict:
    """The columns of one piece (a JSON array of events); without the allocator's (`mem_*`) with
    `memory` False (memory_child.py decodes those)."""
    if memory:
        columns, blob = _strict(path, blob, warnings, _STRICT, _strict_columns)
    else:
        columns, blob = _strict(path, blob, warnings, _STRICT_TIMED, partial(_strict_columns, memory=False))
    if columns is not None:
        return columns
    columns = _lenient(path, blob)
    return columns if memory else {k: v for k, v in columns.items() if not k.startswith("mem_")}


def decode_memory_piece(path: Path, blob: bytes) -> dict:
    """The allocator's (`mem_*`) columns of one piece, the rest of its events skipped: what
    decode_piece gives of them (a piece whose allocator events do not fit the strict Structs is
    decoded leniently, as there)."""
    columns, blob = _strict(path, blob, [], _STRICT_MEMORY, lambda evs: memory_columns(evs, list(map(type, evs))))
    if columns is not None:
        return columns
    return {k: v for k, v in _lenient(path, blob).items() if k.startswith("mem_")}


def _strict(path: Path, blob: bytes, warnings: list, decoder, columns_of) -> tuple:
    """(`columns_of` the piece decoded by a strict `decoder`, the blob), or (None, the blob to decode
    leniently: with invalid UTF-8 replaced, said in `warnings`) when the piece does not fit the Structs."""
    try:
        return columns_of(decoder.decode(blob)), blob
    except msgspec.ValidationError:
        pass  # not a sane chunk: lenient decoding
    except RecursionError as exc:
        raise _json_error(path, exc) from None
    except msgspec.DecodeError as exc:
        if "UTF-8" not in str(exc):
            raise _json_error(path, exc) from None
        msg = "invalid UTF-8 bytes in the trace were replaced with U+FFFD"
        if msg not in warnings:
            warnings.append(msg)
        blob = blob.decode("utf-8", errors="replace").encode("utf-8")
    except (OverflowError, TypeError, ValueError):
        pass
    return None, blob


def _lenient(path: Path, blob: bytes) -> dict:
    try:
        return lenient_columns(_LAX.decode(blob))
    except (msgspec.DecodeError, RecursionError) as exc:
        raise _json_error(path, exc) from None


def _ints(values, n: int) -> np.ndarray:
    return np.fromiter(values, dtype=np.int64, count=n)


def _ids(values: list) -> np.ndarray:
    """Optional integer ids (JSON null allowed) -> int64 with -1 for null."""
    if None not in values:  # the common case (a C-level scan): no float round trip
        return np.fromiter(values, dtype=np.int64, count=len(values))
    arr = np.array(values, dtype=np.float64)  # None -> nan; ids stay exact below 2**53
    return np.where(np.isnan(arr), -1, arr).astype(np.int64)


def _int_or_string(values: list) -> tuple[np.ndarray, np.ndarray]:
    """int64 column (-1 for strings) and the mask of the strings."""
    strings = np.array([type(v) is str for v in values], dtype=bool)
    return np.array([-1 if type(v) is str else v for v in values], dtype=np.int64), strings


def _strict_columns(evs: list, memory: bool = True) -> dict:
    """Columns of the complete ("X") events of one chunk, and of the allocator's with `memory`;
    metadata ("M") events as tuples."""
    types = list(map(type, evs))  # C-level filters by type below: a piece holds ~5k events
    xs = evs if types.count(_Complete) == len(evs) else list(compress(evs, map(partial(is_, _Complete), types)))
    meta = [(e.pid, e.tid, e.name, e.args.name) for e in compress(evs, map(partial(is_, _Meta), types))] \
        if types.count(_Meta) else []
    n = len(xs)
    args = list(map(attrgetter("args"), xs))
    try:
        pid, tid = _ints(map(attrgetter("pid"), xs), n), _ints(map(attrgetter("tid"), xs), n)
        string_pid = np.zeros(n, dtype=bool)
    except (TypeError, ValueError):  # "Spans"/"Traces" pseudo processes have string pids
        pid, string_pid = _int_or_string(list(map(attrgetter("pid"), xs)))
        tid, _ = _int_or_string(list(map(attrgetter("tid"), xs)))
    return {
        "cat": list(map(attrgetter("cat"), xs)),
        "name": list(map(attrgetter("name"), xs)),
        "pid": pid, "tid": tid, "string_pid": string_pid,
        "ts": np.fromiter(map(attrgetter("ts"), xs), dtype=np.float64, count=n),
        "dur": np.fromiter(map(attrgetter("dur"), xs), dtype=np.float64, count=n),
        "corr": _ints(map(attrgetter("correlation"), args), n),
        "ext": _ints(map(attrgetter("external_id"), args), n),
        "bytes": _ints(map(attrgetter("bytes"), args), n),
        "py_id": _ints(map(attrgetter("python_id"), args), n),
        "py_parent": _ids(list(map(attrgetter("python_parent_id"), args))),
        "input_type": list(map(attrgetter("input_type"), args)),  # msgspec.Raw
        "input_dims": list(map(attrgetter("input_dims"), args)),
        "concrete": list(map(attrgetter("concrete"), args)),
        **_comm_columns(list(map(attrgetter("pg"), args)), args, n),
        **(memory_columns(evs, types) if memory else {}),
        "meta": meta,
        "entries": len(evs),
    }


def _comm_columns(pgs: list, args: list, n: int) -> dict:
    """Process group (None when absent), sequence number (-1) and, of a send or recv, the peer's rank
    in the group (-1) of each event. Few events carry them: a piece without any (list.count runs in C)
    skips reading the rest."""
    if pgs.count(None) == n:
        return {"pg": pgs, "seq": np.full(n, -1, dtype=np.int64), "peer": np.full(n, -1, dtype=np.int64)}
    dst, src = _ints(map(attrgetter("dst_rank"), args), n), _ints(map(attrgetter("src_rank"), args), n)
    return {"pg": pgs, "seq": _ints(map(attrgetter("seq"), args), n), "peer": np.where(dst >= 0, dst, src)}


_ANY = msgspec.json.Decoder()


def joined_input_types(raws: list) -> list:
    """Each op's "Input type" (the JSON text as decoded: msgspec.Raw or bytes) as its types joined by
    commas, "" for none. Ops repeat a few signatures: each distinct text is decoded once."""
    texts = list(map(bytes, raws))
    joined: dict = {}
    for text in set(texts):
        try:
            value = _ANY.decode(text)
        except (msgspec.DecodeError, RecursionError):
            value = None
        joined[text] = ",".join(map(str, value)) if isinstance(value, list) and value else ""
    return list(map(joined.__getitem__, texts))
