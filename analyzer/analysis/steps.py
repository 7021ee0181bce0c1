"""Find the training iterations ("steps") in a trace.

Order of preference, and what the report says about it (`Steps.source`):
1. `ProfilerStep#N` annotations on the host (what `torch.profiler.profile.step()` records);
2. `Optimizer.step#…` annotations: a step ends where an optimizer step ends;
3. the whole trace as one window.

A step starts where its host annotation starts and is extended to the end of the device work it
launched (kernels, copies and memsets whose runtime call lies inside the host window). Steps are
then made disjoint: a step starts no earlier than the previous step ends, so every microsecond of the
profiled timeline belongs to at most one step and nothing is counted twice.

Each step is then classed warm-up, steady, partial or compile (`phases.py`, column `phase`): shares, the
verdict, the facts and the top tables use the steady steps only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from ..errors import TraceError
from ..trace.lookup import FirstRow
from ..trace.model import ANNOTATION, CPU_OP, DEVICE_KINDS, RUNTIME, Trace
from ..trace.names import name_mask
from ..trace.selection import of_kind
from . import intervals as iv
from .phases import COMPILE, PARTIAL, STEADY, WARMUP, classify

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
OPTIMIZER_PREFIX = "Optimizer.step#"
PROFILER_STEP, OPTIMIZER_STEP, WHOLE_TRACE = "ProfilerStep", "Optimizer.step", "whole-trace"


@dataclass
class Steps:
    """`frame` columns: name, host_start, host_end, start, end (int64 ns), phase (warmup | steady | partial | compile)
    and phase_reason ('' for steady steps)."""

    frame: pd.DataFrame
    source: str
    warnings: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.frame)

    def steady_mask(self) -> np.ndarray:
        if "phase" not in self.frame:
            return np.ones(len(self.frame), dtype=bool)
        return (self.frame["phase"] == STEADY).to_numpy()

    def counts(self) -> dict:
        """{"steady": n, "warmup": n, "partial": n}, and "compile": n when torch.compile set steps apart."""
        if "phase" not in self.frame:
            return {STEADY: len(self.frame), WARMUP: 0, PARTIAL: 0}
        ph = self.frame["phase"]
        out = {k: int((ph == k).sum()) for k in (STEADY, WARMUP, PARTIAL)}
        compiling = int((ph == COMPILE).sum())
        return {**out, COMPILE: compiling} if compiling else out

    def host_windows(self) -> iv.Intervals:
        """The merged host windows of the steps: where the step's own code runs."""
        return iv.merge(self.frame["host_start"].to_numpy(np.int64), self.frame["host_end"].to_numpy(np.int64))


def _annotations(trace: Trace) -> pd.DataFrame:
    return of_kind(trace.events, ANNOTATION, CPU_OP)


def _profiler_steps(trace: Trace, warnings: list) -> pd.DataFrame:
    ann = _annotations(trace)
    names = pd.Series(ann["name"].cat.categories)
    step_names = set(names[names.str.match(STEP_RE.pattern)])
    if not step_names:
        return pd.DataFrame()
    st = ann[ann["name"].isin(step_names)]
    if st.empty:  # the names are categories of the whole trace: their events may all have been dropped
        return pd.DataFrame()
    st = _one_record_per_step(st, warnings)
    return pd.DataFrame({"name": st["name"].astype(str).values, "host_start": st["ts"].values,
                         "host_end": st["end"].values})


def _one_record_per_step(st: pd.DataFrame, warnings: list) -> pd.DataFrame:
    """The same step recorded twice (several threads, duplicates) overlaps itself in time: keep the
    longest record. The same name at separate times (two profiling sessions in one trace, a restarted
    step counter) is two steps: keep both, and say so."""
    st = st.assign(name=st["name"].astype(str)).sort_values(["name", "ts"], kind="stable")
    name, ts = st["name"].to_numpy(), st["ts"].to_numpy()
    first = np.r_[True, name[1:] != name[:-1]]
    reach = st["end"].groupby(np.cumsum(first)).cummax().to_numpy()  # latest end so far, per name
    cluster = np.cumsum(first | np.r_[True, ts[1:] > reach[:-1]])
    kept = st.assign(_c=cluster).sort_values("dur", ascending=False, kind="stable").drop_duplicates("_c")
    repeated = kept["name"].value_counts()
    repeated = repeated[repeated > 1]
    if len(repeated):
        warnings.append(f"{len(repeated)} ProfilerStep name(s) occur at separate times (e.g. {repeated.index[0]}, "
                        f"{int(repeated.iloc[0])} times): each occurrence is kept as its own step")
    return kept.drop(columns="_c").sort_values("ts", kind="stable")


def _optimizer_steps(trace: Trace) -> pd.DataFrame:
    ann = _annotations(trace)
    opt = ann[name_mask(ann["name"], lambda n: n.startswith(OPTIMIZER_PREFIX))]
    if opt.empty:
        return pd.DataFrame()
    counts = opt.groupby("name", observed=True)["end"].agg(["size", "mean"])
    chosen = counts.sort_values(["size", "mean"], ascending=False).index[0]
    ends = np.sort(opt.loc[opt["name"] == chosen, "end"].to_numpy())
    first = int(trace.events["ts"].min())
    starts = np.concatenate([[first], ends[:-1]])
    names = [f"{chosen}[{i}]" for i in range(len(ends))]
    return pd.DataFrame({"name": names, "host_start": starts, "host_end": ends})


def _whole_trace(trace: Trace) -> pd.DataFrame:
    ev = trace.events
    return pd.DataFrame({"name": ["whole trace"], "host_start": [int(ev["ts"].min())],
                         "host_end": [int(ev["end"].max())]})


def _device_end_per_window(trace: Trace, host_start: np.ndarray, host_end: np.ndarray) -> np.ndarray:
    """Latest end of device work launched by a runtime call inside each host window (-1 if none)."""
    out = np.full(len(host_start), -1, dtype=np.int64)
    rt, dev = of_kind(trace.events, RUNTIME), of_kind(trace.events, *DEVICE_KINDS)
    rt_corr, dev_corr = rt["corr"].to_numpy(), dev["corr"].to_numpy()
    rt_ok, dev_ok = rt_corr >= 0, dev_corr >= 0
    if not rt_ok.any() or not dev_ok.any():
        return out
    rt_ts = rt["ts"].to_numpy()[rt_ok]
    idx = np.searchsorted(host_start, rt_ts, side="right") - 1
    inside = (idx >= 0) & (rt_ts < host_end[np.clip(idx, 0, None)])
    call = FirstRow(rt_corr[rt_ok][inside]).find(dev_corr[dev_ok])  # the first launch of each correlation id
    ok = call >= 0
    if ok.any():
        np.maximum.at(out, idx[inside][call[ok]], dev["end"].to_numpy()[dev_ok][ok])
    return out


def find_steps(trace: Trace) -> Steps:
    warnings: list[str] = []
    steps = _windows(trace, _profiler_steps(trace, warnings), PROFILER_STEP, warnings)
    if steps is None:
        steps = _windows(trace, _optimizer_steps(trace), OPTIMIZER_STEP, warnings)
        if steps is not None:
            warnings.append("no ProfilerStep#N annotations: steps are the intervals between "
                            "Optimizer.step calls")
    if steps is None:
        warnings.append("no ProfilerStep#N or Optimizer.step annotations: the whole trace is analysed "
                        "as one window")
        steps = _windows(trace, _whole_trace(trace), WHOLE_TRACE, warnings)
    if steps is None:
        raise TraceError(trace.path, "the trace spans no time (every event has zero duration)")
    return steps


def _windows(trace: Trace, frame: pd.DataFrame, source: str, warnings: list) -> Optional[Steps]:
    """Steps from host windows: extended to the device work they launched, made disjoint, empty ones
    dropped (said apart: a step of zero duration, or one the previous step covers). None when none is left."""
    if frame.empty:
        return None
    host_start = frame["host_start"].to_numpy(np.int64)
    host_end = frame["host_end"].to_numpy(np.int64)
    if source == WHOLE_TRACE:
        dev_end = np.array([int(trace.events["end"].max())])
    else:
        dev_end = _device_end_per_window(trace, host_start, host_end)
    own_end = np.maximum(host_end, dev_end)
    start, end = _make_disjoint(host_start, own_end)
    frame = frame.assign(start=start, end=end)
    zero = own_end <= host_start
    covered = (end <= start) & ~zero
    if source != WHOLE_TRACE and zero.all():
        warnings.append(f"every {source} annotation ({len(frame)}) has zero duration")
        return None
    if zero.any() and source != WHOLE_TRACE:
        warnings.append(f"{int(zero.sum())} step(s) of zero duration were dropped")
    if covered.any():
        warnings.append(f"{int(covered.sum())} step(s) overlapped the previous step completely and were dropped")
    if zero.all():
        return None
    frame = frame[~(zero | covered)]
    slack = trace.time_resolution_ns  # rounding of huge timestamps is not an overlap (trace/model.py)
    if (np.diff(host_start) < 0).any() or (host_end[:-1] > host_start[1:] + slack).any():
        warnings.append("step annotations overlap on the host; overlapping parts were given to the earlier step")
    frame = frame.reset_index(drop=True)
    phase, reason, notes = classify(trace, frame, source)
    warnings.extend(notes)  # the same list: find_steps adds where the steps came from after this
    return Steps(frame.assign(phase=phase, phase_reason=reason), source, warnings)


def _make_disjoint(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step i starts no earlier than step i-1 ends (a loop over steps, not over events)."""
    start, end = start.copy(), end.copy()
    for i in range(1, len(start)):
        start[i] = max(start[i], end[i - 1])
        end[i] = max(end[i], start[i])
    return start, end
