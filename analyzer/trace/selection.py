"""Rows of the event table by kind, each selection made once per analysis.

The analysis picks the same kinds of events (runtime calls, device work, cpu ops) out of the whole
event table many times over: steps, attribution, facts and the top tables all start that way. Inside
`memo()` (which `analyze_trace` holds for one analysis) each selection is made once and shared;
outside it every call selects afresh, so nothing outlives an analysis and a table changed between
two analyses is never answered from a stale copy. Callers must not modify a selection in place.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Callable, Iterator

import numpy as np
import pandas as pd

_MEMO: contextvars.ContextVar = contextvars.ContextVar("perfsleuth_selection_memo", default=None)


@contextmanager
def memo() -> Iterator[None]:
    """Share selections between all analysis code run inside this block (one analysis)."""
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def _memoised(frame: pd.DataFrame, key: tuple, make: Callable[[], object]):
    """`make()` once per (frame, key) inside `memo()`; every time outside it."""
    cache = _MEMO.get()
    if cache is None:
        return make()
    _, results = cache.setdefault(id(frame), (frame, {}))  # holding the frame keeps its id its own
    if key not in results:
        results[key] = make()
    return results[key]


def kind_mask(ev: pd.DataFrame, kinds) -> np.ndarray:
    """Boolean row mask: the event's kind is one of `kinds` (a few compares beat np.isin's sort)."""
    kind = ev["kind"].to_numpy()
    mask = np.zeros(kind.shape, dtype=bool)
    for k in kinds:
        mask |= kind == k
    return mask


def of_kind(ev: pd.DataFrame, *kinds: int) -> pd.DataFrame:
    """The rows of `ev` whose kind is one of `kinds`, in table order with their index. Kinds the table
    has no event of are left out of the memo's key: (cpu ops, annotations, python functions) of a trace
    without stacks is the same selection as (cpu ops, annotations), made once."""
    kinds = tuple(sorted(set(kinds)))
    counts = _memoised(ev, ("kind counts",), lambda: np.bincount(ev["kind"].to_numpy().astype(np.intp)))
    present = tuple(k for k in kinds if 0 <= k < len(counts) and counts[k]) or kinds
    return _memoised(ev, ("kind",) + present, lambda: ev[kind_mask(ev, present)])


def rows(frame: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """`frame[mask]`, without a copy where the rows kept are all of them (the frame itself) or one run of
    consecutive rows (a slice, a view): the events inside the steady steps are most often all but a
    few at either end. Like a selection, the result must not be modified in place."""
    idx = np.flatnonzero(mask)
    if len(idx) == len(frame):
        return frame
    if len(idx) and idx[-1] - idx[0] + 1 == len(idx):
        return frame.iloc[idx[0]: idx[-1] + 1]
    return frame[mask]


def derived(ev: pd.DataFrame, key: tuple, make: Callable[[], object]):
    """Anything computed from the event table `ev` once per analysis (inside `memo()`), like `of_kind`."""
    return _memoised(ev, ("derived",) + key, make)

