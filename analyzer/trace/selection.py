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
    """The rows of `ev` whose kind is one of `kinds`, in table order with their index."""
    kinds = tuple(sorted(set(kinds)))
    return _memoised(ev, ("kind",) + kinds, lambda: ev[kind_mask(ev, kinds)])


def derived(ev: pd.DataFrame, key: tuple, make: Callable[[], object]):
    """Anything computed from the event table `ev` once per analysis (inside `memo()`), like `of_kind`."""
    return _memoised(ev, ("derived",) + key, make)


def by_name(names, test: Callable[[str], object]) -> np.ndarray:
    """Boolean per row: `bool(test(name))`, called once per distinct name instead of once per row (a
    missing name matches nothing, as pandas' string methods have it; the event table has none).
    `names`: a categorical or object Series, or an array of names."""
    if isinstance(names, pd.Series) and isinstance(names.dtype, pd.CategoricalDtype):
        codes, uniques = names.cat.codes.to_numpy(), names.cat.categories
    else:
        codes, uniques = pd.factorize(np.asarray(names, dtype=object), use_na_sentinel=True)
    present = np.bincount(codes + 1, minlength=len(uniques) + 1) > 0  # [0]: missing names (code -1)
    hit = np.zeros(len(uniques) + 1, bool)
    for i in np.flatnonzero(present[1:]) + 1:
        hit[i] = bool(test(str(uniques[i - 1])))
    return hit[codes + 1]
