"""torch.compile in a trace: when it compiled, what ran compiled and what ran eager (docs/compile.md).

From the event names alone (trace/names.py; any trace recorded with torch >= 2.5 has them):

- **compile time**: the union of the compile events (`dynamo` / `entire_frame_compile` around one frame's
  compilation, `entire_backward_compile` around the lazy backward one, every `... (dynamo_timed)` range),
  split into parts by the first of guards > inductor > aot > backend > dynamo (tracing) that covers a
  moment, the rest `other`;
- **compilations**: the compile ids in the `..._data: compile_id=F/C` annotations: frame F's (C+1)-th
  compilation. C >= 1 is a **recompilation** (a guard of every earlier compilation of F failed). A
  compile that no `Torch-Compiled Region: F/C` follows ran out of budget (the recompile limit) or failed:
  the frame ran eager;
- **frame calls**: every `TorchDynamo Cache Lookup` is one call of a frame dynamo watches. It ran
  compiled when the next frame event on its thread (lookup or region) is a region; otherwise it ran
  **eager** (the recompile limit was reached, or its compilation failed or was skipped);
- **graph breaks**: a compiled region that holds other regions (the resume functions dynamo made at
  each break): one break per region inside an outermost one; the time inside a broken call outside
  its compiled graphs (`CompiledFunction`, `## Call CompiledFxGraph`) and compilation is the eager code
  between the graphs, with the re-entry costs (guards, prologues);
- **CUDA graph trees**: `CUDAGraphNode.record` (a record or re-record) and graph launches.

Everything is vectorised over events; `per_step` sums it over step windows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..trace.model import ANNOTATION, CPU_OP, RUNTIME, Trace
from ..trace.names import (CACHE_LOOKUP, COMPILE_PARTS, COMPILE_ROOTS, COMPILED_GRAPH, COMPILED_REGION_PREFIX,
                           CUDAGRAPH_LAUNCH, CUDAGRAPH_RECORD, DYNAMO_TIMED_SUFFIX, compile_id, compile_part,
                           is_compile_event, name_mask, region_id, used_categories)
from ..trace.selection import derived, of_kind
from . import intervals as iv

_GRAPH_RUN_PREFIX = "## Call CompiledFxGraph"
_SHIFT = np.int64(1) << np.int64(44)  # (thread, ts) as one sortable key: 2**44 ns is almost 5 hours


@dataclass
class Compiling:
    """What torch.compile did in one trace (times in the trace's int64 ns)."""

    spans: iv.Intervals  # all compile time, merged
    recompile_spans: iv.Intervals  # the compilations whose ids are recompilations (C >= 1)
    parts: dict  # COMPILE_PARTS + "other" -> Intervals: a partition of `spans`
    compiles: pd.DataFrame  # one row per compile id: frame, count, ts (its first event), failed
    lookups: pd.DataFrame  # ts, end, eager (bool): one row per frame call
    regions: pd.DataFrame  # outermost compiled regions: ts, end, frame, count, breaks, break_ns
    cudagraph_records: np.ndarray  # ts of each record / re-record
    cudagraph_launches: np.ndarray  # ts of each graph launch (runtime call)

    @property
    def seen(self) -> bool:
        """The trace shows torch.compile at work (compiling, or compiled frames being called)."""
        return bool(self.spans[0].size or len(self.lookups) or len(self.regions) or len(self.compiles))


def compiling_of(trace: Trace) -> Compiling:
    """The trace's `Compiling`, once per analysis (selection.derived)."""
    return derived(trace.events, ("compiling",), lambda: _compiling(trace))


def _named(ev: pd.DataFrame, predicate) -> pd.DataFrame:
    return ev[name_mask(ev["name"], predicate)]


def _compiling(trace: Trace) -> Compiling:
    ev = of_kind(trace.events, CPU_OP, ANNOTATION)
    comp = _named(ev, is_compile_event)
    spans = _span(comp)
    compiles, annotated = _compile_ids(comp)
    roots = _named(comp, lambda n: n in COMPILE_ROOTS)
    regions_all = _named(ev, lambda n: n.startswith(COMPILED_REGION_PREFIX))
    failed = _failed(compiles, regions_all)
    compiles = compiles.assign(failed=failed)
    recompile = _recompile_spans(roots, annotated)
    lookups = _named(ev, lambda n: n == CACHE_LOOKUP)
    graphs = _named(ev, lambda n: n == COMPILED_GRAPH or n.startswith(_GRAPH_RUN_PREFIX))
    rt = of_kind(trace.events, RUNTIME)
    return Compiling(
        spans=spans, recompile_spans=recompile, parts=_parts(comp, spans), compiles=compiles,
        lookups=_lookups(lookups, regions_all), regions=_outermost(regions_all, iv.union(_span(graphs), spans)),
        cudagraph_records=_named(comp, lambda n: n == CUDAGRAPH_RECORD + DYNAMO_TIMED_SUFFIX)["ts"].to_numpy(np.int64),
        cudagraph_launches=_named(rt, lambda n: n in CUDAGRAPH_LAUNCH)["ts"].to_numpy(np.int64))


def _span(df: pd.DataFrame) -> iv.Intervals:
    return iv.merge(df["ts"].to_numpy(np.int64), df["end"].to_numpy(np.int64))


def _per_name(df: pd.DataFrame, fn, fill) -> np.ndarray:
    """fn(name) once per distinct name the rows use, mapped back to rows."""
    codes, used = used_categories(df["name"])
    table = np.full(len(df["name"].cat.categories) + 1, fill, dtype=object)
    table[used] = [fn(c) for c in df["name"].cat.categories.take(used).tolist()]
    return table[codes]


def _compile_ids(comp: pd.DataFrame) -> tuple:
    """(one row per compile id (frame, count) with the time of its first annotation, every id annotation's
    ts and count): a compilation's forward and its lazy backward carry the same id."""
    ids = _per_name(comp, compile_id, None)
    hit = np.array([i is not None for i in ids], dtype=bool)
    pairs = np.array([i for i in ids[hit]], dtype=np.int64).reshape(-1, 2)
    seen = pd.DataFrame({"frame": pairs[:, 0], "count": pairs[:, 1], "ts": comp["ts"].to_numpy(np.int64)[hit]})
    first = seen.groupby(["frame", "count"], as_index=False)["ts"].min().sort_values("ts", kind="stable")
    return first.reset_index(drop=True).astype(np.int64), seen


def _failed(compiles: pd.DataFrame, regions: pd.DataFrame) -> np.ndarray:
    """Per compile id: no compiled region of that id starts after it (the compilation gave up or failed)."""
    if compiles.empty:
        return np.zeros(0, dtype=bool)
    rid = _per_name(regions, region_id, None)
    has = np.array([r is not None for r in rid], dtype=bool)
    ran = pd.DataFrame({"frame": [r[0] for r in rid[has]], "count": [r[1] for r in rid[has]],
                        "ts": regions["ts"].to_numpy(np.int64)[has]})
    latest = ran.groupby(["frame", "count"])["ts"].max()
    key = pd.MultiIndex.from_arrays([compiles["frame"], compiles["count"]])
    ran_after = latest.reindex(key).to_numpy(dtype=np.float64) >= compiles["ts"].to_numpy(np.float64)
    return ~ran_after


def _recompile_spans(roots: pd.DataFrame, annotated: pd.DataFrame) -> iv.Intervals:
    """The merged root spans (one compilation each, forward or backward) that hold a recompilation's id."""
    groups = _span(roots)
    rec = annotated[annotated["count"] >= 1]["ts"].to_numpy(np.int64)
    if groups[0].size == 0 or rec.size == 0:
        return iv.EMPTY
    g = np.searchsorted(groups[0], rec, side="right") - 1
    inside = (g >= 0) & (rec < groups[1][np.clip(g, 0, None)])
    keep = np.unique(g[inside])
    return groups[0][keep], groups[1][keep]


def _parts(comp: pd.DataFrame, spans: iv.Intervals) -> dict:
    """Compile time split by COMPILE_PARTS priority (the first that covers a moment), the rest 'other'."""
    part = _per_name(comp, compile_part, None)
    out, taken = {}, iv.EMPTY
    for name in COMPILE_PARTS:
        mine = iv.subtract(_span(comp[part == name]), taken)
        out[name] = mine
        taken = iv.union(taken, mine)
    out["other"] = iv.subtract(spans, taken)
    return out


def _thread_code(*frames: pd.DataFrame) -> list:
    keys = [df["pid"].to_numpy(np.int64) * 1_000_003 + df["tid"].to_numpy(np.int64) for df in frames]
    codes, _ = pd.factorize(np.concatenate(keys) if keys else np.empty(0, np.int64), sort=True)
    out, at = [], 0
    for k in keys:
        out.append(codes[at: at + len(k)].astype(np.int64))
        at += len(k)
    return out


def _lookups(lookups: pd.DataFrame, regions: pd.DataFrame) -> pd.DataFrame:
    """Each frame call (cache lookup) and whether it ran eager: the next lookup or region on its thread
    after it ends is not a region (or there is none)."""
    ts, end = lookups["ts"].to_numpy(np.int64), lookups["end"].to_numpy(np.int64)
    if not len(lookups):
        return pd.DataFrame({"ts": ts, "end": end, "eager": np.zeros(0, dtype=bool)})
    lc, rc = _thread_code(lookups, regions)
    key = np.concatenate([lc * _SHIFT + ts, rc * _SHIFT + regions["ts"].to_numpy(np.int64)])
    is_region = np.concatenate([np.zeros(len(lc), bool), np.ones(len(rc), bool)])
    order = np.argsort(key, kind="stable")
    key, is_region = key[order], is_region[order]
    nxt = np.searchsorted(key, lc * _SHIFT + end, side="left")  # first frame event at or after the lookup's end
    ok = nxt < key.size
    same = ok & ((key[np.clip(nxt, 0, key.size - 1)] // _SHIFT) == lc)
    compiled = same & is_region[np.clip(nxt, 0, key.size - 1)]
    return pd.DataFrame({"ts": ts, "end": end, "eager": ~compiled})


def _outermost(regions: pd.DataFrame, graphs: iv.Intervals) -> pd.DataFrame:
    """Outermost compiled regions per thread: their id, the regions nested inside (graph breaks) and,
    for broken ones, the time inside them outside compiled graphs and compilation."""
    cols = {"ts": np.empty(0, np.int64), "end": np.empty(0, np.int64), "frame": np.empty(0, np.int64),
            "count": np.empty(0, np.int64), "breaks": np.empty(0, np.int64), "break_ns": np.empty(0, np.int64)}
    if not len(regions):
        return pd.DataFrame(cols)
    (code,) = _thread_code(regions)
    ts, end = regions["ts"].to_numpy(np.int64), regions["end"].to_numpy(np.int64)
    ks, ke = code * _SHIFT + ts, code * _SHIFT + np.maximum(end, ts + 1)
    gs, ge = iv.merge(ks, ke)  # per thread: one group per outermost region with the regions inside it
    group = np.searchsorted(gs, ks, side="right") - 1
    n_in = np.bincount(group, minlength=gs.size)
    first = np.flatnonzero((ks == gs[group]) & (ke == ge[group]))
    first = first[np.unique(group[first], return_index=True)[1]]  # one outer region per group
    rid = _per_name(regions.iloc[first], region_id, None)
    frame = np.array([r[0] if r else -1 for r in rid], dtype=np.int64)
    count = np.array([r[1] if r else -1 for r in rid], dtype=np.int64)
    o_ts, o_end = ts[first], end[first]
    breaks = n_in[group[first]] - 1
    inside = _covered(graphs, o_ts, o_end)
    break_ns = np.where(breaks > 0, np.maximum(o_end - o_ts - inside, 0), 0)
    return pd.DataFrame({"ts": o_ts, "end": o_end, "frame": frame, "count": count, "breaks": breaks,
                         "break_ns": break_ns}).sort_values("ts", kind="stable").reset_index(drop=True)


def _covered(intervals: iv.Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """ns of `intervals` inside each [start, end)."""
    return iv.covered_before(intervals, ends) - iv.covered_before(intervals, starts)


def per_step(c: Compiling, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """Per step window [start, end): compile_ns, recompile_ns, the parts' ns (part_<name>), compiles,
    recompiles, failed (compile ids started in the step), lookups, eager (frame calls that ran eager),
    regions (outermost compiled calls), breaks, broken (calls with a break), break_ns, cudagraph_records, cudagraph_launches."""
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    n = start.size
    out = {"compile_ns": _covered(c.spans, start, end), "recompile_ns": _covered(c.recompile_spans, start, end)}
    for name, spans in c.parts.items():
        out[f"part_{name}"] = _covered(spans, start, end)

    def step_of(ts: np.ndarray) -> np.ndarray:
        i = np.searchsorted(start, ts, side="right") - 1
        return np.where((i >= 0) & (ts < end[np.clip(i, 0, None)]), i, -1)

    def count(ts: np.ndarray, weights=None) -> np.ndarray:
        i = step_of(np.asarray(ts, np.int64))
        w = None if weights is None else np.asarray(weights, np.float64)[i >= 0]
        return np.bincount(i[i >= 0], weights=w, minlength=n)[:n].astype(np.int64)

    cts = c.compiles["ts"].to_numpy(np.int64)
    out["compiles"] = count(cts)
    out["recompiles"] = count(cts[c.compiles["count"].to_numpy() >= 1])
    out["failed"] = count(cts[c.compiles["failed"].to_numpy(bool)])
    lts = c.lookups["ts"].to_numpy(np.int64)
    out["lookups"] = count(lts)
    out["eager"] = count(lts[c.lookups["eager"].to_numpy(bool)])
    rts = c.regions["ts"].to_numpy(np.int64)
    out["regions"] = count(rts)
    out["breaks"] = count(rts, c.regions["breaks"].to_numpy())
    out["broken"] = count(rts[c.regions["breaks"].to_numpy() > 0])
    out["break_ns"] = count(rts, c.regions["break_ns"].to_numpy())
    out["cudagraph_records"] = count(c.cudagraph_records)
    out["cudagraph_launches"] = count(c.cudagraph_launches)
    return pd.DataFrame(out)


def ids_in(c: Compiling, start: int, end: int) -> list:
    """'F/C' of the compile ids that start in [start, end), in order (a few per step)."""
    df = c.compiles
    sel = df[(df["ts"] >= start) & (df["ts"] < end)]
    return [f"{f}/{k}" + (" gave up" if bad else "") for f, k, bad in
            zip(sel["frame"].tolist(), sel["count"].tolist(), sel["failed"].tolist())]


def compiling_unprofiled(run_metadata, phase: str = "wait") -> list:
    """Per unprofiled step of `perfsleuth.clock` in `phase` (`wait`: its `unprofiled_us`, `after`: its
    `after_us`, in order): whether torch.compile compiled in it, from the `compile` section `perfsleuth run`
    records (record/compile_facts.py); [] for other traces."""
    section = run_metadata.get("compile") if isinstance(run_metadata, dict) else None
    steps = section.get("steps") if isinstance(section, dict) else None
    values = steps.get(phase) if isinstance(steps, dict) else None
    if not isinstance(values, list):
        return []
    return [isinstance(us, (int, float)) and not isinstance(us, bool) and us > 0 for us in values]
