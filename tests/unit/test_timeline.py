"""The report's `timeline` (report/timeline.py) and each top kernel's launching op and source line
(report/launches.py): exact numbers on hand-built traces."""

from perfsleuth.api import analyze_file
from perfsleuth.config import TIMELINE_MAX_EVENTS
from tracebuilder import DEVICE_PID, HOST_PID, HOST_TID, STREAM, TraceBuilder
from tracebuilder_rules import RuleTraceBuilder


def report_of(tb, tmp_path) -> dict:
    return analyze_file(tb.write(tmp_path / "t.json.gz")).to_dict()


def three_steps() -> TraceBuilder:
    """Steps of 100, 300 and 200 µs: the median is ProfilerStep#3 (200 µs), starting at 400 µs."""
    tb = TraceBuilder()
    for n, (ts, dur) in enumerate([(0, 100), (100, 300), (400, 200)], 1):
        tb.step(n, ts, dur)
        tb.op("aten::mm", ts + 2, 20)
        tb.launch("sgemm_kernel", host=(ts + 5, 3), device=(ts + 10, 50))
    tb.op("aten::linear", 400 + 30, 60)
    tb.op("aten::addmm", 400 + 40, 30)  # inside aten::linear: one level deeper
    tb.runtime("cudaDeviceSynchronize", 400 + 100, 50)
    tb.copy("Memcpy HtoD (Pageable -> Device)", host=(400 + 160, 10), device=(400 + 165, 20))
    tb.dataloader(400 + 180, 15)
    return tb


def test_median_step_lanes_and_events(tmp_path):
    report = report_of(three_steps(), tmp_path)
    tl = report["timeline"]
    assert tl["step"] == "ProfilerStep#3" and report["steps"][tl["step_row"]]["name"] == tl["step"]
    assert (tl["start_us"], tl["duration_us"], tl["steady_steps"]) == (400.0, 200.0, 3)
    assert tl["lanes"] == [
        {
            "name": f"thread {HOST_TID} · pid {HOST_PID}",
            "kind": "host",
            "pid": HOST_PID,
            "tid": HOST_TID,
            "depth": 2,
        },
        {
            "name": f"device {DEVICE_PID} · stream {STREAM}",
            "kind": "device",
            "pid": DEVICE_PID,
            "tid": STREAM,
            "depth": 1,
        },
    ]
    got = [
        (e["lane"], e["depth"], e["start_us"], e["dur_us"], e["name"], e["category"])
        for e in tl["events"]
    ]
    assert got == [
        (0, 0, 2.0, 20.0, "aten::mm", "host"),
        (0, 1, 5.0, 3.0, "cudaLaunchKernel", "host"),
        (0, 0, 30.0, 60.0, "aten::linear", "host"),
        (0, 1, 40.0, 30.0, "aten::addmm", "host"),
        (0, 0, 100.0, 50.0, "cudaDeviceSynchronize", "sync"),
        (0, 0, 160.0, 10.0, "cudaMemcpyAsync", "transfer"),
        (
            0,
            0,
            180.0,
            15.0,
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "dataloader",
        ),
        (1, 0, 10.0, 50.0, "sgemm_kernel", "kernel"),
        (1, 0, 165.0, 20.0, "Memcpy HtoD (Pageable -> Device)", "transfer"),
    ]
    assert tl["events_in_step"] == 9 and tl["merged_blocks"] == 0
    assert tl["dropped"] == {"events": 0, "us": 0.0}
    assert tl["merge_under_us"] == 0.2  # 200 µs / 1000


def test_tiny_events_merge_per_lane_and_category(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 2000)  # merge threshold: 2 µs
    for i in range(10):  # ten 0.5 µs ops 0.7 µs apart: one block
        tb.op("aten::view", 100 + i * 0.7, 0.5)
    tb.op("aten::view", 500, 0.5)  # alone, 400 µs later: a block of one keeps its name
    tb.op("aten::mm", 600, 100)
    tl = report_of(tb, tmp_path)["timeline"]
    got = [(e["start_us"], e["dur_us"], e["name"], e["count"]) for e in tl["events"]]
    assert got == [
        (100.0, 6.8, "10 events under 2.0 µs each, merged", 10),
        (500.0, 0.5, "aten::view", 1),
        (600.0, 100.0, "aten::mm", 1),
    ]
    assert tl["events_in_step"] == 12 and tl["merged_blocks"] == 1
    assert "events under 2.0 µs merged into 1 block per lane" in tl["note"]


def test_cap_keeps_the_longest_and_says_what_it_left_out(tmp_path):
    assert TIMELINE_MAX_EVENTS == 800
    tb = TraceBuilder(device=False)
    n = TIMELINE_MAX_EVENTS + 5  # 805
    tb.step(1, 0, 2.4 * n + 10)  # threshold 1942 / 1000 = 1.942 µs: no op is that short
    for i in range(n):
        tb.op(f"op{i}", 2.4 * i, 2.3 if i % 7 == 0 else 2)
    tl = report_of(tb, tmp_path)["timeline"]
    assert len(tl["events"]) == TIMELINE_MAX_EVENTS
    # the 2 µs ops are cut last-first: op800..op804 (op798 is a 2.3 µs one)
    assert tl["dropped"] == {"events": 5, "us": 10.0}
    assert [e["name"] for e in tl["events"][-2:]] == ["op798", "op799"]
    assert tl["merged_blocks"] == 0
    assert "5 events (their durations total 10 µs) left out" in tl["note"]


def test_hostile_names_are_data(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.op('<img src=x onerror=alert(1)>"&', 2, 20)
    tl = report_of(tb, tmp_path)["timeline"]
    assert (
        tl["events"][0]["name"] == '<img src=x onerror=alert(1)>"&'
    )  # the JSON keeps it; renderers escape


def test_kernel_launching_op_and_source_line(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 400)
    root = tb.py("train.py(10): <module>", 0, 400)
    fwd = tb.py("model.py(42): forward", 5, 300, parent=root)
    tb.py("torch/nn/modules/linear.py(125): forward", 6, 200, parent=fwd)
    tb.typed_launch("aten::mm", ["float"], "sgemm_kernel", host=(10, 20), device=(40, 100))
    tb.typed_launch("aten::addmm", ["float"], "sgemm_kernel", host=(50, 20), device=(150, 30))
    tb.launch(
        "orphan_kernel", host=(350, 3), device=(360, 10)
    )  # outside every op and frame but the root
    rows = {k["name"]: k for k in report_of(tb, tmp_path)["top_kernels"]}
    assert rows["sgemm_kernel"]["op"] == "aten::mm"  # 100 of its 130 µs
    assert rows["sgemm_kernel"]["op_share"] == round(100 / 130, 4)
    assert rows["sgemm_kernel"]["source"] == {
        "file": "model.py",
        "line": 42,
        "function": "forward",
        "line_kind": "function",
    }
    assert rows["orphan_kernel"]["op"] is None and rows["orphan_kernel"]["op_share"] is None
    assert rows["orphan_kernel"]["source"] == {
        "file": "train.py",
        "line": 10,
        "function": "<module>",
        "line_kind": "function",
    }


def test_no_stacks_no_source(tmp_path):
    rows = {k["name"]: k for k in report_of(three_steps(), tmp_path)["top_kernels"]}
    row = rows["sgemm_kernel"]
    assert row["op"] == "aten::mm" and row["op_share"] == 1.0 and row["source"] is None
    copy = rows["Memcpy HtoD (Pageable -> Device)"]  # its call runs outside every op
    assert copy["op"] is None and copy["source"] is None


def test_a_warmup_step_is_never_the_one_shown(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 5000)  # far longer than the steps after it: warm-up
    tb.op("aten::mm", 10, 4000)
    for n, (ts, dur) in enumerate([(5000, 100), (5100, 300), (5400, 200), (5600, 150)], 2):
        tb.step(n, ts, dur)
        tb.op("aten::mm", ts + 2, 20)
    report = report_of(tb, tmp_path)
    assert [s["phase"] for s in report["steps"]] == [
        "warmup",
        "steady",
        "steady",
        "steady",
        "steady",
    ]
    tl = report["timeline"]
    # steady durations 100, 300, 200, 150: the lower median is 150 µs, ProfilerStep#5
    assert (tl["step"], tl["step_row"], tl["duration_us"], tl["steady_steps"]) == (
        "ProfilerStep#5",
        4,
        150.0,
        4,
    )


def test_rows_of_is_unique_rows_with_the_inverse():
    import numpy as np
    from perfsleuth.report.timeline import rows_of

    a, b = np.array([1, 0, 1, 0, 1]), np.array([5, 7, 5, -2, 3])
    keys, ids = rows_of([a, b])
    assert keys.tolist() == [[0, -2], [0, 7], [1, 3], [1, 5]]
    assert ids.tolist() == [3, 1, 3, 0, 2]


def test_kernel_lines_from_the_stacks_window_when_it_was_loaded(tmp_path):
    from perfsleuth.facts.stacks import Companion
    from perfsleuth.report.launches import sources_from
    from tracebuilder_rules import run_metadata

    main = RuleTraceBuilder()
    main.run_metadata = {**run_metadata(), "stacks_trace": "run.stacks.pt.trace.json.gz"}
    main.step(1, 0, 400)
    main.typed_launch("aten::mm", ["float"], "sgemm_kernel", host=(10, 20), device=(40, 100))
    stacks = RuleTraceBuilder()
    stacks.step(7, 0, 400)
    root = stacks.py("train.py(10): <module>", 0, 400)
    stacks.py("model.py(42): forward", 5, 300, parent=root)
    stacks.typed_launch("aten::mm", ["float"], "sgemm_kernel", host=(10, 20), device=(40, 100))
    stacks.write(tmp_path / "run.stacks.pt.trace.json.gz")
    report = analyze_file(main.write(tmp_path / "run.pt.trace.json.gz"))
    (row,) = [k for k in report.top_kernels if k["name"] == "sgemm_kernel"]
    assert row["source"] is None  # the main trace has no stacks
    companion = Companion(report.trace, 1 << 30)
    sources_from(report, companion)  # not loaded: the kernels never load it themselves
    assert not companion.loaded and all(k["source"] is None for k in report.top_kernels)
    assert companion.facts() is not None and companion.loaded  # as api does for a finding's lines
    sources_from(report, companion)
    (row,) = [k for k in report.top_kernels if k["name"] == "sgemm_kernel"]
    assert row["op"] == "aten::mm"
    assert row["source"] == {"file": "model.py", "line": 42, "function": "forward",
                             "line_kind": "function", "window": "stacks"}


def test_without_report_files_the_links_are_left_out_and_the_terminal_is_the_same(tmp_path):
    """`analyze` without report files (Config.report_links off: cli/main.py) skips the top kernels'
    ops and lines and the timeline, which only report.json, the HTML and the Markdown show."""
    from perfsleuth.config import Config
    from perfsleuth.render.terminal import render_terminal

    path = three_steps().write(tmp_path / "t.json.gz")
    full, bare = analyze_file(path).to_dict(), analyze_file(path, Config(report_links=False)).to_dict()
    assert "timeline" in full and full["top_kernels"][0]["op"] == "aten::mm"
    assert "timeline" not in bare
    assert all(set(r) == set(full["top_kernels"][0]) - {"op", "op_share", "source"} for r in bare["top_kernels"])
    assert [r["name"] for r in bare["top_kernels"]] == [r["name"] for r in full["top_kernels"]]
    assert render_terminal(bare) == render_terminal(full)
