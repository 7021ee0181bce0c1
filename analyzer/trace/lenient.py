"""The lenient decoding path: a chunk the typed Structs of kineto.py refuse (a phase they do not know, a
value of an odd type) is decoded as plain JSON and sanitised value by value into the same columns: an
integer that is not one becomes -1, a time that is not a number NaN, anything that is not an event
object is skipped (and counted)."""

from __future__ import annotations

import msgspec
import numpy as np

from .memory_decode import lax_memory_columns

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_LIST_OF_STR = msgspec.json.Encoder()


def _raw_list(v) -> bytes:
    """A list argument as JSON text (b"null" when it is anything else), as the strict path keeps it."""
    try:
        return _LIST_OF_STR.encode(v) if isinstance(v, list) else b"null"
    except (TypeError, ValueError, OverflowError):
        return b"null"


def _lax_int(v) -> int:
    if type(v) is int and _I64_MIN <= v <= _I64_MAX:
        return v
    if isinstance(v, str):
        try:
            x = int(v, 0)
            return x if _I64_MIN <= x <= _I64_MAX else -1
        except ValueError:
            return -1
    return -1


def _lax_float(v) -> float:
    """A number as float (huge ones stay huge: the loader calls them absurd); anything else NaN."""
    if type(v) is float:
        return v
    if type(v) is int:
        return float(v) if abs(v) < 1e300 else (float("inf") if v > 0 else float("-inf"))
    return float("nan")


def _is_id(v) -> bool:
    """A pid or tid the trace may use: an integer or a string (an object or a list is not one)."""
    return (type(v) is int and _I64_MIN <= v <= _I64_MAX) or type(v) is str or v is None


def _lax_str(v) -> str:
    return v if isinstance(v, str) else "" if v is None else str(v)


def lenient_columns(items: list) -> dict:
    """Sanitise value by value: anything that is not an event object is skipped."""
    evs = [e for e in items if isinstance(e, dict)]
    meta = [(e.get("pid"), e.get("tid"), e.get("name"),
             e["args"].get("name") if isinstance(e.get("args"), dict) else None)
            for e in evs if e.get("ph") == "M" and _is_id(e.get("pid")) and _is_id(e.get("tid"))]
    xs = [e for e in evs if e.get("ph") == "X"]
    args = [e["args"] if isinstance(e.get("args"), dict) else {} for e in xs]

    def arg(key):
        return np.array([_lax_int(a.get(key)) for a in args], dtype=np.int64)

    pid = [e.get("pid") for e in xs]
    return {
        "cat": [_lax_str(e.get("cat")) for e in xs],
        "name": [_lax_str(e.get("name")) for e in xs],
        "pid": np.array([_lax_int(p) for p in pid], dtype=np.int64),
        "tid": np.array([_lax_int(e.get("tid")) for e in xs], dtype=np.int64),
        "string_pid": np.array([isinstance(p, str) for p in pid], dtype=bool),
        "ts": np.array([_lax_float(e.get("ts")) for e in xs], dtype=np.float64),
        "dur": np.array([_lax_float(e.get("dur")) for e in xs], dtype=np.float64),
        "corr": arg("correlation"), "ext": arg("External id"), "bytes": arg("bytes"),
        "py_id": arg("Python id"), "py_parent": arg("Python parent id"),
        "input_type": [_LIST_OF_STR.encode([str(x) for x in t]) if isinstance(t := a.get("Input type"), list)
                       else b"null" for a in args],
        "input_dims": [_raw_list(a.get("Input Dims")) for a in args],
        "concrete": [_raw_list(a.get("Concrete Inputs")) for a in args],
        "pg": [None if a.get("Process Group Name") is None else _lax_str(a.get("Process Group Name")) for a in args],
        "seq": arg("Seq"),
        "peer": np.where((dst := arg("Dst Rank")) >= 0, dst, arg("Src Rank")),
        **lax_memory_columns(evs, _lax_int, _lax_float),
        "meta": meta,
        "skipped": len(items) - len(evs),
        "entries": len(items),
    }
