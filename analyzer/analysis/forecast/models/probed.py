"""What `perfsleuth run`'s probe timed (record/batched_probe.py, the trace's `batched_probe` metadata), matched to
the window's op calls (issue 39): per call, the ns of its share of the batched op.

- An entry of exact shapes times the calls of that name and those shapes: ns per call at the batch nearest the
  calls of its kind in the call's loop stretch (its `ladder`; the rewrite's op holds one loop's calls).
- An entry with `vary` times calls whose shapes differ in one size from call to call (an MoE's experts, each fed
  the tokens routed to it): the batched op was timed at the calls' median size. A call alike in every other
  dimension, whose varying dimensions all hold one size, costs that time scaled by its work over the timed
  item's (FLOPs for a matmul, bytes otherwise; `factors`). The model pads the calls batched together to the
  largest of their loop stretch (batched_work.loop_work): one batched matmul over uneven items does, as the
  MoE rewrites people write (tokens sorted by expert, padded to the busiest) do; CPU torch has no grouped GEMM.
"""

from __future__ import annotations

import re
from typing import Optional

import numpy as np

from ...efficiency import flops as fl
from ...efficiency.shapes import shape_text

_TENSOR = re.compile(r"\[([0-9, ]*)\]")


def _sizes(o: dict, field: str) -> list:
    """[(batch size, ns per call), ...] by size of one probe record: its batch and `ladder` (field="ladder"), its
    `wide` matmuls, or its batch and ladder timed back to back, the tensors in the cache (field="hot"; the batch and
    ladder where a trace's probe did not time that)."""
    if field == "hot" and not o.get("hot"):
        field = "ladder"
    batch, ns = o["batch"], o["ns"]
    return sorted(([(batch, float(ns) / batch)] if field == "ladder" else []) + [
        (int(b), float(t) / b) for b, t in (r for r in o.get(field) or [] if isinstance(r, list) and len(r) == 2)
        if isinstance(b, int) and isinstance(t, (int, float)) and b > 0 and t > 0])


def _ops(meta: dict):
    """The probe's records (dicts with a name, shapes and a positive batch), as the trace's metadata has them."""
    probe = meta.get("batched_probe") if isinstance(meta, dict) else None
    for o in (probe.get("ops") if isinstance(probe, dict) else None) or []:
        if isinstance(o, dict) and isinstance(o.get("name"), str) and isinstance(o.get("shapes"), list) \
                and isinstance(o.get("batch"), int) and o["batch"] > 0:
            yield o


def _records(meta: dict):
    """The probe's records with a time."""
    return (o for o in _ops(meta) if isinstance(o.get("ns"), (int, float)) and o["ns"] > 0)


def _vary(o: dict) -> Optional[tuple]:
    v = o.get("vary")
    if not isinstance(v, list) or not v or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(i, int) and i >= 0 for i in p) for p in v):
        return None
    return tuple(tuple(p) for p in v)


def probed(meta: dict, field: str = "ladder") -> dict:
    """{(op name, shapes as text): [(batch size, ns per call batched so), ...] by size} of the probe's records of
    exact shapes (the batch of a step's calls and its `ladder` of smaller ones; with field="wide", the one wide
    matmul at those sizes where it timed one; with field="hot", the batch and ladder with the tensors in the cache,
    `_sizes`); empty without a probe."""
    out = {}
    for o in _records(meta):
        if o.get("vary") is None and (sizes := _sizes(o, field)):
            out[(o["name"], shape_text(o["shapes"]))] = sizes
    return out


def copies(meta: dict) -> dict:
    """{(op name, shapes as text): ns per item of copying the batched output with the batch's dimension moved second
    (`copy_ns`)} of the probe's records of exact shapes; empty without."""
    return {(o["name"], shape_text(o["shapes"])): float(o["copy_ns"]) / o["batch"] for o in _ops(meta)
            if o.get("vary") is None and isinstance(o.get("copy_ns"), (int, float)) and o["copy_ns"] > 0}


def _masked(tensors: list, vary: tuple) -> str:
    return " x ".join("[" + ", ".join("*" if (k, j) in vary else str(x) for j, x in enumerate(d)) + "]"
                      for k, d in enumerate(tensors))


def _work(name: str, shapes: list, concrete) -> Optional[tuple]:
    types = ["float" if isinstance(d, list) and d else "Scalar" for d in shapes]
    got = fl.model(name, shapes, types, concrete if isinstance(concrete, list) else [])
    return None if got is None else (got[1], got[2])


def varying(meta: dict, field: str = "ladder") -> dict:
    """{op name: [(varying positions ((input, dim), ...), masked shapes text, [(batch size, ns per call), ...],
    (FLOPs, bytes) of the timed item)]} of the probe's records with `vary` (their batch and ladder, or with
    field="hot" the same with the tensors in the cache); empty without."""
    out: dict = {}
    for o in _records(meta):
        vary, sizes = _vary(o), _sizes(o, field)
        tensors = [d for d in o["shapes"] if isinstance(d, list) and d and all(isinstance(x, int) for x in d)]
        if vary is None or not sizes or any(k >= len(tensors) or j >= len(tensors[k]) for k, j in vary):
            continue
        work = _work(o["name"], o["shapes"], o.get("concrete"))
        if work is not None and min(work) > 0:
            out.setdefault(o["name"], []).append((vary, _masked(tensors, vary), sizes, work))
    return out


def _match(name: str, shape: str, flops: float, nbytes: float, families: list) -> Optional[tuple]:
    """(masked text, sizes, factor) of the family of varying shapes a call of `name` and `shape` belongs to:
    alike in every other dimension, one size in the varying ones; None otherwise."""
    if "(" in shape:
        return None
    tensors = [[int(x) for x in t.split(",")] if t.strip() else [] for t in _TENSOR.findall(shape)]
    matrix = fl.family_of(name) in fl.MATRIX_FAMILIES
    for vary, text, sizes, (f0, b0) in families:
        if any(k >= len(tensors) or j >= len(tensors[k]) for k, j in vary) \
                or len({tensors[k][j] for k, j in vary}) != 1 or _masked(tensors, vary) != text:
            continue
        return text, sizes, (flops / f0 if matrix else nbytes / b0)
    return None


def per_signature(m, exact: dict, families: Optional[dict] = None) -> dict:
    """{signature id of `m` (efficiency.shapes.OpModels): (key, entry, factor)} for the fp32 signatures the probe
    timed: `exact` ({(name, shapes text): entry}, `probed`), else a family of `varying` shapes (its entry scaled
    by `factor`: the call's work over the timed item's). `key` names what the call is batched with."""
    out = {}
    t = m.table
    if not len(t):
        return out
    for sig, name, shape, dtype, flops, nbytes in zip(t.index, t["name"], t["shape"], t["dtype"], t["flops"],
                                                     t["bytes"]):
        if dtype != "fp32":
            continue
        if (name, shape) in exact:
            out[sig] = ((name, shape), exact[(name, shape)], 1.0)
        elif families and name in families and (hit := _match(name, shape, flops, nbytes, families[name])):
            out[sig] = ((name, hit[0]), hit[1], hit[2])
    return out


def at(entry, count: float) -> float:
    """ns per call from a probe entry: a number, or [(batch size, ns per call), ...] whose size lies nearest
    `count` (the calls of its kind in the op's loop stretch: what the rewrite's op holds) on a log scale."""
    if not isinstance(entry, list):
        return float(entry)
    if not np.isfinite(count):
        return float(entry[-1][1])  # the largest
    sizes = np.log([b for b, _ in entry])
    return float(entry[int(np.argmin(np.abs(sizes - np.log(max(count, 1.0)))))][1])


def batch_keys(m, per_sig: dict) -> np.ndarray:
    """Per op of `m`, a number for what it is batched with (`per_signature`'s key): calls of one number in a loop
    stretch are one batched op; -1 for ops the probe did not time."""
    ids = {key: i for i, key in enumerate(dict.fromkeys(k for k, _, _ in per_sig.values()))}
    lookup = {sig: ids[key] for sig, (key, _, _) in per_sig.items()}
    return np.fromiter((lookup.get(s, -1) for s in m.signature.tolist()), dtype=np.int64, count=m.signature.size)


def factors(m, per_sig: dict) -> np.ndarray:
    """Per op of `m`, its `per_signature` factor (1 where the probe did not time it)."""
    f = {s: v[2] for s, v in per_sig.items()}
    return np.fromiter((f.get(s, 1.0) for s in m.signature.tolist()), dtype=np.float64, count=m.signature.size)


def measured_ns(m, inside: np.ndarray, per_sig: dict, counts: Optional[np.ndarray] = None,
                scale: Optional[np.ndarray] = None) -> np.ndarray:
    """Per op, the probe's ns per call for the ops in `inside` it timed (`per_signature`), at the batch nearest
    the op's `counts` (its batch's calls in its loop stretch; the largest batch without), times its `scale` (per
    op; `factors` without); NaN elsewhere."""
    out = np.full(inside.size, np.nan)
    if not per_sig:
        return out
    sig = m.signature
    hit = inside & np.isin(sig, list(per_sig))
    wanted = np.full(sig.size, np.inf) if counts is None else counts
    scale = factors(m, per_sig) if scale is None else scale
    out[hit] = [at(per_sig[s][1], c) * f for s, c, f in zip(sig[hit], wanted[hit], scale[hit])]
    return out
