"""issue 18: traces that crashed, hung or misled the loader and the step finder. Each bad input gets
one line naming the file and the problem (exit 2), or a report whose warning says what happened."""

import gzip
import json
import os
import subprocess
import sys

import pytest
from perfsleuth.config import LIMITS
from perfsleuth.errors import TraceError
from perfsleuth.trace import files
from perfsleuth.trace.model import load_trace
from cli_promise import cli, one_line
from privileges import unprivileged
from tracebuilder import TraceBuilder
from perfsleuth.api import analyze_file


def report(path):
    return analyze_file(path).to_dict()


# --- zero-duration traces (IndexError in the step statistics) -----------------------------------
def _zero_single_step(tb):
    tb.step(1, 0, 0)


def _zero_single_event(tb):
    tb.op("aten::mm", 5, 0)


def _zero_all_steps(tb):
    tb.step(1, 10, 0)
    tb.step(2, 10, 0)
    tb.op("aten::mm", 10, 0)


def _zero_optimizer_step(tb):
    tb.annotation("Optimizer.step#SGD.step", 0, 0)


@pytest.mark.parametrize("build", [_zero_single_step, _zero_single_event, _zero_all_steps, _zero_optimizer_step])
def test_a_trace_that_spans_no_time_is_one_line(tmp_path, build):
    tb = TraceBuilder(device=False)
    build(tb)
    path = tb.write(tmp_path / "zero.json")
    one_line(cli("analyze", path), path, "the trace spans no time (every event has zero duration)")


def test_zero_duration_steps_fall_back_to_the_whole_trace(tmp_path):
    tb = TraceBuilder(device=False)
    tb.step(1, 0, 0)
    tb.step(2, 50, 0)
    tb.op("aten::mm", 10, 80)
    rep = report(tb.write(tmp_path / "t.json"))
    assert rep["steps_source"] == "whole-trace"
    assert [(s["start_us"], s["duration_us"]) for s in rep["steps"]] == [(0.0, 90.0)]
    assert "every ProfilerStep annotation (2) has zero duration" in rep["warnings"]


@pytest.mark.parametrize("dur", [0, -5])
def test_an_empty_first_step_is_not_said_to_overlap_a_previous_one(tmp_path, dur):
    tb = TraceBuilder(device=False)
    tb.step(1, 0, dur)
    tb.step(2, 10, 90)
    tb.op("aten::mm", 15, 80)
    rep = report(tb.write(tmp_path / "t.json"))
    assert [(s["name"], s["duration_us"]) for s in rep["steps"]] == [("ProfilerStep#2", 90.0)]
    assert "1 step(s) of zero duration were dropped" in rep["warnings"]
    assert not any("overlapped" in w for w in rep["warnings"])


def test_a_step_covered_by_the_previous_one_still_says_so(tmp_path):
    tb = TraceBuilder(device=False)
    tb.step(1, 0, 100)
    tb.step(2, 10, 50)  # inside step 1
    tb.op("aten::mm", 15, 80)
    rep = report(tb.write(tmp_path / "t.json"))
    assert len(rep["steps"]) == 1
    assert "1 step(s) overlapped the previous step completely and were dropped" in rep["warnings"]


# --- duplicate step names --------------------------------------------------------------------------
def test_the_same_step_name_at_separate_times_keeps_every_window(tmp_path):
    tb = TraceBuilder(device=False)
    for i, t in enumerate((0, 100, 200, 300)):  # two sessions: #1 #2 #1 #2
        tb.step(1 + i % 2, t, 90)
        tb.op("aten::mm", t + 5, 40 + 10 * i)
    rep = report(tb.write(tmp_path / "t.json"))
    assert [(s["name"], s["start_us"]) for s in rep["steps"]] == [
        ("ProfilerStep#1", 0.0), ("ProfilerStep#2", 100.0), ("ProfilerStep#1", 200.0), ("ProfilerStep#2", 300.0)]
    assert [s["time_us"]["kernel"] for s in rep["steps"]] == [40.0, 50.0, 60.0, 70.0]
    assert ("2 ProfilerStep name(s) occur at separate times (e.g. ProfilerStep#1, 2 times): each occurrence "
            "is kept as its own step") in rep["warnings"]


def test_the_same_step_recorded_on_two_threads_is_one_step(tmp_path):
    tb = TraceBuilder(device=False)
    tb.step(1, 0, 100)
    tb._x("user_annotation", "ProfilerStep#1", 2, 90, tid=2)  # the same step, seen on a second thread
    tb.op("aten::mm", 5, 80)
    rep = report(tb.write(tmp_path / "t.json"))
    assert [(s["start_us"], s["duration_us"]) for s in rep["steps"]] == [(0.0, 100.0)]
    assert not any("separate times" in w for w in rep["warnings"])


# --- values of the wrong kind ----------------------------------------------------------------------
def _doc(extra):
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k", host=(1, 2), device=(10, 50))
    doc = tb.build()
    doc["traceEvents"] += extra
    return doc


def test_metadata_with_an_object_for_pid_or_tid_is_ignored(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_doc([
        {"ph": "M", "name": "thread_name", "pid": {"a": 1}, "tid": {"b": 2}, "args": {"name": "x"}},
        {"ph": "M", "name": "thread_name", "pid": 1000, "tid": [1], "args": {"name": "y"}},
        {"ph": "M", "name": "thread_name", "pid": 1000, "tid": 1000, "args": {"name": "main"}}])))
    trace = load_trace(path)
    assert trace.thread_names == {(1000, 1000): "main"}


@pytest.mark.parametrize("lax", [False, True])
def test_a_huge_timestamp_is_called_absurd_not_missing(tmp_path, lax):
    extra = [{"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1, "ts": 1e308, "dur": 1}]
    if lax:  # a string timestamp sends the chunk through the lenient decoder
        extra.append({"ph": "X", "cat": "cpu_op", "name": "y", "pid": 1, "tid": 1, "ts": "soon", "dur": 1})
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_doc(extra)))
    trace = load_trace(path)
    assert ("1 events with absurd timestamps or durations were dropped (e.g. ts 1e+308 µs: more than a "
            "century away from the rest of the trace)") in trace.warnings
    assert trace.warnings.count("1 events without a numeric timestamp were dropped") == int(lax)


def test_one_absurd_early_timestamp_does_not_push_the_others_out(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_doc([{"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1,
                                      "ts": -1e300, "dur": 1}])))
    rep = report(path)
    assert rep["steps_source"] == "ProfilerStep" and rep["steps"][0]["time_us"]["kernel"] == 50.0
    assert rep["trace"]["events"] == 3


@pytest.mark.parametrize("where", ["args", "header"])
def test_deep_nesting_is_one_line(tmp_path, where):
    deep = "[" * 1000 + "]" * 1000
    if where == "args":
        text = '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"x": %s}}]}' % deep
    else:
        text = '{"deviceProperties": %s, "traceEvents": []}' % deep
    path = tmp_path / "deep.json"
    path.write_text(text)
    assert len(text) < 2100
    one_line(cli("analyze", path), path, "JSON nested too deeply")


# --- special files ------------------------------------------------------------------------------------
def _subprocess(*args, timeout=60, prefix=()):
    return subprocess.run([*prefix, sys.executable, "-m", "perfsleuth", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def _one_line_proc(proc, path, problem):
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(path) in proc.stderr and problem in proc.stderr, proc.stderr


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    _one_line_proc(_subprocess("analyze", fifo, timeout=30), fifo, "is a FIFO (named pipe), not a regular file")
    _one_line_proc(_subprocess("diff", fifo, fifo, timeout=30), fifo, "is a FIFO (named pipe), not a regular file")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_devices_and_links_to_them_are_refused(tmp_path, device):
    link = tmp_path / "trace.json.gz"
    link.symlink_to(device)
    for path in (device, link):
        one_line(cli("analyze", path), path, "is a character device, not a regular file")


def test_symlink_loops_and_dangling_links_are_named(tmp_path):
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    (tmp_path / "gone.json").symlink_to(tmp_path / "missing.json")
    one_line(cli("analyze", tmp_path / "a.json"), tmp_path / "a.json", "a symbolic link loop")
    one_line(cli("analyze", tmp_path / "gone.json"), tmp_path / "gone.json", "a symbolic link to a missing file")


def test_a_file_behind_a_folder_without_search_permission(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    TraceBuilder().write(locked / "t.json")
    locked.chmod(0o644)  # listable, not searchable
    try:
        with unprivileged():
            result = cli("analyze", locked / "t.json")
    finally:
        locked.chmod(0o755)
    one_line(result, locked / "t.json", "permission denied")


# --- gzip bombs ------------------------------------------------------------------------------------
def _bomb(path, payload_of, mib):
    with gzip.open(path, "wb", compresslevel=1) as f:
        chunk = payload_of(1 << 20)
        for _ in range(mib):
            f.write(chunk)
    return path


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("payload", ["zeros", "spaces"])
def test_a_gzip_bomb_is_refused_early(tmp_path, payload, jobs):
    fill = (lambda n: b"\0" * n) if payload == "zeros" else (lambda n: b" " * n)
    path = tmp_path / "bomb.json.gz"
    if payload == "zeros":
        _bomb(path, fill, 96)
    else:
        with gzip.open(path, "wb", compresslevel=1) as f:
            f.write(b'{"traceEvents": [')
            for _ in range(96):
                f.write(fill(1 << 20))
            f.write(b"]}")
    assert path.stat().st_size < (1 << 20)
    with pytest.raises(TraceError, match="inflates to more than 100 times its compressed size"):
        load_trace(path, jobs=jobs)


def test_a_document_larger_than_memory_allows_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "memory_bytes", lambda: 8 << 20)  # a machine of 8 MiB: 4 MiB at most
    raw = json.dumps(TraceBuilder().build()).encode() + b" " * (5 << 20)
    path = tmp_path / "big.json.gz"
    path.write_bytes(gzip.compress(raw, 1))
    with pytest.raises(TraceError, match=r"inflates to more than 0\.0 GiB, more than this machine can analyse"):
        load_trace(path)
    assert LIMITS.memory_share == 0.5


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_bomb_memory_stays_small(tmp_path):
    """The process that meets a 1 GiB bomb never holds much more than the ratio bound lets out."""
    path = _bomb(tmp_path / "bomb.json.gz", lambda n: b"\0" * n, 1024)
    # VmHWM: the peak of this program's own memory (ru_maxrss would carry the forking parent's across exec)
    code = ("import sys\nfrom perfsleuth.errors import TraceError\nfrom perfsleuth.trace.model import load_trace\n"
            "try:\n    load_trace(sys.argv[1])\nexcept TraceError as e:\n    print(e.problem)\n"
            "print(int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) // 1024)\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    problem, rss_mib = out.stdout.strip().splitlines()
    assert "inflates to more than 100 times" in problem
    assert int(rss_mib) < 400, rss_mib  # the interpreter, pandas and numpy take ~150 MiB; the bomb ~80


# --- one bad file in a directory ---------------------------------------------------------------------
def _directory(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    good = TraceBuilder()
    good.step(1, 0, 100)
    good.launch("k", host=(1, 2), device=(10, 50))
    good.write(d / "a_good.json")
    good.write(d / "z_good.json.gz")
    zero = TraceBuilder(device=False)
    zero.op("aten::mm", 0, 0)
    zero.write(d / "b_zero.json")
    (d / "c_deep.json").write_text('{"traceEvents": [%s]}' % ("[" * 1200 + "]" * 1200))
    os.mkfifo(d / "d_fifo.json")
    (d / "e_loop.json").symlink_to(d / "e_loop.json")
    return d


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_bad_files_in_a_directory_are_skipped_and_the_good_ones_reported(tmp_path, jobs):
    d = _directory(tmp_path)
    out = tmp_path / "set.json"
    result = cli("analyze", d, "-j", jobs, "--json", out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert [r["trace"]["path"] for r in data["reports"]] == [str(d / "a_good.json"), str(d / "z_good.json.gz")]
    assert {s["path"]: s["problem"] for s in data["skipped"]} == {
        str(d / "b_zero.json"): "the trace spans no time (every event has zero duration)",
        str(d / "c_deep.json"): "JSON nested too deeply (the limit is about 1,000 levels)",
        str(d / "d_fifo.json"): "is a FIFO (named pipe), not a regular file",
        str(d / "e_loop.json"): "a symbolic link loop (too many levels of symbolic links)"}
    assert result.stderr.count("warning: skipped") == 4


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_internal_error_on_one_file_is_that_files_problem(tmp_path, monkeypatch, jobs):
    from perfsleuth import api

    d = _directory(tmp_path)
    real = api.analyze_file

    def flaky(path, config=None, *a):
        if path.name == "a_good.json":
            raise IndexError("index -1 is out of bounds")
        return real(path, config, *a)

    monkeypatch.setattr(api, "analyze_file", flaky)
    result = api.analyze_path(d, jobs=jobs)
    assert [r.trace.path for r in result.reports] == [str(d / "z_good.json.gz")]
    assert dict(result.skipped)[str(d / "a_good.json")] == (
        "internal error (IndexError: index -1 is out of bounds); please report it with the trace")


def test_a_worker_that_dies_costs_only_its_own_file(tmp_path, monkeypatch):
    from perfsleuth import api

    d = _directory(tmp_path)
    real = api.analyze_file

    def killer(path, config=None, *a):
        if path.name == "a_good.json":
            os._exit(9)  # as the OOM killer would
        return real(path, config, *a)

    monkeypatch.setattr(api, "analyze_file", killer)
    result = api.analyze_path(d, jobs=2)
    assert [r.trace.path for r in result.reports] == [str(d / "z_good.json.gz")]
    assert dict(result.skipped)[str(d / "a_good.json")] == "the process analysing it died (out of memory?)"
    assert len(result.skipped) == 5


def test_a_folder_that_cannot_be_listed_is_named(tmp_path):
    d = _directory(tmp_path)
    hidden = d / "sub"
    hidden.mkdir()
    TraceBuilder().write(hidden / "t.json")
    hidden.chmod(0)
    try:
        with unprivileged():
            result = cli("analyze", d, "-j", "1")
    finally:
        hidden.chmod(0o755)
    assert result.exit_code == 0, result.output
    assert f"warning: skipped {hidden}: cannot list this folder: permission denied" in result.stderr


# --- the perfsleuth metadata `run` records, validated (trace/validate.py) -----------------------------
def test_run_metadata_of_the_wrong_shape_is_dropped_with_a_warning(tmp_path):
    doc = _doc([])
    doc["perfsleuth"] = {"version": 1, "host": {"cpu_count": "many"}, "loaders": []}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    trace = load_trace(path)
    assert trace.run_metadata == {}
    assert any(w.startswith("the trace's perfsleuth metadata was ignored: Expected `int | null`, got `str` - at "
                            "`$.host.cpu_count`") for w in trace.warnings), trace.warnings


def test_run_metadata_keeps_keys_a_newer_version_adds(tmp_path):
    doc = _doc([])
    doc["perfsleuth"] = {"version": 1, "host": {"cpu_count": 8}, "loaders": [{"num_workers": 2}], "new": [1]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    assert load_trace(path).run_metadata == doc["perfsleuth"]


def test_step_names_whose_events_were_all_dropped(tmp_path):
    """Found by tests/e2e/test_fuzz.py (tests/helpers/corpus/found/trace-step-event-dropped-*.json): the only
    ProfilerStep event has a timestamp that is not a number, so it is dropped while its name stays a
    category of the name column; the step finder then met an empty selection (ValueError)."""
    doc = _doc([])
    doc["traceEvents"][0]["ts"] = False
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    rep = report(path)
    assert rep["steps_source"] == "whole-trace"
    assert "1 events without a numeric timestamp were dropped" in rep["warnings"]
