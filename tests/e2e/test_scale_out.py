"""Reading the ranks of a job elsewhere (docs/ranks.md): a Dask LocalCluster, real `dask scheduler` and
`dask worker` processes on 127.0.0.1 started and stopped here, and traces read through fsspec
(`memory://`). The results must equal the local process pool's, and only small per-rank reports come
back: no event table."""

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import pytest
from click.testing import CliRunner
from perfsleuth.api import analyze_path
from perfsleuth.cli.main import main
from perfsleuth.errors import TraceError, UsageError
from perfsleuth.report.model import Report, ReportSet
from perfsleuth.trace import cluster, sources

RANKS = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "ranks" / "ddp2_straggler"
HOST = "127.0.0.1"  # the only address these tests use
START_TIMEOUT_S = 60


def _cross(result: ReportSet) -> dict:
    d = result.to_dict()
    return {k: d[k] for k in ("ranks", "collectives", "stragglers", "job")}


@pytest.fixture(scope="module")
def local_result():
    return analyze_path(RANKS, jobs=2)


def _only_summaries(result: ReportSet) -> None:
    assert isinstance(result, ReportSet) and len(result.reports) == 2
    for r in result.reports:
        assert isinstance(r, Report)
        assert len(r.trace.events) == 0 and r.breakdown.signals == {}  # no event table came back
        assert r.rank_summary is not None and len(r.rank_summary.collectives) < 100


def test_local_cluster_gives_the_local_result(local_result):
    result = analyze_path(RANKS, jobs=2, scheduler="local")
    _only_summaries(result)
    assert _cross(result) == _cross(local_result)
    assert [r.to_dict() for r in result.reports] == [r.to_dict() for r in local_result.reports]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _start(args: list, log: Path) -> subprocess.Popen:
    fh = open(log, "wb")
    try:
        return subprocess.Popen([sys.executable, "-m", "dask", *args], stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        fh.close()


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: the worker's nanny and its child too
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _wait_for_workers(address: str, n: int) -> None:
    from distributed import Client

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with Client(address, timeout="5s", set_as_default=False) as client:
                client.wait_for_workers(n, timeout=max(1.0, deadline - time.monotonic()))
                return
        except (OSError, TimeoutError):
            if time.monotonic() > deadline:
                raise


def test_real_scheduler_and_workers_on_localhost(tmp_path, local_result):
    port = _free_port()
    address = f"tcp://{HOST}:{port}"
    procs = []
    try:
        procs.append(_start(["scheduler", "--host", HOST, "--port", str(port), "--no-dashboard"],
                            tmp_path / "scheduler.log"))
        for i in range(2):
            procs.append(_start(["worker", address, "--host", HOST, "--nthreads", "1", "--nworkers", "1",
                                 "--no-dashboard", "--name", f"w{i}"], tmp_path / f"worker{i}.log"))
        _wait_for_workers(address, 2)
        out = tmp_path / "report.json"
        res = subprocess.run([sys.executable, "-m", "perfsleuth", "analyze", str(RANKS), "--scheduler", address,
                              "--json", str(out)], capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        assert "job verdict: STRAGGLER-BOUND" in res.stdout
        data = json.loads(out.read_text())
        expected = json.loads(json.dumps(_cross(local_result)))
        assert {k: data[k] for k in expected} == expected
        # And through the library, with the per-rank results checked for what travelled back.
        result = analyze_path(RANKS, scheduler=address)
        _only_summaries(result)
        assert _cross(result) == _cross(local_result)
    finally:
        for p in reversed(procs):
            _stop(p)
    assert all(p.poll() is not None for p in procs)


def test_unreachable_scheduler_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 2)
    result = CliRunner().invoke(main, ["analyze", str(RANKS), "--scheduler", f"tcp://{HOST}:{_free_port()}"])
    assert result.exit_code == 2
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:" in result.output


@pytest.mark.parametrize("bad", ["tcp://nohost", "http://x:1", "lokal"])
def test_bad_scheduler_values_are_usage_errors(bad):
    with pytest.raises(UsageError, match="--scheduler"):
        cluster.check_scheduler(bad)
    result = CliRunner().invoke(main, ["analyze", str(RANKS), "--scheduler", bad])
    assert result.exit_code == 2 and "--scheduler" in result.output


@pytest.fixture()
def memory_ranks():
    fs = fsspec.filesystem("memory")
    root = f"/ranks-{os.getpid()}-{time.monotonic_ns()}"
    for p in sorted(RANKS.iterdir()):
        fs.pipe(f"{root}/{p.name}", p.read_bytes())
    fs.pipe(f"{root}/notes.txt", b"not a trace")
    yield f"memory://{root}"
    fs.rm(root, recursive=True)


def test_memory_filesystem_directory_gives_the_local_result(memory_ranks, local_result):
    result = analyze_path(memory_ranks, jobs=1)
    _only_summaries(result)
    assert _cross(result) == {**_cross(local_result),
                              "ranks": [{**r, "path": f"{memory_ranks}/{Path(r['path']).name}"}
                                        for r in _cross(local_result)["ranks"]]}
    assert result.reports[0].trace.path == f"{memory_ranks}/rank0.pt.trace.json.gz"


def test_memory_filesystem_file_and_plain_json(memory_ranks, local_result):
    fs = fsspec.filesystem("memory")
    path = memory_ranks.split("://", 1)[1]
    fs.pipe(f"{path}/plain/rank1.json", gzip.decompress(fs.cat(f"{path}/rank1.pt.trace.json.gz")))
    one = analyze_path(f"{memory_ranks}/plain/rank1.json")
    assert isinstance(one, Report) and one.to_dict()["verdict"] == local_result.reports[1].to_dict()["verdict"]
    assert one.to_dict()["steps"] == local_result.reports[1].to_dict()["steps"]


def test_cli_reads_a_url(memory_ranks, tmp_path):
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["analyze", memory_ranks, "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["job"]["verdict"] == "straggler-bound"


def test_missing_url_and_missing_filesystem_are_one_line(memory_ranks, monkeypatch):
    with pytest.raises(TraceError, match="no such file or directory"):
        analyze_path(f"{memory_ranks}/nope.json.gz")

    def no_s3(url):
        raise ImportError("Install s3fs to access S3")

    monkeypatch.setattr("fsspec.core.url_to_fs", no_s3)
    with pytest.raises(TraceError, match=r"cannot read s3:// paths: Install s3fs to access S3 \(pip install 'perfsleuth\[s3\]'\)"):
        sources.read_url("s3://bucket/rank0.json.gz")


def test_file_urls_take_the_local_path(monkeypatch):
    """file:// is a local path: read with the mmap/pread fast path, never through fsspec."""
    monkeypatch.setattr(sources, "read_url", lambda url: pytest.fail("fsspec used for a local file"))
    result = analyze_path(f"file://{RANKS}", jobs=1)
    assert isinstance(result, ReportSet) and len(result.reports) == 2
