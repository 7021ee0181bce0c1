"""Forecast model of a cheaper Dataset in the training process (num_workers=0; `dataloader-slow`,
issue 37): what its fix removes from the DataLoader's `__next__` spans, by the cause the python
stacks show inside them (analysis/frame_work.py, the same split as the facts' `loader_cause`).

- decoding: the decoded samples cached -- each sample is decoded once, so from the second epoch
  on the decoding's own time inside `__next__` goes; the rest of the sample's work and the
  collate stay.
- I/O: the raw bytes cached in memory (or a local copy read in larger pieces) -- the reads' own
  time goes; decoding, Python and the collate stay.
- per-sample tensor ops, Python: no forecast. Batching or vectorising replaces the work with other
  work whose cost (the batched ops' sizes, where they run, the vectorised code) the trace does not
  show.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ....trace.model import CPU_OP, PYTHON
from ....trace.names import is_dataloader, name_mask
from ....trace.selection import of_kind
from ... import intervals as iv
from ...frame_work import CLASSES, DECODING, IO, TENSOR, WAITING, loader_work
from ...frame_work import PYTHON as PY_CLASS
from ..plan import Plan, remove_host
from ..registry import Inputs, NoForecast, model
from ..timeline import LOADER

BATCHED_NOT_FORECAST = ("the per-sample work done once per batch instead: what the batched ops "
                        "cost depends on their tensors' sizes and on where they run, which the "
                        "trace does not show")
VECTORISED_NOT_FORECAST = ("the Dataset's Python precomputed or vectorised: what the new code "
                           "costs depends on the data and the code, which the trace does not show")
WAITING_NOT_FORECAST = ("the Dataset mostly sleeps or waits: worker processes overlap waits "
                        "(num-workers' forecast); caching cannot be grounded in a wait")
NO_STACKS = ("without python stacks (`with_stack=True`) the loader's time cannot be split into "
             "decoding, I/O and Python")
# The pessimistic variant keeps this share of the removed time: the cache's lookup and the copy of a
# cached sample (not measured: a dict lookup and a memory copy are small beside a decode or a read).
KEEP = {"central": 0.0, "low": 0.1, "high": 0.0}
CACHED = {DECODING: "the decoded samples cached: each sample decoded once, not every epoch",
          IO: "the samples' bytes cached in memory (or a local copy read in fewer, larger reads)"}


def _frames(x: Inputs, windows: iv.Intervals) -> tuple[pd.DataFrame, iv.Intervals]:
    """The main thread's python frames (absolute ns, with their tree links) and torch ops' spans
    inside the loader's windows."""
    main = x.main_ops
    if main.empty:
        return pd.DataFrame(), iv.EMPTY
    pid, tid = main["pid"].iloc[0], main["tid"].iloc[0]
    ev = of_kind(x.trace.events, PYTHON)
    mine = ev[(ev["pid"].to_numpy() == pid) & (ev["tid"].to_numpy() == tid)]
    frames = mine[iv.covers(windows, mine["ts"].to_numpy(np.int64))]
    ops = main[(main["kind"].to_numpy() == CPU_OP) & ~name_mask(main["name"], is_dataloader)]
    w0 = x.tl.w0
    spans = iv.merge(ops["ts"].to_numpy(np.int64) + w0, ops["end"].to_numpy(np.int64) + w0)
    return frames, iv.intersect(spans, windows)


def _forecastable(cause: int) -> None:
    """NoForecast, with why, for the causes whose fix replaces work with work the trace does not
    show."""
    if cause == TENSOR:
        raise NoForecast(BATCHED_NOT_FORECAST)
    if cause == PY_CLASS:
        raise NoForecast(VECTORISED_NOT_FORECAST)
    if cause == WAITING:
        raise NoForecast(WAITING_NOT_FORECAST)


def _assumptions(cause: int, removed: str, stays: str) -> dict:
    return {"fix": CACHED[cause], "removed": removed, "stays": stays,
            "epochs": ("from the second epoch on: the first epoch still does the work once per "
                       "sample, to fill the cache"),
            "memory": "the cached samples fit in memory (their size is not in the trace)",
            "pessimistic": (f"{KEEP['low']:.0%} of that time stays (the cache lookup, a copy of "
                            "the sample)")}


def _from_window(x: Inputs, p: Plan, variant: str, windows: iv.Intervals) -> dict:
    """A trace without stacks of its own (perfsleuth run's main window): the stacks window's share
    of the cause (facts: `loader_cause_share`) comes off each `__next__` of the replayed steps."""
    label, share = str(x.loader_split["loader_cause"]), float(x.loader_split["loader_cause_share"])
    cause = next((k for k, c in enumerate(CLASSES) if c == label), TENSOR)
    _forecastable(cause)
    s, e = windows
    cut = np.round((e - s) * min(max(share, 0.0), 1.0)).astype(np.int64)
    spans = iv.merge(s - x.tl.w0, s + cut - x.tl.w0)
    removed = remove_host(p, spans, keep=KEEP[variant])
    n = max(len(x.tl.steps), 1)
    removed_text = (f"the {label} goes: {share:.0%} of the loader's time, as the stacks window "
                    f"measured it inside __getitem__, from each __next__ of the replayed steps "
                    f"({removed / n / 1000:.0f} µs per step)")
    return _assumptions(cause, removed_text, "the rest of the loader's time (the sample's other "
                        "work, the collate) stays as recorded")


@model("dataloader-in-process-work")
def in_process_work(x: Inputs, p: Plan, variant: str) -> dict:
    tl = x.tl
    loaders = np.flatnonzero(tl.kind == LOADER)
    if loaders.size == 0:
        raise NoForecast("no DataLoader __next__ in the replayed steps")
    w0 = tl.w0
    windows = iv.merge(tl.t[loaders].astype(np.int64) + w0, tl.e[loaders].astype(np.int64) + w0)
    frames, ops = _frames(x, windows)
    work = loader_work(frames, windows, ops) if len(frames) else None
    if (work is None or not work.work_ns) and x.loader_split:
        return _from_window(x, p, variant, windows)
    if work is None or not work.work_ns:
        ops_fill = iv.total(ops) * 2 >= iv.total(windows)
        raise NoForecast(BATCHED_NOT_FORECAST if ops_fill else NO_STACKS)
    cause = work.cause
    _forecastable(cause)
    spans = iv.intersect(work.spans[cause], windows)
    rel = (spans[0] - w0, spans[1] - w0)
    removed = remove_host(p, rel, keep=KEEP[variant])
    n = max(len(tl.steps), 1)
    loading = iv.total(windows)
    what = CLASSES[cause]
    stays = ", ".join(c for k, c in enumerate(CLASSES) if k != cause and work.class_ns[k] > 0)
    share = iv.total(spans) / loading
    removed_text = (f"the {what} measured inside the loader's __next__ goes: "
                    f"{removed / n / 1000:.0f} µs per step, {share:.0%} of the loader's time "
                    "in the replayed steps")
    return _assumptions(cause, removed_text, f"the rest of each sample's work ({stays or 'none'}) "
                        "and the DataLoader's own work (fetch, collate) stay as recorded")
