"""`perfsleuth run` under torchrun (gloo on the CPU): every rank writes its trace, rank 0 adds the
cross-rank report once all have, and a rank that never writes one cannot make rank 0 wait for ever."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from perfsleuth.record import ranks as run_ranks
from perfsleuth.report.model import Report, ReportSet

ROOT = Path(__file__).resolve().parents[2]
DDP = ROOT / "fixtures" / "scripts" / "cpu" / "ddp.py"
RECORDED = ROOT / "fixtures" / "traces" / "ranks" / "ddp2_straggler"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_job_with_a_slow_rank(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
         "--master-port", str(_free_port()), "-m", "perfsleuth", "run", "--no-stack", "--wait", "1", "--warmup", "1",
         "--active", "4", "-o", str(out), str(DDP), "--slow-rank", "1", "--slow-work", "20000"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == [  # each rank records its own memory window too
        "rank0.memory.pt.trace.json.gz", "rank0.pt.trace.json.gz", "rank1.memory.pt.trace.json.gz",
        "rank1.pt.trace.json.gz", "report.html", "report.json", "summary.md"]
    data = json.loads((out / "report.json").read_text())
    assert data["schema"] == "perfsleuth/report-set@1"
    assert [r["trace"]["rank"] for r in data["reports"]] == [0, 1]
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert data["collectives"]["instances"] > 0 and data["collectives"]["matched_by"] == "name + order"
    [s] = data["stragglers"]
    assert s["rank"] == 1 and s["cause"] == "dataloader" and s["wait_in"] == "allreduce"
    assert data["job"]["verdict"] == "straggler-bound"
    assert "job verdict: STRAGGLER-BOUND" in proc.stdout
    assert "rank 1 spends" in proc.stdout and "more per step in the DataLoader than the median rank" in proc.stdout
    html = (out / "report.html").read_text()
    assert 'class="data heatmap"' in html and "Straggler:" in html
    assert "### Across 2 ranks: **straggler-bound**" in (out / "summary.md").read_text()


def _setup(tmp_path, ranks, old=()):
    folder = tmp_path / "out"
    folder.mkdir()
    for r in ranks:
        shutil.copyfile(RECORDED / f"rank{r}.pt.trace.json.gz", folder / f"rank{r}.pt.trace.json.gz")
    for r in old:  # a trace an earlier launch left in the folder
        p = folder / f"rank{r}.pt.trace.json.gz"
        shutil.copyfile(RECORDED / "rank1.pt.trace.json.gz", p)
        os.utime(p, (1_000_000, 1_000_000))
    return folder


def test_a_rank_that_never_writes_its_trace_is_named_and_left_out(tmp_path):
    folder = _setup(tmp_path, [0, 1])
    env = {"RANK": "0", "WORLD_SIZE": "3"}
    start = time.monotonic()
    result, note = run_ranks.with_other_ranks("own report", folder / "rank0.pt.trace.json.gz", ["w"], wait_s=1.0,
                                              environ=env)
    assert time.monotonic() - start < 10
    assert note == "rank(s) 2 wrote no trace within 1 s: the cross-rank report covers rank(s) 0, 1"
    assert isinstance(result, ReportSet) and len(result.reports) == 2
    assert note in result.to_dict()["job"]["warnings"]
    assert "w" in result.reports[0].to_dict()["warnings"]


def test_a_trace_left_by_an_earlier_launch_does_not_count(tmp_path, monkeypatch):
    folder = _setup(tmp_path, [0], old=[1])
    monkeypatch.setattr(run_ranks, "_launcher_start", lambda: time.time() - 5)
    result, note = run_ranks.with_other_ranks("own report", folder / "rank0.pt.trace.json.gz", wait_s=0.5,
                                              environ={"RANK": "0", "WORLD_SIZE": "2"})
    assert result == "own report" and note.startswith("rank(s) 1 wrote no trace within 0.5 s")


def test_other_ranks_and_single_processes_do_not_wait(tmp_path):
    folder = _setup(tmp_path, [0])
    for env in ({"RANK": "1", "WORLD_SIZE": "2"}, {}, {"RANK": "0", "WORLD_SIZE": "1"}):
        start = time.monotonic()
        assert run_ranks.with_other_ranks("r", folder / "rank0.pt.trace.json.gz", wait_s=30, environ=env) == ("r", None)
        assert time.monotonic() - start < 1


def test_all_ranks_present(tmp_path):
    folder = _setup(tmp_path, [0, 1])
    result, note = run_ranks.with_other_ranks(None, folder / "rank0.pt.trace.json.gz", wait_s=5,
                                              environ={"RANK": "0", "WORLD_SIZE": "2"})
    assert note is None and isinstance(result, ReportSet) and not isinstance(result, Report)
    assert result.to_dict()["job"]["ranks"] == 2
