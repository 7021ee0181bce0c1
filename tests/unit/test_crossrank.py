"""The cross-rank analysis on hand-built rank traces (tests/helpers/tracebuilder.py): matching, the transfer /
wait split, who caused the waits, clock alignment, stragglers, the forecast and the job verdict, with
exact numbers (docs/ranks.md)."""

import json

import numpy as np
import pandas as pd
import pytest
from perfsleuth.analysis.ranks import collectives as cr
from perfsleuth.analysis.ranks.summary import RankSummary
from perfsleuth.analysis.ranks.stragglers import analyze_ranks
from perfsleuth.api import analyze_path
from perfsleuth.config import CATEGORIES, Config
from perfsleuth.render.markdown import render_markdown
from perfsleuth.render.ranks_text import render_ranks_terminal

from tracebuilder import TraceBuilder

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SKEW = 500.0  # rank 1's clock runs this many µs ahead of rank 0's


def _rank(rank: int, clock: float, loader: float, compute: float, comm: tuple, group=None, steps=2,
          world=2) -> TraceBuilder:
    """Steps of 1000 µs (true time): the DataLoader for `loader` µs, a kernel for `compute` µs, then
    the all-reduce kernel at `comm` = (start, duration) within the step, all shifted by `clock`."""
    tb = TraceBuilder(rank=rank, world_size=world)
    for k in range(steps):
        base = clock + 1000.0 * k
        tb.step(k + 1, base, 1000.0)
        tb.dataloader(base, loader)
        tb.launch("volta_sgemm_128x64_nn", host=(base + loader, 5.0), device=(base + loader, compute))
        ev = tb.launch(ALLREDUCE, host=(base + loader + 6.0, 5.0), device=(base + comm[0], comm[1]))
        if group is not None:
            ev["args"].update({"Process Group Name": group, **({"Seq": k} if group == "0" else {})})
    return tb


def _job(tmp_path, group=None, clock=SKEW):
    # Rank 0 is ready at 300 µs and waits for rank 1, whose DataLoader takes 600 µs: it joins at 700 µs.
    # Both all-reduces end at 900 µs (true time): transfer 200 µs, rank 0 waits 400 µs.
    _rank(0, 0.0, 200.0, 100.0, (300.0, 600.0), group).write(tmp_path / "rank0.json")
    _rank(1, clock, 600.0, 100.0, (700.0, 200.0), group).write(tmp_path / "rank1.json")
    return analyze_path(tmp_path, jobs=1).to_dict()


def test_straggler_job_exact_numbers(tmp_path):
    data = _job(tmp_path)
    r0, r1 = data["ranks"]
    assert (r0["rank"], r1["rank"]) == (0, 1)
    assert r0["time_us"] == {"dataloader": 200.0, "kernel": 100.0, "sync": 0.0, "transfer": 0.0, "host": 100.0,
                             "communication": 600.0, "other": 0.0}
    assert r1["time_us"] == {"dataloader": 600.0, "kernel": 100.0, "sync": 0.0, "transfer": 0.0, "host": 100.0,
                             "communication": 200.0, "other": 0.0}
    assert (r0["wait_us_per_step"], r1["wait_us_per_step"]) == (400.0, 0.0)
    assert (r0["caused_wait_us_per_step"], r1["caused_wait_us_per_step"]) == (0.0, 400.0)
    assert (r0["collective_us_per_step"], r1["collective_us_per_step"]) == (600.0, 200.0)
    assert (r0["last_arrivals"], r1["last_arrivals"]) == (0, 2)
    c = data["collectives"]
    assert c["matched_by"] == cr.BY_NAME and c["instances"] == 2 and c["unmatched"] == 0
    assert c["transfer_us_per_step"] == 200.0 and c["wait_us_per_step"] == 200.0  # mean over the 2 ranks
    assert c["by_kind"] == [{"process_group": None, "name": "allreduce", "instances": 2, "per_step": 1.0,
                             "transfer_us_per_step": 200.0, "wait_us_per_step": 200.0, "max_start_skew_us": 400.0}]
    # Clock alignment: rank 1's clock is 500 µs ahead; its collective ends say so exactly.
    assert c["clock"] == {"reference_rank": 0, "offsets_us": {"0": 0.0, "1": -SKEW}, "max_correction_us": SKEW,
                          "residual_us": 0.0}
    [s] = data["stragglers"]
    assert s["rank"] == 1 and s["cause"] == "dataloader" and s["wait_in"] == "allreduce"
    assert (s["excess_us_per_step"], s["total_excess_us_per_step"], s["others_wait_us_per_step"]) == (400.0, 400.0, 400.0)
    assert s["forecast"]["step_time_us"] == 600.0 and s["forecast"]["saving_us"] == 400.0
    assert s["forecast"]["speedup"] == pytest.approx(1000 / 600, abs=1e-3) and s["forecast"]["kind"] == "forecast"
    job = data["job"]
    assert job["verdict"] == "straggler-bound" and job["critical_rank"] == 1
    assert job["exposed_communication_us_per_step"] == 200.0 and job["step_time_us"] == 1000.0


def test_alignment_does_not_change_the_split(tmp_path):
    """Waits come from durations: the same job with rank 1's clock 3 s behind gives the same split, and
    the correction applied is the clock difference."""
    data = _job(tmp_path, clock=-3_000_000.0)
    assert data["collectives"]["clock"]["offsets_us"] == {"0": 0.0, "1": 3_000_000.0}
    assert [r["wait_us_per_step"] for r in data["ranks"]] == [400.0, 0.0]
    assert data["stragglers"][0]["others_wait_us_per_step"] == 400.0


def test_matched_by_process_group_and_sequence(tmp_path):
    data = _job(tmp_path, group="0")
    c = data["collectives"]
    assert c["matched_by"] == cr.BY_SEQUENCE and c["instances"] == 2
    assert c["by_kind"][0]["process_group"] == "0"
    assert [r["wait_us_per_step"] for r in data["ranks"]] == [400.0, 0.0]


def test_matched_by_group_and_order_without_sequence(tmp_path):
    data = _job(tmp_path, group="7")
    assert data["collectives"]["matched_by"] == cr.BY_GROUP and data["collectives"]["instances"] == 2


def test_unmatched_instances_are_counted_not_used(tmp_path):
    """A third step on rank 0 only: its collective has no partner."""
    _rank(0, 0.0, 200.0, 100.0, (300.0, 600.0), steps=3).write(tmp_path / "rank0.json")
    _rank(1, SKEW, 600.0, 100.0, (700.0, 200.0), steps=2).write(tmp_path / "rank1.json")
    c = analyze_path(tmp_path, jobs=1).to_dict()["collectives"]
    assert c["instances"] == 2 and c["unmatched"] == 1


def test_balanced_job_has_no_straggler(tmp_path):
    for r in (0, 1):
        _rank(r, 100.0 * r, 200.0, 100.0, (300.0, 600.0)).write(tmp_path / f"rank{r}.json")
    data = analyze_path(tmp_path, jobs=1).to_dict()
    assert data["stragglers"] == []
    assert [r["wait_us_per_step"] for r in data["ranks"]] == [0.0, 0.0]
    # 600 µs of every 1000 µs step is communication no compute overlaps: communication-bound.
    assert data["job"]["verdict"] == "communication-bound"
    assert data["job"]["exposed_communication_us_per_step"] == 600.0
    assert data["collectives"]["clock"]["offsets_us"]["1"] == -100.0


def _summary(rank, durations, end=10_000, steps=1, cats=None, start_gap=0):
    n = len(durations)
    coll = pd.DataFrame({"step": np.zeros(n, np.int32), "name": ["allreduce"] * n, "pg": [""] * n,
                         "seq": np.full(n, -1, np.int64),
                         "start": np.array([end + 10_000 * i - d for i, d in enumerate(durations)], np.int64),
                         "end": np.array([end + 10_000 * i for i in range(n)], np.int64)})
    cats = cats or {c: 0.0 for c in CATEGORIES}
    return RankSummary(path=f"r{rank}", rank=rank, world_size=3, device_type="cuda", verdict="kernel-bound",
                       steps=[f"ProfilerStep#{k}" for k in range(steps)], step_ns=np.full(steps, 10_000, np.int64),
                       category_ns=cats, collectives=coll)


def test_waits_are_charged_by_order_of_arrival():
    """Durations 1000, 600, 200 ns: transfer 200; waits 800, 400, 0. Rank 1 comes 400 after rank 0 (one
    rank waiting), rank 2 400 after rank 1 (two waiting): charges per other rank 400*1/2 and 400*2/2."""
    m = cr.match([_summary(0, [1000]), _summary(1, [600]), _summary(2, [200])])
    s = cr.split(m)
    assert s.transfer.tolist() == [200.0]
    assert s.wait.tolist() == [[800.0, 400.0, 0.0]]
    assert s.caused.tolist() == [[0.0, 200.0, 400.0]]
    assert s.last.tolist() == [2]
    assert (s.caused.sum() * 2) == s.wait.sum()  # the charges add up to the waits


def test_concurrent_waits_count_once():
    """Rank 0 waits in two collectives at the same time (two worker threads): 800 ns of wall clock, not
    1600; rank 1 is charged 800 per step."""
    a = _summary(0, [1000, 1000])
    a.collectives["start"] = [0, 0]
    a.collectives["end"] = [1000, 1000]
    a.collectives["name"] = ["allreduce", "broadcast"]
    b = _summary(1, [200, 200])
    b.collectives["start"] = [800, 800]
    b.collectives["end"] = [1000, 1000]
    b.collectives["name"] = ["allreduce", "broadcast"]
    m = cr.match([a, b])
    s = cr.split(m)
    pr = cr.per_rank([a, b], m, s)
    assert pr["wait_ns"].tolist() == [800.0, 0.0]
    assert pr["caused_ns"].tolist() == [0.0, 800.0]


def test_ranks_are_ordered_and_labelled():
    a, b, c = _summary(3, [10]), _summary(1, [10]), _summary(None, [10])
    ordered, labels = cr.order_ranks([a, b, c])
    assert [x.path for x in ordered] == ["r1", "r3", "rNone"] and labels == [1, 3, 0]


def test_cross_rank_renders(tmp_path):
    data = _job(tmp_path)
    text = render_ranks_terminal(data)
    assert "job verdict: STRAGGLER-BOUND" in text
    assert ("rank 1 spends 400 µs more per step in the DataLoader than the median rank; the other rank waits "
            "400 µs per step for it in allreduce") in text
    assert "forecast: step 1.00 ms -> 600 µs" in text and "a forecast, not a measurement" in text
    md = render_markdown(data)
    assert "### Across 2 ranks: **straggler-bound**" in md and "| 1 | 1.00 ms | 600 µs |" in md
    json.dumps(data, allow_nan=False)


def test_names_from_traces_are_escaped_in_the_cross_rank_section(tmp_path):
    data = _job(tmp_path)
    data["stragglers"][0]["wait_in"] = "<script>alert(1)</script>|\x1b[31m"
    from perfsleuth.render.set_page import render_set_html

    page = render_set_html(data)
    assert "<script>alert(1)" not in page and "&lt;script&gt;" in page
    assert "\x1b" not in render_ranks_terminal(data)
    assert "<script>" not in render_markdown(data)


def test_config_threshold_decides_stragglers(tmp_path):
    _rank(0, 0.0, 200.0, 100.0, (300.0, 600.0)).write(tmp_path / "rank0.json")
    _rank(1, SKEW, 600.0, 100.0, (700.0, 200.0)).write(tmp_path / "rank1.json")
    rs = analyze_path(tmp_path, jobs=1)
    strict = analyze_ranks([r.rank_summary for r in rs.reports], Config(straggler_share=0.5))
    assert strict.stragglers == [] and strict.job["verdict"] == "communication-bound"


def test_unrelated_traces_get_no_cross_rank_report(tmp_path):
    """Two single-process traces (rank 0 of 1 each, no collectives): not one job."""
    for i in range(2):
        tb = TraceBuilder(rank=0, world_size=1)
        tb.step(1, 0, 100)
        tb.launch("volta_sgemm_128x64_nn", host=(5, 3), device=(10, 50))
        tb.write(tmp_path / f"t{i}.json")
    data = analyze_path(tmp_path, jobs=1).to_dict()
    assert len(data["reports"]) == 2
    assert not {"ranks", "collectives", "stragglers", "job"} & set(data)


def test_ranks_of_one_world_without_collectives_still_get_the_table(tmp_path):
    for r in range(2):
        tb = TraceBuilder(rank=r, world_size=2)
        tb.step(1, 0, 100 + 100 * r)
        tb.launch("volta_sgemm_128x64_nn", host=(5, 3), device=(10, 50))
        tb.write(tmp_path / f"rank{r}.json")
    data = analyze_path(tmp_path, jobs=1).to_dict()
    assert [r["step_time_us"] for r in data["ranks"]] == [100.0, 200.0]
    assert data["collectives"]["instances"] == 0 and data["stragglers"] == []
    assert "no collectives in the analysed steps of any rank" in data["job"]["warnings"]
    assert data["job"]["critical_rank"] == 1  # no waits to go by: the rank with the longest step


def test_collectives_in_steps_no_other_rank_has_are_unmatched():
    a, b = _summary(0, [1000], steps=1), _summary(1, [200], steps=1)
    a.steps, b.steps = ["ProfilerStep#0", "ProfilerStep#7"], ["ProfilerStep#9", "ProfilerStep#7"]
    a.step_ns = b.step_ns = np.array([10_000, 10_000], np.int64)  # each collective is in a step the other lacks
    m = cr.match([a, b])
    assert len(m.keys) == 0 and m.unmatched == 2
    assert m.warnings == ["no collective falls in a step that the ranks share"]
    assert cr.split(m).transfer.size == 0
