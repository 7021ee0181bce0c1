"""HolisticTraceAnalysis's own multi-trace test folders (fixtures/traces/hta, README there): none is the
ranks of one job, and perfsleuth must say so instead of reaching a job verdict (issue 26). Before the
fix: trace_diff was one job (clocks "corrected" by 735003.83 s, COMMUNICATION-BOUND), trace_filter's
SendRecv kernels were paired by order (waits 61.65 / 53.08 ms per step, COMMUNICATION-BOUND, nothing
about the 126 missing ranks), and trace_compare's two copies of rank 1 were relabelled 0 and 1."""

import json
from pathlib import Path

import pytest
from perfsleuth.api import analyze_path
from perfsleuth.render.markdown import render_markdown
from perfsleuth.render.ranks_html import ranks_view
from perfsleuth.render.ranks_text import render_ranks_terminal

HTA = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "hta"
CROSS_KEYS = {"ranks", "collectives", "stragglers", "job", "jobs"}


@pytest.fixture(scope="module")
def reports() -> dict:
    out = {}
    for name in ("trace_diff", "trace_filter", "trace_compare"):
        data = analyze_path(HTA / name, jobs=1).to_dict()
        json.dumps(data, allow_nan=False)
        out[name] = data
    return out


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_trace_diff_is_two_jobs_with_no_cross_rank_report(reports):
    data = reports["trace_diff"]
    assert [(r["trace"]["rank"], r["trace"]["world_size"]) for r in data["reports"]] == [(3, 8), (1, 2)]
    assert not CROSS_KEYS & set(data)  # no job verdict of a job that does not exist
    assert data["warnings"] == [
        "2 jobs in one folder, not one: they differ in device (NVIDIA A100-PG509-200, Tesla V100-SXM2-16GB), world "
        "size (8, 2), time (their recordings start as much as 8.5 days apart); job 1: rank 3 of 8 (control/control.json.gz); job 2: "
        "rank 1 of 2 (test/test.json.gz). Each job of two or more traces gets its own cross-rank report"]
    text = render_ranks_terminal(data)
    assert text.startswith("warning: 2 jobs in one folder, not one") and "job verdict" not in text
    assert "- **Warning:** 2 jobs in one folder, not one" in render_markdown(data)
    assert ranks_view(data)["jobs"] == []


def test_trace_filter_says_2_of_128_ranks_and_pairs_sendrecv_by_time(reports):
    data = reports["trace_filter"]
    job, c = data["job"], data["collectives"]
    assert (job["ranks"], job["world_size"], len(job["missing_ranks"])) == (2, 128, 126)
    assert job["verdict"] is None and job["verdict_reason"] == "withheld: 2 of 128 ranks present"
    assert data["stragglers"] == []
    assert job["warnings"][0].startswith("2 of 128 ranks present (rank(s) 2-127 have no trace here)")
    # 10 SendRecv kernels per rank: 5 pairs whose ends coincide (within 0-332 µs), 10 without a partner.
    p = c["point_to_point"]
    assert (p["operations"], p["pairs"], p["unmatched"], p["ambiguous"]) == (20, 5, 10, 0)
    assert p["matched_by"] == ["end time on the aligned clocks"] and c["collective_instances"] == 0
    assert c["clock"]["residual_us"] == 55.0
    assert [r["wait_us_per_step"] for r in data["ranks"]] == [16008.5, 124.0]
    assert [r["caused_wait_us_per_step"] for r in data["ranks"]] == [124.0, 16008.5]
    assert p["unmatched_us_per_step"] == 186702.5  # reported, charged to no rank
    text = render_ranks_terminal(data)
    assert "across 2 of 128 ranks" in text and "job verdict: WITHHELD" in text
    assert "10 unmatched: 186.70 ms per step not charged to any rank" in text


def test_trace_compare_duplicate_ranks_are_named_and_analysed_alone(reports):
    data = reports["trace_compare"]
    assert [r["trace"]["rank"] for r in data["reports"]] == [1, 1]  # never relabelled
    assert not CROSS_KEYS & set(data)
    assert data["warnings"] == [
        "duplicate ranks: base/base.json.gz and test/test.json.gz both say rank 1, recorded at the same time: ranks "
        "are not relabelled, so these 2 traces are analysed each alone, with no cross-rank report"]
