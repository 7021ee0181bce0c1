"""Large documents are cut into byte ranges that workers decode (byteranges.py); every guess is checked
by decoding, and anything unusual falls back to the sequential split with the same result."""

import gzip
import json
import os

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perfsleuth.errors import TraceError
from perfsleuth.trace import byteranges, gzstream, kineto, memory_child
from perfsleuth.trace.memory import COLUMNS as MEMORY_COLUMNS
from perfsleuth.trace.model import PendingMemory, load_trace


def _event(i: int, name: str = "aten::mm") -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": 10 * i, "dur": 5, "pid": 1, "tid": 1,
            "args": {"External id": i}}


def _doc(events: list, pretty: bool = False, **top) -> bytes:
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 3}, "traceEvents": events, **top}
    return json.dumps(doc, indent=2 if pretty else None).encode()


@pytest.mark.parametrize("pretty", [False, True])
def test_plan_cuts_between_events_and_covers_the_array(pretty):
    raw = _doc([_event(i) for i in range(50)], pretty, traceName="/tmp/x]y.json")
    header, ranges = byteranges.plan(raw, kineto._HEADER, size=300)
    assert header.distributedInfo == {"rank": 3} and header.traceEvents == []
    assert len(ranges) > 3
    assert all(a < b for a, b in ranges) and all(b0 < a1 for (_, b0), (a1, _) in zip(ranges, ranges[1:]))
    decoded = [e for a, b in ranges for e in json.loads(bytes(byteranges.blob(raw, a, b)))]
    assert decoded == [_event(i) for i in range(50)]
    pieces = [e for a, b in ranges for p in byteranges.pieces(raw, a, b, size=100) for e in json.loads(bytes(p))]
    assert pieces == decoded


@pytest.mark.parametrize("after", [
    {"deviceProperties": [{"id": 0, "name": "H100"}, {"id": 1, "name": "H100"}]},  # as in h100_qwen0.5b
    {"traceWarnings": ["[W1130 Profiler.cpp:1235] 1 iterations"]},  # as in cpu_only_tiny
    {},
])
def test_plan_finds_the_array_end_before_lists_that_follow_it(after):
    events = [_event(i) for i in range(20)]
    for pretty in (False, True):
        raw = _doc(events, pretty, **after)
        header, ranges = byteranges.plan(raw, kineto._HEADER, size=300)
        assert ranges[-1][1] == raw.index(b"]", raw.rindex(b'"External id"'))  # the array's own "]"
        assert header.deviceProperties == after.get("deviceProperties")
        assert [e for a, b in ranges for e in json.loads(bytes(byteranges.blob(raw, a, b)))] == events


def test_plan_gives_up_on_documents_it_cannot_place():
    assert byteranges.plan(b'[{"ph": "X"}]', kineto._HEADER) is None  # a bare list: no traceEvents key
    nested = b'{"meta": {"traceEvents": [1, 2]}, "traceEvents": [{"ph": "X"}]}'
    assert byteranges.plan(nested, kineto._HEADER) is None  # the first "traceEvents" is not the top-level one
    assert byteranges.plan(b'{"traceEvents": [{"ph": "X"}, ', kineto._HEADER) is None  # truncated
    odd_last = _doc([_event(0), _event(1, '"}, {"x": 1}, {')])  # its last event's name looks like two
    assert byteranges.plan(odd_last, kineto._HEADER) is None


@pytest.fixture
def small_ranges(monkeypatch):
    """Byte ranges of ~400 bytes decoded in pieces of ~150, from documents of 1 kB up."""
    monkeypatch.setattr(byteranges, "MIN_BYTES", 1000)
    monkeypatch.setattr(byteranges, "RANGE_BYTES", 400)
    monkeypatch.setattr(byteranges, "PIECE_BYTES", 150)
    monkeypatch.setattr(kineto, "MMAP_BYTES", 1000)
    monkeypatch.setattr(gzstream, "IN_BYTES", 64)  # .json.gz: ranges are cut while it inflates
    return _spy_on_plan(monkeypatch)


def _spy_on_plan(monkeypatch) -> list:
    """What happened on each load: "ranges" when byteranges.plan placed the array, "split" for each
    sequential split (the path of jobs=1, small documents and fallbacks)."""
    real_plan, real_split, real_finish, calls = byteranges.plan, kineto.split_document, gzstream.Stream.finish, []
    monkeypatch.setattr(byteranges, "plan", lambda *a: calls.append("ranges" if real_plan(*a) else "no plan")
                        or real_plan(*a))
    monkeypatch.setattr(kineto, "split_document", lambda *a: calls.append("split") or real_split(*a))
    monkeypatch.setattr(gzstream.Stream, "finish", lambda *a: calls.append("inflating") or real_finish(*a))
    return calls


def _same(a, b):
    assert a.events.equals(b.events)
    assert (a.memory is None) == (b.memory is None)
    if a.memory is not None:
        assert all(np.array_equal(getattr(a.memory, c), getattr(b.memory, c)) for c in MEMORY_COLUMNS)
    assert (a.warnings, a.thread_names, a.raw_event_count, a.rank) == (b.warnings, b.thread_names,
                                                                        b.raw_event_count, b.rank)


@pytest.mark.parametrize("gz", [False, True])
def test_ranges_give_the_sequential_result(tmp_path, small_ranges, gz):
    events = [_event(i, f"op{i % 7}") for i in range(60)] + [{"ph": "f", "id": 1, "ts": 3, "pid": 1, "tid": 1}]
    events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}})
    events.append(_event(3, "op3"))  # a duplicate, found across ranges
    raw = _doc(events, pretty=True)
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    par, seq = load_trace(path, jobs=2), load_trace(path, jobs=1)
    assert small_ranges == ["inflating" if gz else "ranges", "split"]  # the second is jobs=1
    _same(par, seq)
    assert par.raw_event_count == 63 and len(par.events) == 60 and par.rank == 3
    assert par.thread_names == {(1, 1): "main"} and par.warnings == ["1 duplicate events were ignored"]


def _memory_event(i: int, nbytes, name: str = "[memory]") -> dict:
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": name, "pid": 1, "tid": 1, "ts": 10 * i + 2,
            "args": {"Total Reserved": 0, "Total Allocated": 100 * i, "Bytes": nbytes, "Addr": 1000 + i,
                     "Device Type": 1, "Device Id": 0}}


def _memory_doc(lenient_at=None) -> list:
    events = []
    for i in range(60):
        events.append(_event(i, f"op{i % 5}"))
        events.append(_memory_event(i, 64 * i - 1000, "[OutOfMemory]" if i == 41 else "[memory]"))
    events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "marker", "pid": 1, "tid": 1, "ts": 7})
    if lenient_at is not None:  # an allocator event the strict Structs refuse: its piece is decoded leniently
        events[lenient_at]["args"]["Bytes"] = "12"
    return events


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("lenient_at", [None, 31])
def test_ranges_read_the_allocator_events_apart(tmp_path, small_ranges, gz, lenient_at):
    """With workers, a process of its own decodes the [memory] / [OutOfMemory] events (memory_child.py):
    the trace holds them as the sequential path reads them, asked for when first read."""
    raw = _doc(_memory_doc(lenient_at), pretty=True)
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    par, seq = load_trace(path, jobs=2), load_trace(path, jobs=1)
    assert small_ranges == ["inflating" if gz else "ranges", "split"]
    assert type(par.__dict__["_memory"]) is PendingMemory and type(seq.__dict__["_memory"]) is not PendingMemory
    _same(par, seq)
    assert type(par.__dict__["_memory"]) is not PendingMemory  # read once, kept
    assert len(par.memory) == 60 and par.memory.oom.tolist() == [i == 41 for i in range(60)]
    assert par.memory.bytes[15] == (12 if lenient_at else 64 * 15 - 1000) and par.memory.addr[59] == 1059  # 31: i=15


def test_a_memory_process_that_fails_is_said_not_guessed(tmp_path, small_ranges, monkeypatch):
    def dies(*args):
        raise MemoryError

    monkeypatch.setattr(memory_child, "_decode", dies)
    path = tmp_path / "t.json"
    path.write_bytes(_doc(_memory_doc()))
    trace = load_trace(path, jobs=2)
    assert trace.memory is None and trace.warnings == [memory_child.FAILED]
    assert len(trace.events) == 60  # the rest of the trace is read as ever


def test_a_memory_process_not_needed_is_ended(tmp_path, small_ranges, monkeypatch):
    ended = []
    real_cancel = memory_child.MemoryChild.cancel
    monkeypatch.setattr(memory_child.MemoryChild, "cancel", lambda self: ended.append(self.pid) or real_cancel(self))
    events = [_event(i, '}, {"ph": "X"}, {' * 8 if i < 35 else "aten::mm") for i in range(40)]
    path = tmp_path / "t.json"
    path.write_bytes(_doc(events + [_memory_event(3, 64)]))
    trace = load_trace(path, jobs=2)  # a range fails: the sequential path reads everything, memory too
    assert len(ended) == 1 and len(trace.memory) == 1 and trace.memory.bytes.tolist() == [64]
    with pytest.raises(ProcessLookupError):
        os.kill(ended[0], 0)  # ended and reaped


def test_a_cut_inside_a_string_falls_back(tmp_path, small_ranges):
    # names full of what a cut looks for: some range ends inside a string and fails to decode
    events = [_event(i, '}, {"ph": "X"}, {' * 8 if i < 35 else "aten::mm") for i in range(40)]
    path = tmp_path / "t.json"
    path.write_bytes(_doc(events))
    par, seq = load_trace(path, jobs=2), load_trace(path, jobs=1)
    assert small_ranges == ["ranges", "split", "split"]  # placed, failed to decode, fell back
    _same(par, seq)
    assert len(par.events) == 40


def test_bad_json_in_a_range_reports_like_the_sequential_path(tmp_path, small_ranges):
    raw = _doc([_event(i) for i in range(60)]).replace(b'"dur": 5', b'"dur": 5,,', 1)
    path = tmp_path / "t.json"
    path.write_bytes(raw)
    with pytest.raises(TraceError) as par:
        load_trace(path, jobs=2)
    assert small_ranges == ["ranges", "split"]
    with pytest.raises(TraceError) as seq:
        load_trace(path, jobs=1)
    assert str(par.value) == str(seq.value) and "not valid JSON" in str(par.value)


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
@pytest.mark.parametrize("gz", [True, False])
def test_real_trace_through_ranges_equals_sequential(real_traces, monkeypatch, tmp_path, gz):
    monkeypatch.setattr(byteranges, "MIN_BYTES", 1 << 20)
    monkeypatch.setattr(byteranges, "RANGE_BYTES", 4 << 20)  # 14 ranges of the 54 MB document
    path = real_traces / "v100_df_index_resolver.json.gz"
    if not gz:
        path = tmp_path / "v100.json"
        path.write_bytes(gzip.decompress((real_traces / "v100_df_index_resolver.json.gz").read_bytes()))
    calls = _spy_on_plan(monkeypatch)
    par, seq = load_trace(path, jobs=2), load_trace(path, jobs=1)
    assert calls == ["inflating" if gz else "ranges", "split"]
    _same(par, seq)
    assert len(par.events) == 123378 and par.raw_event_count == 216092


def test_progress_counts_bytes_through_the_ranges(tmp_path, small_ranges):
    path = tmp_path / "t.json"
    path.write_bytes(_doc([_event(i) for i in range(60)]))
    calls = []
    load_trace(path, progress=lambda done, total: calls.append((done, total)), jobs=2)
    assert small_ranges == ["ranges"]
    totals = {t for _, t in calls}
    assert len(totals) == 1 and calls[-1][0] == totals.pop()  # one total, reached at the end
    done = [d for d, _ in calls]
    assert done == sorted(done) and len(done) > 3  # one call per range


# --- the soundness claim, on generated documents -------------------------------------------------
_TRICKY = st.text(alphabet=st.sampled_from(list('ab{}[],:" \n\\') + ["\u00e9", "\U0001f600"]), max_size=12)
_VALUE = st.recursive(st.one_of(st.integers(-5, 5), _TRICKY, st.none()),
                      lambda inner: st.one_of(st.lists(inner, max_size=3),
                                              st.dictionaries(_TRICKY, inner, max_size=3)), max_leaves=6)
_ELEMENT = st.one_of(
    st.builds(lambda n, a: {"ph": "X", "name": n, "ts": 1, "args": a}, _TRICKY, st.dictionaries(_TRICKY, _VALUE,
                                                                                                  max_size=3)),
    _VALUE,  # not every element of a broken trace is an event
)


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
@settings(max_examples=150, deadline=None)
@given(elements=st.lists(_ELEMENT, max_size=25), after=st.dictionaries(_TRICKY, _VALUE, max_size=2),
       indent=st.sampled_from([None, 0, 2]), size=st.integers(1, 120))
def test_ranges_that_all_decode_are_the_array(elements, after, indent, size):
    """Whatever the names, nesting and layout: if plan() places the array and every piece of every
    range decodes, the pieces hold exactly the array's elements (else the loader falls back)."""
    after.pop("traceEvents", None)
    raw = json.dumps({"traceEvents": elements, **after}, indent=indent).encode()
    planned = byteranges.plan(raw, kineto._HEADER, size=size)
    if planned is None:
        return
    try:
        got = [e for a, b in planned[1] for p in byteranges.pieces(raw, a, b, size=max(1, size // 3))
               for e in msgspec.json.decode(p)]
    except msgspec.DecodeError:
        return  # a range that does not decode: the loader takes the sequential split
    assert got == elements


def _gz_doc(tmp_path, raw: bytes, name: str = "t.json.gz"):
    path = tmp_path / name
    path.write_bytes(gzip.compress(raw))
    return path


def test_gzip_oddities_fall_back_to_inflating_at_once(tmp_path, small_ranges):
    raw = _doc([_event(i) for i in range(60)])
    two_members = tmp_path / "two.json.gz"  # gzip allows concatenated members; the trailer sizes the last
    two_members.write_bytes(gzip.compress(raw[:500]) + gzip.compress(raw[500:]))
    par, seq = load_trace(two_members, jobs=2), load_trace(two_members, jobs=1)
    _same(par, seq)
    assert len(par.events) == 60 and small_ranges == ["inflating", "ranges", "split"]  # inflated at once, then cut


def test_corrupt_gzip_reports_like_the_sequential_path(tmp_path, small_ranges):
    data = gzip.compress(_doc([_event(i) for i in range(60)]))
    path = tmp_path / "t.json.gz"
    path.write_bytes(data[:40] + bytes(b ^ 0x55 for b in data[40:80]) + data[80:])
    with pytest.raises(TraceError) as par:
        load_trace(path, jobs=2)
    with pytest.raises(TraceError) as seq:
        load_trace(path, jobs=1)
    assert str(par.value) == str(seq.value) and "corrupt or truncated gzip data" in str(par.value)


def test_lists_after_the_array_never_change_the_result(tmp_path, small_ranges):
    devices = [{"id": i, "name": "H100", "totalGlobalMem": 85_000_000_000} for i in range(16)]
    raw = _doc([_event(i) for i in range(60)], pretty=True, deviceProperties=devices)
    path = _gz_doc(tmp_path, raw)
    par, seq = load_trace(path, jobs=2), load_trace(path, jobs=1)
    _same(par, seq)
    assert len(par.devices) == 16 and small_ranges[0] == "inflating"


_TRUNCATE_WHILE_READING = r"""
import sys
from perfsleuth.trace import byteranges, kineto
from perfsleuth.errors import TraceError
from perfsleuth.trace.model import load_trace
byteranges.MIN_BYTES, byteranges.RANGE_BYTES, kineto.MMAP_BYTES = 1000, 400, 1000
real_plan = byteranges.plan

def plan(*args):
    planned = real_plan(*args)
    with open(sys.argv[1], "r+b") as fh:  # another process rewrites the trace meanwhile: from the
        fh.truncate(4096)  # second page on, reading the mapping would raise SIGBUS
    return planned

byteranges.plan = plan
try:
    load_trace(sys.argv[1], jobs=2)
except TraceError as exc:
    print(exc)
"""


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_a_file_cut_short_while_it_is_read_is_bad_json_not_a_crash(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "t.json"
    path.write_bytes(_doc([_event(i) for i in range(150)]))  # 18 kB: 5 pages
    done = subprocess.run([sys.executable, "-c", _TRUNCATE_WHILE_READING, str(path)], capture_output=True,
                          text=True, timeout=60)  # before: the workers died of SIGBUS and the pool waited for ever
    assert done.returncode == 0, done.stderr[-2000:]  # a mapping read after the cut would die of SIGBUS (-7)
    assert done.stdout.startswith(f"{path}: not valid JSON")


def _dies_in_a_worker(parent: int):
    def transform(columns):
        if os.getpid() != parent:
            os._exit(9)  # as the OOM killer would
        return columns
    return transform


def test_a_worker_that_dies_is_noticed(tmp_path, small_ranges, monkeypatch):
    from perfsleuth.trace import document

    path = tmp_path / "t.json"
    path.write_bytes(_doc([_event(i) for i in range(60)]))
    transform = _dies_in_a_worker(os.getpid())
    # byte ranges: the worker's death sends the document to the sequential path, in this process
    header, outs, entries = document.decode_events(path, kineto.read_file(path), [], transform, jobs=2)
    assert small_ranges == ["ranges", "split"] and entries == 60 and sum(len(c["ts"]) for c in outs) == 60
    # the sequential path's workers: one line (exit 2), never a hang
    monkeypatch.setattr(byteranges, "MIN_BYTES", 1 << 30)
    monkeypatch.setattr(document, "CHUNK", 10)
    with pytest.raises(TraceError, match="a decoding worker process died"):
        document.decode_events(path, kineto.read_file(path), [], transform, jobs=2)


def test_tasks_submitted_after_a_worker_died_are_refused_quietly(tmp_path):
    import concurrent.futures

    from perfsleuth.trace import workers

    def blobs_of(task):
        if task == "die":
            os._exit(9)
        return [b'[{"ph": "X", "name": "a", "ts": 1}]']

    for fallible in (True, False):
        with workers.Decoder(tmp_path / "t.json", blobs_of, lambda c: c, jobs=2, fallible=fallible) as decoder:
            decoder.submit("die")
            concurrent.futures.wait([decoder.pending[0][1]])  # the pool is broken now
            decoder.submit("fine")  # does not raise
            if fallible:
                assert decoder.results(lambda t: 0, 1) is None
            else:
                with pytest.raises(TraceError, match="a decoding worker process died"):
                    decoder.results(lambda t: 0, 1)


def test_a_worker_that_dies_while_a_gzip_inflates_is_noticed(tmp_path, small_ranges):
    from perfsleuth.trace import document

    path = _gz_doc(tmp_path, _doc([_event(i) for i in range(300)]))
    header, outs, entries = document.decode_events(path, kineto.read_file(path), [],
                                                   _dies_in_a_worker(os.getpid()), jobs=2)
    assert small_ranges[0] == "inflating" and small_ranges[-1] == "split" and entries == 300
    assert sum(len(c["ts"]) for c in outs) == 300


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("layout", ["nested", "duplicate"])
def test_a_second_traceevents_key_reads_as_the_sequential_path(tmp_path, small_ranges, layout, gz):
    """issue 18: the top-level key the sequential decoder keeps is empty here; a nested object (or an
    earlier duplicate key) holds events. The ranges used to decode those; now both paths agree."""
    decoy = json.dumps([_event(i, "decoy") for i in range(60)])
    if layout == "nested":
        raw = ('{"distributedInfo": {"rank": 3, "traceEvents": %s}, "traceEvents": []}' % decoy).encode()
    else:
        raw = ('{"traceEvents": %s, "traceEvents": []}' % decoy).encode()
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    with pytest.raises(TraceError, match="no complete events") as par:
        load_trace(path, jobs=2)
    with pytest.raises(TraceError, match="no complete events") as seq:
        load_trace(path, jobs=1)
    assert str(par.value) == str(seq.value)
    assert "split" in small_ranges and "ranges" not in small_ranges  # the ranges were refused


def test_plan_refuses_an_earlier_duplicate_key():
    raw = b'{"traceEvents": [{"ph": "X", "name": "decoy"}], "traceEvents": [{"ph": "X", "name": "real"}]}'
    assert byteranges.plan(raw, kineto._HEADER) is None
    assert bytes(kineto._HEADER.decode(raw).traceEvents[0]) == b'{"ph": "X", "name": "real"}'  # the last wins
