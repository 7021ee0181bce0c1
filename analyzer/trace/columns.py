"""A decoded piece's columns as the event table will hold them, without pandas: the event kinds, and
names, input types and process groups as codes into sorted categories.

This is the transform the decoding workers run (`chunk_columns`). It imports no pandas, so that a
large trace's workers can be forked before pandas and the analysis are imported: the main process
imports them while the workers decode (reading.read_events' `idle`). model.py turns the codes into
categoricals when it assembles the table.
"""

from __future__ import annotations

from itertools import compress

import msgspec
import numpy as np

from . import devices, kineto

# --- normalised event kinds ---------------------------------------------------------------------
KERNEL, MEMCPY, MEMSET, RUNTIME, CPU_OP, ANNOTATION, GPU_ANNOTATION, PYTHON, DEVICE_SYNC, OTHER = range(10)
KIND_NAMES = (
    "kernel", "memcpy", "memset", "runtime", "cpu_op", "annotation", "gpu_annotation", "python",
    "device_sync", "other",
)
DEVICE_KINDS = (KERNEL, MEMCPY, MEMSET)  # work that occupies the device
KIND_OF_CAT = {
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY, "memcpy": MEMCPY,
    "gpu_memset": MEMSET, "memset": MEMSET,
    "cuda_runtime": RUNTIME, "runtime": RUNTIME, "cuda_driver": RUNTIME, "xpu_runtime": RUNTIME,
    "mtia_runtime": RUNTIME, "privateuse1_runtime": RUNTIME, "hip_runtime": RUNTIME,
    "cpu_op": CPU_OP, "operator": CPU_OP,
    "user_annotation": ANNOTATION,
    "gpu_user_annotation": GPU_ANNOTATION,
    "python_function": PYTHON,
    "cuda_sync": DEVICE_SYNC,
    "mtia_ccp_events": KERNEL,  # MTIA's device events: kernels, and (by name: devices.refine_kinds) copies
}
MEMORY_KEYS = ("mem_ts", "mem_oom") + kineto.MEMORY_INT_COLUMNS
_NULL = msgspec.Raw(b"null")  # an absent or null "Input Dims" / "Concrete Inputs" (kineto._Args)
FLOAT_COLUMNS = ("ts", "dur")  # µs as in the file until every chunk is in (the origin is the minimum)


def kinds(cats: list) -> np.ndarray:
    """The kind code of each event from its category (old capitalised ones too; unknown: OTHER)."""
    kind_of = {c: KIND_OF_CAT.get(str(c).lower(), OTHER) for c in set(cats)}
    return np.fromiter(map(kind_of.__getitem__, cats), dtype=np.int8, count=len(cats))


def coded(values: list) -> tuple:
    """(codes, categories) of a list of strings, the categories sorted: what pd.Categorical(values)
    holds, each value looked up by C-level calls (model.py makes the categorical from them)."""
    distinct = dict.fromkeys(values)  # hashed in C (a str keeps its hash): few
    if len(distinct) == 1:  # one value throughout
        return np.zeros(len(values), dtype=np.int64), list(distinct)
    categories, rank = _ranked(distinct)
    return _codes(rank, values), categories


def _ranked(distinct) -> tuple:
    """(the distinct values sorted, value -> its position there)."""
    categories = sorted(distinct)
    return categories, dict(zip(categories, range(len(categories))))


def _codes(rank: dict, values: list) -> np.ndarray:
    return np.fromiter(map(rank.__getitem__, values), dtype=np.int64, count=len(values))


def scattered_codes(n: int, at: np.ndarray, values: list, kept) -> tuple:
    """coded() of n strings that are "" but at the positions `at` (`values`), of those `kept` (a list
    of bools, or None for all): without a list of n strings where every one is kept."""
    if kept is not None:
        full = [""] * n
        for i, value in zip(at.tolist(), values):
            full[i] = value
        return coded(list(compress(full, kept)))
    distinct = dict.fromkeys(values)
    if len(at) < n:
        distinct[""] = None
    categories, rank = _ranked(distinct)
    codes = np.full(n, rank.get("", 0), dtype=np.int64)
    codes[at] = _codes(rank, values)
    return codes, categories


def chunk_columns(c: dict) -> tuple:
    """(columns of the complete events of one chunk, times still in float µs, with names, input types
    and process groups as (codes, categories); metadata tuples; count of skipped entries; device
    categories seen). Pure, and free of pandas: it runs in the decoding workers."""
    # Spans/Traces pseudo-processes (string pids) are the profiler's own bookkeeping, not work.
    keep = ~c["string_pid"]
    cols = {k: c[k][keep] for k in FLOAT_COLUMNS + kineto.INT_COLUMNS}
    kind = kinds(c["cat"])
    names = c["name"]
    seen = devices.categories_seen(c["cat"])
    if devices.MTIA_CATEGORY in seen:
        devices.refine_kinds(kind, c["cat"], np.array(names, dtype=object), MEMCPY, OTHER)
    ops = np.flatnonzero(kind == CPU_OP)
    in_type = kineto.joined_input_types(list(map(c["input_type"].__getitem__, ops.tolist())))
    kept = keep.tolist()
    every = all(kept)
    cols["kind"] = kind[keep]
    cols["name"] = coded(names if every else list(compress(names, kept)))
    cols["in_type"] = scattered_codes(len(names), ops, in_type, None if every else kept)
    ops = ops.tolist()
    cols["in_shape"] = _shape_codes(c["input_dims"], c["concrete"], ops, kept, every)
    cols["pg"] = _pg_codes(c["pg"], kept, every)
    # the allocator's instant events (memory.py); None when decoded apart (memory_child.py)
    cols["memory"] = {k: c[k] for k in MEMORY_KEYS} if "mem_ts" in c else None
    return cols, c["meta"], c.get("skipped", 0), seen


def shape_signatures(dims: list, concrete: list) -> list:
    """Each op's "Input Dims" and "Concrete Inputs" (raw JSON text) as one string, the two texts
    joined by a unit separator; "" when neither was recorded. Decoded by analysis/efficiency once per
    distinct signature, not here."""
    out = []
    for d, c in zip(map(bytes, dims), map(bytes, concrete)):
        both = d + b"\x1f" + c
        out.append("" if d == b"null" and c == b"null" else both.decode("utf-8", "replace"))
    return out


def _shape_codes(dims: list, concrete: list, ops: list, kept: list, every: bool) -> tuple:
    """(codes, categories) of the ops' shape signatures ("" for every other event). A chunk recorded
    without record_shapes (every value JSON null: list.count compares in C) skips the per-op strings."""
    n = sum(kept)  # none kept: no category at all, as coded([]) gives
    if n and dims.count(_NULL) == len(dims) and concrete.count(_NULL) == len(concrete):
        return np.zeros(n, dtype=np.int64), [""]
    sigs = shape_signatures(list(map(dims.__getitem__, ops)), list(map(concrete.__getitem__, ops)))
    return scattered_codes(len(dims), np.array(ops, dtype=np.int64), sigs, None if every else kept)


def _pg_codes(pgs: list, kept: list, every: bool) -> tuple:
    if pgs.count(None) == len(pgs):  # the common case: no collective in this chunk
        return np.zeros(sum(kept), dtype=np.int64), [""]
    values = ["" if p is None else p for p in pgs]
    return coded(values if every else list(compress(values, kept)))
