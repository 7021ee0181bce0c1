"""Find the training iterations ("steps") in a trace.

Order of preference, and what the report says about it (`Steps.source`):
1. `ProfilerStep#N` annotations on the host (what `torch.profiler.profile.step()` records);
2. `Optimizer.step#…` annotations: a step ends where an optimizer step ends;
3. the whole trace as one window.

A step starts where its host annotation starts and is extended to the end of the device work it
launched (kernels, copies and memsets whose runtime call lies inside the host window). Steps are
then made disjoint: a step starts no earlier than the previous step ends, so every microsecond of the
profiled timeline belongs to at most one step and nothing is counted twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .trace import ANNOTATION, CPU_OP, DEVICE_KINDS, RUNTIME, Trace

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
OPTIMIZER_PREFIX = "Optimizer.step#"
PROFILER_STEP, OPTIMIZER_STEP, WHOLE_TRACE = "ProfilerStep", "Optimizer.step", "whole-trace"


@dataclass
class Steps:
    """`frame` columns: name, host_start, host_end, start, end (int64 ns)."""

    frame: pd.DataFrame
    source: str
    warnings: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.frame)


def _annotations(trace: Trace) -> pd.DataFrame:
    ev = trace.events
    return ev[ev["kind"].isin((ANNOTATION, CPU_OP))]


def _profiler_steps(trace: Trace) -> pd.DataFrame:
    ann = _annotations(trace)
    names = pd.Series(ann["name"].cat.categories)
    step_names = set(names[names.str.match(STEP_RE.pattern)])
    if not step_names:
        return pd.DataFrame()
    st = ann[ann["name"].isin(step_names)]
    # The same step recorded twice (several threads, duplicates): keep the longest record of each.
    st = st.sort_values("dur", ascending=False).drop_duplicates("name").sort_values("ts")
    return pd.DataFrame({"name": st["name"].astype(str).values, "host_start": st["ts"].values,
                         "host_end": st["end"].values})


def _optimizer_steps(trace: Trace) -> pd.DataFrame:
    ann = _annotations(trace)
    opt = ann[ann["name"].astype(str).str.startswith(OPTIMIZER_PREFIX)]
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
    ev = trace.events
    out = np.full(len(host_start), -1, dtype=np.int64)
    rt = ev[(ev["kind"] == RUNTIME) & (ev["corr"] >= 0)]
    dev = ev[ev["kind"].isin(DEVICE_KINDS) & (ev["corr"] >= 0)]
    if rt.empty or dev.empty:
        return out
    idx = np.searchsorted(host_start, rt["ts"].to_numpy(), side="right") - 1
    inside = (idx >= 0) & (rt["ts"].to_numpy() < host_end[np.clip(idx, 0, None)])
    launch = pd.Series(idx[inside], index=rt["corr"].to_numpy()[inside])
    launch = launch[~launch.index.duplicated()]
    win = launch.reindex(dev["corr"].to_numpy()).to_numpy()
    ok = ~np.isnan(win)
    if ok.any():
        np.maximum.at(out, win[ok].astype(np.int64), dev["end"].to_numpy()[ok])
    return out


def find_steps(trace: Trace) -> Steps:
    warnings: list[str] = []
    frame, source = _profiler_steps(trace), PROFILER_STEP
    if frame.empty:
        frame, source = _optimizer_steps(trace), OPTIMIZER_STEP
        if not frame.empty:
            warnings.append("no ProfilerStep#N annotations: steps are the intervals between "
                            "Optimizer.step calls")
    if frame.empty:
        frame, source = _whole_trace(trace), WHOLE_TRACE
        warnings.append("no ProfilerStep#N or Optimizer.step annotations: the whole trace is analysed "
                        "as one window")
    host_start = frame["host_start"].to_numpy(np.int64)
    host_end = frame["host_end"].to_numpy(np.int64)
    if source == WHOLE_TRACE:
        dev_end = np.array([int(trace.events["end"].max())])
    else:
        dev_end = _device_end_per_window(trace, host_start, host_end)
    start, end = _make_disjoint(host_start, np.maximum(host_end, dev_end))
    frame = frame.assign(start=start, end=end)
    empty = frame["end"] <= frame["start"]
    if empty.any():
        warnings.append(f"{int(empty.sum())} step(s) overlapped the previous step completely and were dropped")
        frame = frame[~empty]
    if (np.diff(host_start) < 0).any() or (host_end[:-1] > host_start[1:]).any():
        warnings.append("step annotations overlap on the host; overlapping parts were given to the earlier step")
    return Steps(frame.reset_index(drop=True), source, warnings)


def _make_disjoint(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step i starts no earlier than step i-1 ends (a loop over steps, not over events)."""
    start, end = start.copy(), end.copy()
    for i in range(1, len(start)):
        start[i] = max(start[i], end[i - 1])
        end[i] = max(end[i], start[i])
    return start, end
