"""Cross-rank conclusions that hold (issue 26), on hand-built traces with exact numbers: traces grouped
into jobs, duplicate ranks refused, clocks that rule out one job, missing ranks, point-to-point
operations paired by peer or by time, and jitter told from a straggler (docs/ranks.md)."""

import json

import pytest
from perfsleuth.analysis.ranks import p2p
from perfsleuth.api import analyze_path
from perfsleuth.render.markdown import render_markdown
from perfsleuth.render.ranks_text import render_ranks_terminal

from tracebuilder import TraceBuilder

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "volta_sgemm_128x64_nn"
EARLY, LATE = (200.0, 100.0, (300.0, 600.0)), (600.0, 100.0, (700.0, 200.0))  # loader, compute, all-reduce
SLOW_KERNEL = (200.0, 500.0, (700.0, 200.0))  # late because of its kernel, not its DataLoader


def _rank(rank, world, plan, clock=0.0, step_us=1000.0, gap_us=0.0, pg=None):
    """One step per entry of `plan` (loader µs, kernel µs, (all-reduce start, duration) in the step),
    steps `step_us` long and `gap_us` apart, the rank's clock shifted by `clock` µs."""
    tb = TraceBuilder(rank=rank, world_size=world)
    for k, (loader, compute, (c0, cd)) in enumerate(plan):
        base = clock + k * (step_us + gap_us)
        tb.step(k + 1, base, step_us)
        tb.dataloader(base, loader)
        tb.launch(GEMM, host=(base + loader, 5.0), device=(base + loader, compute))
        ev = tb.launch(ALLREDUCE, host=(base + loader + 6.0, 5.0), device=(base + c0, cd))
        if pg is not None:
            ev["args"]["Process Group Name"] = pg
    return tb


def _write(tb, path, pg_config=None):
    doc = tb.build()
    if pg_config is not None:
        doc["distributedInfo"]["pg_config"] = pg_config
    path.write_text(json.dumps(doc))


def _analyze(folder):
    data = analyze_path(folder, jobs=1).to_dict()
    json.dumps(data, allow_nan=False)
    return data


# --- one job -------------------------------------------------------------------------------------

def test_traces_of_different_world_sizes_are_two_jobs(tmp_path):
    _write(_rank(0, 2, [EARLY] * 2), tmp_path / "a.json")
    _write(_rank(1, 4, [LATE] * 2), tmp_path / "b.json")
    data = _analyze(tmp_path)
    assert not {"ranks", "job", "jobs"} & set(data)
    assert data["warnings"] == [
        "2 jobs in one folder, not one: they differ in world size (2, 4); job 1: rank 0 of 2 (a.json); job 2: "
        "rank 1 of 4 (b.json). Each job of two or more traces gets its own cross-rank report"]
    text = render_ranks_terminal(data)
    assert "warning: 2 jobs in one folder, not one" in text and "job verdict" not in text


def test_duplicate_ranks_recorded_together_are_named_not_relabelled(tmp_path):
    for name, rank in (("r0.json", 0), ("r1.json", 1), ("copy_of_r1.json", 1)):
        _write(_rank(rank, 2, [EARLY] * 2), tmp_path / name)
    data = _analyze(tmp_path)
    assert not {"ranks", "job", "jobs"} & set(data)
    assert data["warnings"] == [
        "duplicate ranks: copy_of_r1.json and r1.json both say rank 1, recorded at the same time: ranks are not "
        "relabelled, so these 3 traces are analysed each alone, with no cross-rank report"]
    assert sorted(r["trace"]["rank"] for r in data["reports"]) == [0, 1, 1]


def test_the_same_ranks_recorded_one_after_the_other_are_two_jobs(tmp_path):
    """Two launches of a 2-rank job 10 s apart: each pair of traces is a job, with its own report."""
    for job, clock in (("a", 0.0), ("b", 10e6)):
        _write(_rank(0, 2, [EARLY] * 2, clock), tmp_path / f"{job}_rank0.json")
        _write(_rank(1, 2, [LATE] * 2, clock + 50.0), tmp_path / f"{job}_rank1.json")
    data = _analyze(tmp_path)
    assert "job" not in data and len(data["jobs"]) == 2
    assert [[r["path"].rsplit("/", 1)[1] for r in j["ranks"]] for j in data["jobs"]] == [
        ["a_rank0.json", "a_rank1.json"], ["b_rank0.json", "b_rank1.json"]]
    assert all(j["job"]["verdict"] == "straggler-bound" and j["stragglers"][0]["rank"] == 1 for j in data["jobs"])
    assert data["warnings"][0].startswith("2 jobs in one folder, not one: they differ in time (their recordings start as much as 10.0 s "
                                          "apart)")
    text = render_ranks_terminal(data)
    assert "job 1 of 2: across 2 ranks" in text and "job 2 of 2: across 2 ranks" in text
    assert "### Job 2 of 2: across 2 ranks: **straggler-bound**" in render_markdown(data)


def test_clocks_further_apart_than_a_host_offset_give_no_job_verdict(tmp_path):
    """Windows that overlap (steps 300 s apart) but collectives that put the clocks 120 s apart."""
    _write(_rank(0, 2, [EARLY] * 2, gap_us=300e6), tmp_path / "rank0.json")
    _write(_rank(1, 2, [LATE] * 2, clock=120e6, gap_us=300e6), tmp_path / "rank1.json")
    data = _analyze(tmp_path)
    job = data["job"]
    assert job["verdict"] is None and data["stragglers"] == []
    assert job["verdict_reason"] == "withheld: the clocks are 120.00 s apart: not one job"
    assert job["warnings"] == ["matching their collectives puts the traces' clocks 120.00 s apart, more than 60 s: "
                               "they are not one job, and there is no job verdict"]
    assert "job verdict: WITHHELD" in render_ranks_terminal(data)


def test_ends_that_alignment_cannot_reconcile_give_no_job_verdict(tmp_path):
    """Rank 1's all-reduces end 350 µs after rank 0's in one step and 350 µs before in the next: no
    clock offset makes them coincide; the residual (350 µs) exceeds the all-reduces (100 µs each): the
    two ranks were never inside one of them together."""
    _write(_rank(0, 2, [(200.0, 100.0, (500.0, 100.0))] * 2), tmp_path / "rank0.json")
    _write(_rank(1, 2, [(200.0, 100.0, (850.0, 100.0)), (50.0, 50.0, (150.0, 100.0))]), tmp_path / "rank1.json")
    data = _analyze(tmp_path)
    assert data["collectives"]["instances"] == 2 and data["collectives"]["clock"]["residual_us"] == 350.0
    assert data["job"]["verdict"] is None and data["stragglers"] == []
    assert data["job"]["verdict_reason"] == ("withheld: the matched ends still differ by 350 µs after clock "
                                             "alignment: not one job, or matched wrongly")


# --- missing ranks -------------------------------------------------------------------------------

def test_missing_ranks_are_said_and_their_waits_charged_to_no_present_rank(tmp_path):
    _write(_rank(0, 4, [EARLY] * 2), tmp_path / "rank0.json")
    _write(_rank(1, 4, [LATE] * 2), tmp_path / "rank1.json")
    data = _analyze(tmp_path)
    job = data["job"]
    assert (job["ranks"], job["world_size"], job["missing_ranks"]) == (2, 4, [2, 3])
    assert [r["wait_us_per_step"] for r in data["ranks"]] == [400.0, 0.0]
    assert [r["caused_wait_us_per_step"] for r in data["ranks"]] == [0.0, 0.0]
    assert job["absent_wait_us_per_step"] == 400.0 and data["stragglers"] == [] and job["verdict"] is None
    assert job["verdict_reason"] == "withheld: 2 of 4 ranks present"
    assert job["warnings"] == [
        "2 of 4 ranks present (rank(s) 2, 3 have no trace here): a present rank may have waited for an absent one, so "
        "the waits in collectives whose group has absent ranks (400 µs per step) are charged to ranks not in the "
        "folder, not to a present rank; no rank is named a straggler and the job verdict is withheld"]
    assert job["among_present"] == {"rank": 1, "last": 2, "of": 2, "cause": "dataloader", "excess_us_per_step": 400.0}
    text = render_ranks_terminal(data)
    assert "across 2 of 4 ranks" in text and "absent (ranks not in the folder) caused 400 µs per step" in text
    assert ("among the ranks present, rank 1 arrives last in 2 of 2 matched instances and spends 400 µs more per "
            "step in the DataLoader than the median of the others; an absent rank may arrive later still") in text
    assert "### Across 2 of 4 ranks: **withheld**" in render_markdown(data)


def test_a_group_whose_ranks_are_all_here_is_charged_as_usual(tmp_path):
    """The all-reduces run in process group 5 = ranks {0, 1}: both present, so rank 1 is charged its
    400 µs, even though ranks 2 and 3 of the world have no trace (the job verdict stays withheld)."""
    groups = [{"pg_name": "5", "ranks": [0, 1]}, {"pg_name": "0", "ranks": [0, 1, 2, 3]}]
    _write(_rank(0, 4, [EARLY] * 2, pg="5"), tmp_path / "rank0.json", groups)
    _write(_rank(1, 4, [LATE] * 2, pg="5"), tmp_path / "rank1.json", groups)
    data = _analyze(tmp_path)
    assert [r["caused_wait_us_per_step"] for r in data["ranks"]] == [0.0, 400.0]
    assert data["job"]["absent_wait_us_per_step"] == 0.0 and data["job"]["verdict"] is None


# --- point-to-point ------------------------------------------------------------------------------

def _p2p_rank(rank, ops, peers=True, steps=2):
    """3 ranks; per step, SendRecv kernels (start, duration, peer) in a 1000 µs step."""
    tb = TraceBuilder(rank=rank, world_size=3)
    for k in range(steps):
        base = 1000.0 * k
        tb.step(k + 1, base, 1000.0)
        for start, dur, peer in ops:
            op = tb.op("record_param_comms", base + start - 20.0, 5.0, **{"Process Group Name": "0"},
                       **({"Dst Rank": peer} if peers else {}))
            ev = tb.launch(SENDRECV, host=(base + start - 10.0, 5.0), device=(base + start, dur))
            ev["args"]["External id"] = op["args"]["External id"]
    return tb


# Rank 1 exchanges with rank 2 (ends at 500 µs), then with rank 0 (ends at 900 µs): pairing by order
# would put rank 0's only operation with rank 1's first.
P2P_OPS = {0: [(100.0, 800.0, 1)], 1: [(300.0, 200.0, 2), (700.0, 200.0, 0)], 2: [(200.0, 300.0, 1)]}


@pytest.mark.parametrize("peers, how", [(True, p2p.BY_PEER), (False, p2p.BY_TIME)])
def test_point_to_point_paired_by_peer_or_by_time(tmp_path, peers, how):
    for r, ops in P2P_OPS.items():
        _write(_p2p_rank(r, ops, peers), tmp_path / f"rank{r}.json")
    data = _analyze(tmp_path)
    p = data["collectives"]["point_to_point"]
    assert (p["operations"], p["pairs"], p["matched_by"], p["unmatched"]) == (8, 4, [how], 0)
    # Rank 0 waits 600 µs for rank 1 and rank 2 100 µs for it: charged as 300 and 50 per other rank.
    assert [r["wait_us_per_step"] for r in data["ranks"]] == [600.0, 0.0, 100.0]
    assert [r["caused_wait_us_per_step"] for r in data["ranks"]] == [0.0, 350.0, 0.0]
    assert data["collectives"]["collective_instances"] == 0 and data["collectives"]["instances"] == 4
    assert "8 point-to-point operations: 4 pairs matched by " + how in render_ranks_terminal(data)


def test_point_to_point_ambiguous_in_time_is_unmatched_not_charged(tmp_path):
    """Rank 1's two operations both end at 900 µs, as rank 0's and rank 2's do: without a peer, no
    pairing is certain, so nothing is charged and the time is reported unmatched."""
    ops = {0: [(100.0, 800.0, 1)], 1: [(700.0, 200.0, 2), (700.0, 200.0, 0)], 2: [(600.0, 300.0, 1)]}
    for r, o in ops.items():
        _write(_p2p_rank(r, o, peers=False), tmp_path / f"rank{r}.json")
    data = _analyze(tmp_path)
    p = data["collectives"]["point_to_point"]
    assert (p["pairs"], p["unmatched"], p["ambiguous"]) == (0, 8, 8)
    assert p["unmatched_us_per_step"] == 1500.0  # 800 + 2 x 200 + 300
    assert [r["caused_wait_us_per_step"] for r in data["ranks"]] == [0.0, 0.0, 0.0]
    assert [r["unmatched_p2p_us_per_step"] for r in data["ranks"]] == [800.0, 400.0, 300.0]
    assert "8 unmatched (8 ambiguous in time): 1.50 ms per step not charged to any rank" in render_ranks_terminal(data)


def test_a_peer_with_no_trace_leaves_the_operation_unmatched(tmp_path):
    _write(_p2p_rank(0, [(100.0, 800.0, 1)]), tmp_path / "rank0.json")
    _write(_p2p_rank(1, [(700.0, 200.0, 0), (300.0, 200.0, 2)]), tmp_path / "rank1.json")
    data = _analyze(tmp_path)
    p = data["collectives"]["point_to_point"]
    assert (p["pairs"], p["unmatched"], p["peer_absent"]) == (2, 2, 2)
    assert data["job"]["missing_ranks"] == [2] and data["job"]["verdict"] is None


# --- straggler, or jitter ------------------------------------------------------------------------

def _two_ranks(tmp_path, late_ranks, late=LATE):
    """10 steps; in step k the rank late_ranks[k] arrives late at the all-reduce."""
    for r in (0, 1):
        _write(_rank(r, 2, [late if lr == r else EARLY for lr in late_ranks]), tmp_path / f"rank{r}.json")
    return _analyze(tmp_path)


def test_arrivals_that_alternate_are_jitter_not_a_straggler(tmp_path):
    """Rank 1 is late in 7 of 10 steps and rank 0 in 3, by 400 µs each time: rank 1's lateness per step
    is 160 µs on average with a spread of 386 µs across steps. The rule before issue 26 (it makes the
    other rank wait 28 % of the step and spends 16 % more in the DataLoader) called it a straggler."""
    data = _two_ranks(tmp_path, [1, 1, 0, 1, 1, 0, 1, 1, 0, 1])
    assert data["stragglers"] == [] and data["job"]["verdict"] != "straggler-bound"
    r0, r1 = data["ranks"]
    assert (r0["last_arrivals"], r1["last_arrivals"]) == (3, 7)
    assert r1["caused_wait_us_per_step"] == 280.0 and r1["lateness_us"] == {"per": "step", "mean": 160.0,
                                                                           "sd": 386.437, "units": 10}
    a = data["job"]["arrivals"]
    assert a["no_straggler"] == "alternate" and a["consistent_rank"] is None and a["lost_us_per_step"] == 200.0
    sentence = ("no consistent straggler: arrivals alternate (rank 0 last in 3 of 10, rank 1 in 7 of 10), 200 µs per "
                "step lost to jitter")
    assert sentence in render_ranks_terminal(data) and sentence in render_markdown(data)


def test_a_rank_late_in_every_step_is_the_straggler(tmp_path):
    data = _two_ranks(tmp_path, [1] * 10)
    [s] = data["stragglers"]
    assert (s["rank"], s["cause"], s["last_arrivals"], s["last_of"]) == (1, "dataloader", 10, 10)
    assert s["lateness_us"] == {"mean": 400.0, "sd": 0.0} and data["job"]["verdict"] == "straggler-bound"
    assert data["job"]["arrivals"]["no_straggler"] is None


def test_two_ranks_late_for_different_reasons_give_no_straggler(tmp_path):
    """Rank 0 late in 5 steps because of its kernel, rank 1 in the other 5 because of its DataLoader:
    before issue 26 both were named stragglers of a 2-rank job."""
    for r in (0, 1):
        plan = [(SLOW_KERNEL if r == 0 else EARLY) if k % 2 else (LATE if r == 1 else EARLY) for k in range(10)]
        _write(_rank(r, 2, plan), tmp_path / f"rank{r}.json")
    data = _analyze(tmp_path)
    assert [r["last_arrivals"] for r in data["ranks"]] == [5, 5]
    assert data["stragglers"] == [] and data["job"]["verdict"] != "straggler-bound"
    assert "no consistent straggler: arrivals alternate (rank 0 last in 5 of 10, rank 1 in 5 of 10)" in \
        render_ranks_terminal(data)
