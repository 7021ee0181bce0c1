"""The decoder's columns: each op's "Input type" is left undecoded by the strict Structs and decoded once per
distinct text (kineto.joined_input_types); the workers' transform (trace/columns.py, no pandas) codes names,
input types and groups into sorted categories, hashing each value once -- the table then holds the same
categoricals as pd.Categorical gives; event kinds come from categories in any case."""

import json

import msgspec
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfsleuth.trace import columns, kineto
from perfsleuth.trace.model import load_trace
from tracebuilder import TraceBuilder


def test_input_types_are_joined_once_per_distinct_text():
    raws = [msgspec.Raw(b'["float", "int"]'), msgspec.Raw(b"null"), msgspec.Raw(b'["float","int"]'),
            msgspec.Raw(b"[]"), msgspec.Raw(b'"float"'), msgspec.Raw(b'[1, null, ["x"]]'), b'["float", "int"]']
    assert kineto.joined_input_types(raws) == ["float,int", "", "float,int", "", "", "1,None,['x']", "float,int"]
    assert kineto.joined_input_types([]) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["", "aten::mm", "aten::add_", "Memcpy HtoD", "é", "ProfilerStep#3", "b", "a"]),
                max_size=40))
def test_codes_make_the_categorical_pd_categorical_makes(values):
    codes, categories = columns.coded(values)
    want = pd.Categorical(np.array(values, dtype=object))
    got = pd.Categorical.from_codes(codes, categories=pd.Index(categories))
    assert list(got.categories) == list(want.categories)
    assert got.categories.dtype == want.categories.dtype
    assert got.codes.dtype == want.codes.dtype and got.codes.tolist() == want.codes.tolist()


def test_ops_input_types_reach_the_table_and_other_events_have_none(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.op("aten::mm", 5, 10, **{"Input type": ["float", "float"]})
    tb.op("aten::add", 20, 10, **{"Input type": ["c10::Half", "", "Scalar"]})
    tb.op("aten::add", 40, 10, **{"Input type": ["c10::Half", "", "Scalar"]})
    tb.op("aten::empty", 60, 5)
    tb.annotation("not an op", 70, 5, **{"Input type": ["float"]})  # only ops carry types into the table
    tr = load_trace(tb.write(tmp_path / "t.json"))
    ev = tr.events.set_index("name")["in_type"].astype(str)
    assert ev["aten::mm"] == "float,float"
    assert ev["aten::add"].tolist() == ["c10::Half,,Scalar", "c10::Half,,Scalar"]
    assert ev["aten::empty"] == "" and ev["not an op"] == ""
    assert list(tr.events["in_type"].cat.categories) == ["", "c10::Half,,Scalar", "float,float"]
    assert tr.has_shapes


def test_a_lenient_piece_joins_input_types_the_same_way(tmp_path):
    # an id beyond int64 sends the piece to the lenient decoder; its ops' types come out as the strict ones do
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": 3,
               "args": {"Input type": ["float", 2], "External id": 2**70}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 9, "dur": 3,
               "args": {"Input type": ["float", "int"]}}]
    with pytest.raises(OverflowError):  # what sends it to the lenient path
        kineto._strict_columns(kineto._STRICT.decode(json.dumps(events).encode()))
    path = tmp_path / "lax.json"
    path.write_text(json.dumps({"traceEvents": events}))
    tr = load_trace(path)
    assert tr.events["in_type"].astype(str).tolist() == ["float,2", "float,int"]


def test_kinds_from_categories_old_and_new_spellings():
    cats = ["kernel", "Kernel", "cuda_runtime", "Runtime", "cpu_op", "Operator", "python_function", "gpu_memcpy",
            "Memset", "user_annotation", "gpu_user_annotation", "cuda_sync", "ac2g", ""]
    k = columns
    assert columns.kinds(cats).tolist() == [k.KERNEL, k.KERNEL, k.RUNTIME, k.RUNTIME, k.CPU_OP, k.CPU_OP, k.PYTHON,
                                            k.MEMCPY, k.MEMSET, k.ANNOTATION, k.GPU_ANNOTATION, k.DEVICE_SYNC,
                                            k.OTHER, k.OTHER]
    assert columns.kinds([]).dtype == np.int8 and columns.kinds([]).size == 0


def test_the_decoding_transform_imports_no_pandas():
    import subprocess
    import sys

    code = ("import sys; from perfsleuth.trace import columns, reading; "
            "print(sorted(m for m in ('pandas', 'jinja2', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _shape_column(events: list) -> tuple:
    cols, *_ = columns.chunk_columns(kineto._strict_columns(kineto._STRICT.decode(json.dumps(events).encode())))
    codes, categories = cols["in_shape"]
    return codes.tolist(), categories


def test_shape_signatures_of_a_chunk_with_and_without_shapes():
    def op(name, ts, **args):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 1, "args": args}

    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 3, "dur": 1,
              "args": {"Input Dims": [[9]]}}  # not an op: no signature
    spans = {"ph": "X", "cat": "cpu_op", "name": "s", "pid": "Spans", "tid": 1, "ts": 4, "dur": 1,
             "args": {"Input Dims": [[5]]}}  # a string pid: dropped from the table
    # without record_shapes (JSON null or absent): one category, "" (the fast path)
    assert _shape_column([op("a", 1), op("b", 2, **{"Input Dims": None}), kernel]) == ([0, 0, 0], [""])
    assert _shape_column([op("a", 1), spans, op("b", 2)]) == ([0, 0], [""])
    # with shapes: each op's texts joined by \x1f, codes into the sorted categories
    got = _shape_column([op("a", 1, **{"Input Dims": [[2, 3]], "Concrete Inputs": ["", "1"]}), spans, kernel,
                         op("b", 2), op("c", 5, **{"Input Dims": [[2, 3]], "Concrete Inputs": ["", "1"]}),
                         op("d", 6, **{"Input Dims": [[4]]})])
    assert got == ([1, 0, 0, 1, 2], ["", '[[2, 3]]\x1f["", "1"]', "[[4]]\x1fnull"])


def test_a_chunk_without_table_events_has_no_shape_category():
    spans = {"ph": "X", "cat": "cpu_op", "name": "s", "pid": "Spans", "tid": 1, "ts": 4, "dur": 1}
    meta = {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}
    assert _shape_column([spans]) == ([], []) == _shape_column([meta])  # as coded([]) gives
