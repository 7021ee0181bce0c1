"""selection.of_kind: rows of some kinds, shared inside one analysis and never outside it."""

import pandas as pd
from perfsleuth.trace.model import CPU_OP, KERNEL, RUNTIME
from perfsleuth.trace.selection import kind_mask, memo, of_kind


def _events():
    return pd.DataFrame({"kind": pd.array([KERNEL, RUNTIME, CPU_OP, KERNEL], dtype="int8"), "ts": [4, 3, 2, 1]})


def test_of_kind_picks_rows_in_table_order_with_their_index():
    ev = _events()
    assert kind_mask(ev, (KERNEL, CPU_OP)).tolist() == [True, False, True, True]
    assert of_kind(ev, CPU_OP, KERNEL).index.tolist() == [0, 2, 3]
    assert of_kind(ev, RUNTIME)["ts"].tolist() == [3]


def test_selections_are_shared_inside_memo_only():
    ev = _events()
    with memo():
        first = of_kind(ev, KERNEL)
        assert of_kind(ev, KERNEL) is first  # the same selection, made once
        assert of_kind(ev, KERNEL, KERNEL) is first  # kinds are a set
        assert of_kind(_events(), KERNEL) is not first  # another table, its own selection
    assert of_kind(ev, KERNEL) is not first  # nothing outlives the analysis
    ev.loc[1, "kind"] = KERNEL
    with memo():
        assert of_kind(ev, KERNEL).index.tolist() == [0, 1, 3]  # a changed table is selected afresh
