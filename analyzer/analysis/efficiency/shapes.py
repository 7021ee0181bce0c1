"""The inputs of cpu ops as columns: each op's FLOPs, bytes, family and dtype, computed once per
distinct (name, Input type, Input Dims + Concrete Inputs) signature and spread back to the events by
their category codes -- a step of thousands of ops repeats a few dozen signatures.

The trace keeps `Input Dims` and `Concrete Inputs` as raw JSON text (trace/columns.py: `in_shape`,
the two joined by a unit separator) and `Input type` joined by commas (`in_type`); both are decoded
here, only for the signatures of modelled ops.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np
import pandas as pd

from . import flops as fl

_DECODE = msgspec.json.Decoder()
FAMILIES = (fl.MATMUL, fl.CONV, fl.ATTENTION, fl.ELEMENTWISE, fl.NORM, fl.SOFTMAX, fl.REDUCE,
            fl.EMBEDDING, fl.COPY)


@dataclass
class OpModels:
    """Per event of the ops given to `op_models` (same order): the model's numbers, -1 / "" where
    none."""

    family: np.ndarray  # int8 index into FAMILIES, -1 unmodelled
    flops: np.ndarray  # int64 per call
    nbytes: np.ndarray  # int64 per call
    # int64: one id per distinct (name, types, shapes) signature, -1 unmodelled
    signature: np.ndarray
    table: pd.DataFrame  # one row per signature id: name, shape, dtype, family, flops, bytes


def modelled_names(names: pd.Series) -> np.ndarray:
    """Boolean mask over a categorical name column: the op has a FLOPs/bytes model (decided once per
    distinct name)."""
    cats = names.cat.categories
    known = np.fromiter((fl.family_of(str(c)) is not None for c in cats), dtype=bool,
                        count=len(cats))
    codes = names.cat.codes.to_numpy()
    if not len(cats):
        return np.zeros(len(names), dtype=bool)
    return (codes >= 0) & known[np.clip(codes, 0, None)]


def decode_signature(shape_text: str) -> tuple:
    """(Input Dims, Concrete Inputs) from the joined raw text ([] / [] when absent or not JSON)."""
    dims_text, _, concrete_text = shape_text.partition("\x1f")
    out = []
    for text in (dims_text, concrete_text):
        try:
            value = _DECODE.decode(text.encode()) if text else None
        except (msgspec.DecodeError, RecursionError):
            value = None
        out.append(value if isinstance(value, list) else [])
    return out[0], out[1]


def op_models(ops: pd.DataFrame) -> OpModels:
    """Models of the cpu ops in `ops` (columns name, in_type, in_shape: categoricals of the
    trace)."""
    n = len(ops)
    columns = ("name", "in_type", "in_shape")
    keys = np.stack([ops[c].cat.codes.to_numpy(np.int64) for c in columns], axis=1) \
        if n else np.zeros((0, 3), dtype=np.int64)
    uniq, inverse = (np.unique(keys, axis=0, return_inverse=True) if n
                     else (keys, np.zeros(0, np.int64)))
    inverse = np.asarray(inverse).reshape(-1)
    names, types, shapes = (ops[c].cat.categories for c in ("name", "in_type", "in_shape"))
    rows = []
    for i, (nc, tc, sc) in enumerate(uniq.tolist()):
        name = str(names[nc])
        dims, concrete = decode_signature(str(shapes[sc]) if sc >= 0 else "")
        type_list = str(types[tc]).split(",") if tc >= 0 else []
        got = fl.model(name, dims, type_list, concrete)
        if got is not None:
            rows.append((i, name, shape_text(dims), got[3], FAMILIES.index(got[0]), got[1], got[2],
                         fl.misaligned(name, dims), fl.score_softmax(name, dims)))
    table = pd.DataFrame(rows, columns=["sig", "name", "shape", "dtype", "family", "flops", "bytes",
                                        "misaligned", "scores"])
    family = np.full(len(uniq), -1, dtype=np.int8)
    fl_sig = np.zeros(len(uniq), dtype=np.int64)
    by_sig = np.zeros(len(uniq), dtype=np.int64)
    if len(table):
        at = table["sig"].to_numpy(np.int64)
        family[at] = table["family"].to_numpy(np.int8)
        fl_sig[at] = table["flops"].to_numpy(np.int64)
        by_sig[at] = table["bytes"].to_numpy(np.int64)
    ev_family = family[inverse] if n else np.zeros(0, np.int8)
    sig = np.where(ev_family >= 0, inverse, -1).astype(np.int64) if n else np.zeros(0, np.int64)
    return OpModels(family=ev_family, flops=fl_sig[inverse] if n else np.zeros(0, np.int64),
                    nbytes=by_sig[inverse] if n else np.zeros(0, np.int64), signature=sig,
                    table=table.set_index("sig"))


def shape_text(dims: list) -> str:
    """The tensor shapes of a call as text: '[8944, 1024] x [1024, 2816]' (scalars left out)."""
    parts = []
    for d in dims:
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            parts.append("[" + ", ".join(map(str, d)) + "]")
        elif isinstance(d, list) and d and all(isinstance(x, list) for x in d):  # a tensor list
            parts.append("(" + ", ".join("[" + ", ".join(map(str, s)) + "]" for s in d) + ")")
    return " x ".join(parts)
