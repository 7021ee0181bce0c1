"""The library API: directories analysed in parallel give the same reports as one by one."""

import shutil

from perfsleuth.api import ReportSet, analyze_path


def test_parallel_directory_equals_sequential(shared_traces, tmp_path):
    names = ["mi250_rocm_minitoy.json.gz", "cpu_only_tiny.pt.trace.json.gz", "a100_cuda_event_sync.json.gz"]
    for n in names:
        shutil.copy(shared_traces / n, tmp_path / n)
    (tmp_path / "broken.json").write_text("{")
    seq = analyze_path(tmp_path, jobs=1)
    par = analyze_path(tmp_path, jobs=2)
    assert isinstance(par, ReportSet)
    assert par.to_dict() == seq.to_dict()
    assert [r["trace"]["path"].rsplit("/", 1)[1] for r in par.to_dict()["reports"]] == sorted(names)
    assert par.skipped == [(str(tmp_path / "broken.json"), seq.skipped[0][1])]
    assert par.reports[0].to_dict()["trace"]["events"] > 0  # counts survive slimming


def test_progress_is_reported_per_chunk(shared_traces):
    calls = []
    analyze_path(shared_traces / "v100_df_index_resolver.json.gz", progress=lambda d, t: calls.append((d, t)))
    assert calls[-1][0] == calls[-1][1] == 216092
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert len(calls) == 3  # 100k events per chunk
