"""The library API: directories analysed in parallel give the same reports as one by one."""

import shutil

import pytest
from perfsleuth.api import ReportSet, analyze_path


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_parallel_directory_equals_sequential(real_traces, tmp_path):
    names = ["mi250_rocm_minitoy.json.gz", "cpu_only_tiny.pt.trace.json.gz", "a100_cuda_event_sync.json.gz"]
    for n in names:
        shutil.copy(real_traces / n, tmp_path / n)
    (tmp_path / "broken.json").write_text("{")
    seq = analyze_path(tmp_path, jobs=1)
    par = analyze_path(tmp_path, jobs=2)
    assert isinstance(par, ReportSet)
    assert par.to_dict() == seq.to_dict()
    assert [r["trace"]["path"].rsplit("/", 1)[1] for r in par.to_dict()["reports"]] == sorted(names)
    assert par.skipped == [(str(tmp_path / "broken.json"), seq.skipped[0][1])]
    assert par.reports[0].to_dict()["trace"]["events"] > 0  # counts survive slimming


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_progress_is_reported_per_chunk(real_traces):
    calls = []
    analyze_path(real_traces / "v100_df_index_resolver.json.gz", progress=lambda d, t: calls.append((d, t)),
                 jobs=1)  # the sequential path counts events (byte ranges count bytes: test_byteranges.py)
    assert calls[-1][0] == calls[-1][1] == 216092
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert len(calls) == 3  # 100k events per chunk


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_parallel_chunk_decoding_equals_sequential(real_traces, monkeypatch):
    from perfsleuth.trace import byteranges, document
    from perfsleuth.trace.model import load_trace

    monkeypatch.setattr(byteranges, "MIN_BYTES", 1 << 30)  # the sequential split, its chunks in workers
    monkeypatch.setattr(document, "CHUNK", 20_000)  # 11 chunks of the 216k-event trace
    path = real_traces / "v100_df_index_resolver.json.gz"
    seq, par = load_trace(path, jobs=1), load_trace(path, jobs=2)
    assert len(par.events) == len(seq.events) == 123378
    assert par.events.equals(seq.events)
    assert par.thread_names == seq.thread_names and par.warnings == seq.warnings


def test_worker_warnings_reach_the_report(tmp_path, monkeypatch):
    from perfsleuth.trace import document
    from perfsleuth.trace.model import load_trace

    monkeypatch.setattr(document, "CHUNK", 2)  # 5 chunks, decoded by 2 workers
    good = b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 1, "pid": 1, "tid": 1}'
    bad = b'{"ph": "X", "cat": "cpu_op", "name": "aten::\xff", "ts": 5, "dur": 1, "pid": 1, "tid": 1}'
    path = tmp_path / "utf8.json"
    path.write_bytes(b'{"traceEvents": [' + b",".join([good] * 7 + [bad, good, good]) + b"]}")
    trace = load_trace(path, jobs=2)
    assert trace.warnings == ["invalid UTF-8 bytes in the trace were replaced with U+FFFD",
                              "8 duplicate events were ignored"]  # the 9 identical aten::mm events
    assert sorted(trace.events["name"].astype(str).unique()) == ["aten::mm", "aten::\ufffd"]


def test_analysis_runs_without_huge_pages_and_restores_numpy(real_traces, monkeypatch):
    from numpy._core.multiarray import _get_madvise_hugepage
    from perfsleuth import api

    seen = []
    real = api.analyze_trace
    monkeypatch.setattr(api, "analyze_trace", lambda *a: seen.append(_get_madvise_hugepage()) or real(*a))
    before = _get_madvise_hugepage()
    api.analyze_file(real_traces / "cpu_only_tiny.pt.trace.json.gz")
    assert seen == [False] and _get_madvise_hugepage() == before
