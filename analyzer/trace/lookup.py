"""Joins by id (correlation id, External id) on numpy columns: the ids sorted once and looked up with
searchsorted, instead of a pandas index hashed for every join (`drop_duplicates` + `reindex` of a
few hundred thousand runtime calls took 0.1-0.2 s each on a 2-million-event trace)."""

from __future__ import annotations

import numpy as np


class FirstRow:
    """The first row (in table order) with each id. `find(ids)`: that row's position for each id, -1
    where no row has it -- what `Series(range(n), index=ids).drop_duplicates-by-index().reindex(...)`
    gives, without hashing."""

    def __init__(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        order = np.argsort(ids, kind="stable")  # equal ids keep table order: the first comes first
        ordered = ids[order]
        first = np.ones(ordered.size, dtype=bool)
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
        self.ids, self.rows = ordered[first], order[first]

    def find(self, ids) -> np.ndarray:
        q = np.asarray(ids, dtype=np.int64)
        if self.ids.size == 0:
            return np.full(q.shape, -1, dtype=np.int64)
        k = np.searchsorted(self.ids, q)
        kc = np.minimum(k, self.ids.size - 1)
        return np.where(self.ids[kc] == q, self.rows[kc], -1).astype(np.int64)

    def get(self, ids, values: np.ndarray, missing) -> np.ndarray:
        """`values` (a column of the rows) at the first row of each id; `missing` where none has it."""
        rows = self.find(ids)
        found = rows >= 0
        out = np.full(rows.shape, missing, dtype=np.result_type(values.dtype, np.min_scalar_type(missing)))
        out[found] = values[rows[found]]
        return out


def by_id(ev, kinds: tuple, column: str) -> FirstRow:
    """The first event of `kinds` with each id in `column` (ids >= 0), as positions in `of_kind(ev,
    *kinds)`: made once per analysis (the runtime call of each correlation id serves the steps, the
    device backlog, the replay's nodes and the kernels' launching ops)."""
    from .selection import derived, of_kind

    def make() -> FirstRow:
        ids = of_kind(ev, *kinds)[column].to_numpy(np.int64)
        keep = np.flatnonzero(ids >= 0)
        found = FirstRow(ids[keep])
        found.rows = keep[found.rows]
        return found

    return derived(ev, ("first by id", tuple(sorted(kinds)), column), make)
