"""Measuring without distorting (docs/run.md#measurement): the step clock, the report's `measurement`, the
distortion flag in every renderer, `diff` on unprofiled step times, and the stacks companion."""

import gzip
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from perfsleuth.analysis.measurement import measure
from perfsleuth.analysis.steps import Steps
from perfsleuth.api import analyze_file, analyze_path
from perfsleuth.cli.diff import diff_reports
from perfsleuth.record.step_clock import ACTIVE, AFTER, REST, STACKS, WAIT, WARMUP, QueuedClock, StepClock
from perfsleuth.render.html import render_html
from perfsleuth.render.markdown import render_markdown
from perfsleuth.render.terminal import render_terminal
from perfsleuth.trace.companion import companion_name, is_perfsleuth_report, main_of, without_companions
from perfsleuth.trace.model import find_trace_files
from clock_traces import clocked_trace, two_steps
from tracebuilder_rules import DTOH, RuleTraceBuilder, analyze

import pandas as pd


class FakeClock:
    def __init__(self, times):
        self.times = iter(times)

    def __call__(self):
        return next(self.times)


def test_step_clock_times_between_hooks_and_labels_phases():
    # boundary hooks enter/leave at these seconds: perfsleuth's own work inside a hook is in no step; the CPU
    # clock (process time), the run-queue clock and the stepping thread's CPU clock are read beside the wall clock
    # at the same points
    clock = StepClock(FakeClock([1.0, 1.5, 1.52, 1.9, 1.91, 2.4, 2.41, 3.0, 3.01, 3.2, 3.3]),
                      FakeClock([0.0, 0.4, 0.41, 0.8, 0.8, 1.2, 1.2, 1.3, 1.3, 1.5, 1.6]),
                      FakeClock([0.0, 0.0, 0.0, 0.0, 0.0, 0.01, 0.01, 0.4, 0.4, 0.4, 0.4]),
                      FakeClock([0.0, 0.3, 0.3, 0.6, 0.6, 0.9, 0.9, 0.95, 0.95, 1.0, 1.0]))
    clock.enter()  # the first boundary: the start-up before it is not timed
    clock.leave(1, WAIT)  # 1.0
    clock.enter()  # 1.5: step 1 took 0.5 s, 0.4 s of CPU
    clock.leave(2, WARMUP)  # 1.52
    clock.enter()  # 1.9
    clock.leave(3, ACTIVE)  # 1.91
    clock.enter()  # 2.4
    clock.leave(4, AFTER)  # 2.41: unprofiled, after the recorded window
    clock.enter()  # 3.0: 0.1 s of CPU in 0.59 s, 0.39 s of it waiting for a core
    clock.leave(5, STACKS)  # 3.01
    clock.enter()  # 3.2
    clock.leave(6, REST)  # not timed: after the windows, the list stops growing
    clock.enter()
    assert clock.intervals == [(1, WAIT, 500000.0, 400000.0, 0.0, 300000.0),
                               (2, WARMUP, 380000.0, 390000.0, 0.0, 300000.0),
                               (3, ACTIVE, 490000.0, 400000.0, 10000.0, 300000.0),
                               (4, AFTER, 590000.0, 100000.0, 390000.0, 50000.0),
                               (5, STACKS, 190000.0, 200000.0, 0.0, 50000.0)]
    assert clock.metadata() == {"unit": "us", "unprofiled_us": [500000.0], "unprofiled_cpu_us": [400000.0],
                                "unprofiled_thread_us": [300000.0], "unprofiled_queued_us": [0.0],
                                "after_us": [590000.0], "after_cpu_us": [100000.0], "after_thread_us": [50000.0],
                                "after_queued_us": [390000.0], "profiled_us": [490000.0],
                                "profiled_cpu_us": [400000.0], "profiled_thread_us": [300000.0],
                                "profiled_queued_us": [10000.0],
                                "profiled_steps": ["ProfilerStep#3"], "warmup_us": [380000.0],
                                "stacks_us": [190000.0], "memory_us": []}
    # where the run queue cannot be read (not Linux), its keys are left out
    off = StepClock(FakeClock([1.0, 1.5]), FakeClock([0.0, 0.4]), lambda: None, FakeClock([0.0, 0.2]))
    off.leave(1, WAIT)
    off.enter()
    assert off.intervals == [(1, WAIT, 500000.0, 400000.0, None, 200000.0)]
    assert "unprofiled_queued_us" not in off.metadata()


def test_the_run_queue_clock_reads_schedstat_or_says_nothing(tmp_path):
    (tmp_path / "schedstat").write_text("93159 3684398000 1\n")
    assert QueuedClock(str(tmp_path / "schedstat"))() == 3.684398
    gone = QueuedClock(str(tmp_path / "missing"))
    assert gone() is None and gone.ok is False and gone() is None


def steps_named(*names, phases=None) -> Steps:
    return Steps(pd.DataFrame({"name": list(names), "phase": phases or ["steady"] * len(names)}), "ProfilerStep")


def test_measure_summarises_and_flags_distortion():
    clock = {"unprofiled_us": [90000.0, 20000.0, 22000.0, 21000.0, 19000.0],  # the first is warm-up
             "profiled_us": [40000.0, 30000.0, 31000.0], "profiled_steps": ["ProfilerStep#7", "ProfilerStep#8",
                                                                            "ProfilerStep#9"]}
    steps = steps_named("ProfilerStep#7", "ProfilerStep#8", "ProfilerStep#9", phases=["warmup", "steady", "steady"])
    m = measure({"clock": clock}, steps)  # a trace of an older perfsleuth: no CPU times, no steps after the window
    assert m["unprofiled_step_us"] == {"median": 20500.0, "mad": 1000.0, "p90": 21700.0, "n": 4,
                                       "values": [20000.0, 22000.0, 21000.0, 19000.0]}
    assert m["before"] == m["unprofiled_step_us"] and m["after"] is None
    assert m["cpu_us"] == {"unprofiled": None, "profiled": None}
    assert m["unprofiled_warmup_steps"] == 1
    assert m["profiled_step_us"] == {"median": 30500.0, "mad": 500.0, "p90": 30900.0, "n": 2,
                                     "values": [30000.0, 31000.0]}
    # 1.49x, and 10 ms above the unprofiled median: beyond 3 robust sigmas (3 x 1.4826 x 1000 µs = 4.45 ms)
    assert m["overhead"] == round(30500 / 20500, 3) and m["distorted"] is True and m["busy"] is False
    assert m["note"].startswith("profiling slowed the steps 1.49x, beyond their noise (median 30.50 ms profiled, "
                                "20.50 ms ± 4.45 ms without the profiler)")
    assert "--no-shapes" not in m["note"]
    close = measure({"clock": dict(clock, profiled_us=[40000.0, 24000.0, 25000.0])}, steps)
    assert close["overhead"] == round(24500 / 20500, 3) and close["distorted"] is False and "note" not in close


def test_measure_is_none_for_other_traces_and_survives_bad_metadata():
    steps = steps_named("ProfilerStep#1")
    assert measure({}, steps) is None and measure({"clock": [1, 2]}, steps) is None
    assert measure({"role": "stacks", "clock": {"unprofiled_us": [1.0]}}, steps) is None
    m = measure({"clock": {"unprofiled_us": ["x", None, -1, float("nan"), True], "profiled_us": "oops"}}, steps)
    assert m["unprofiled_step_us"] is None and m["profiled_step_us"] is None and m["overhead"] is None
    assert m["note"].startswith("no unprofiled step was timed")


def test_a_distorted_run_says_so_in_every_report(tmp_path):
    path = clocked_trace(two_steps(), tmp_path / "t.json", [100.0, 100.0, 100.0], [200.0, 200.0],
                         ["ProfilerStep#7", "ProfilerStep#8"])
    d = analyze_file(path).to_dict()
    m = d["measurement"]
    assert (m["overhead"], m["distorted"]) == (2.0, True)
    assert m["note"] in d["warnings"]
    term = render_terminal(d)
    assert ("measured step time: 100 µs without the profiler (median of 3), 200 µs profiled: overhead 2.00×"
            in term)
    assert "PROFILER DISTORTION: profiling slowed the steps 2.00x" in term
    md = render_markdown(d)
    assert "> ⚠️ **PROFILER DISTORTION: profiling slowed the steps 2.00x" in md
    page = render_html(d)
    assert 'id="distorted"' in page and 'id="unprofiled-step">100 µs<' in page
    ok = clocked_trace(two_steps(), tmp_path / "ok.json", [190.0, 200.0, 210.0], [200.0, 200.0],
                       ["ProfilerStep#7", "ProfilerStep#8"])
    d = analyze_file(ok).to_dict()
    assert d["measurement"]["distorted"] is False and "DISTORTION" not in render_terminal(d)
    plain = two_steps().write(tmp_path / "plain.json")  # not recorded by perfsleuth: measurement null
    assert analyze_file(plain).to_dict()["measurement"] is None and "measured" not in render_terminal(
        analyze_file(plain).to_dict())


def report_with(unprofiled, profiled) -> dict:
    steps = [{"name": f"s{i}", "duration_us": d, "phase": "steady",
              "time_us": {"kernel": d, "dataloader": 0.0, "sync": 0.0, "transfer": 0.0, "host": 0.0,
                          "communication": 0.0, "other": 0.0}} for i, d in enumerate(profiled)]
    rep = {"schema": "perfsleuth/report@1", "verdict": "kernel-bound", "steps": steps}
    if unprofiled is not None:
        rep["measurement"] = {"unprofiled_step_us": {"values": unprofiled}}
    return rep


def test_diff_compares_unprofiled_step_times_when_both_sides_have_them():
    # profiled: +50 % (the profiler slowed the head's steps); without the profiler: unchanged
    base = report_with([1000.0, 1010.0, 990.0, 1000.0], [1500.0, 1500.0, 1500.0])
    head = report_with([1000.0, 1005.0, 995.0, 1002.0], [2250.0, 2250.0, 2250.0])
    d = diff_reports(base, head)
    st = d["step_time"]
    assert st["basis"] == "unprofiled" and (st["base"]["median"], st["head"]["median"]) == (1000.0, 1001.0)
    assert st["call"] == "within noise"
    assert d["step_time_profiled"]["call"] == "regression" and d["step_time_profiled"]["change"] == 0.5
    one = diff_reports(report_with(None, [1500.0] * 3), head)
    assert one["step_time"]["basis"] == "profiled" and "step_time_profiled" not in one
    assert any("only one side has step times measured without the profiler" in w for w in one["warnings"])


def test_companion_names_and_directory_listing(tmp_path):
    assert companion_name("trace.pt.trace.json.gz") == "trace.stacks.pt.trace.json.gz"
    assert companion_name("rank3.pt.trace.json.gz") == "rank3.stacks.pt.trace.json.gz"
    assert companion_name("run.json") == "run.stacks.pt.trace.json.gz"
    assert main_of(tmp_path / "rank3.stacks.pt.trace.json.gz") == tmp_path / "rank3.pt.trace.json.gz"
    for name in ("rank0.pt.trace.json.gz", "rank0.stacks.pt.trace.json.gz", "lone.stacks.pt.trace.json.gz"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "report.json").write_text('{\n  "schema": "perfsleuth/report@1",\n  "tool": {}}')
    (tmp_path / "mine.json").write_text('{"traceEvents": []}')
    assert is_perfsleuth_report(tmp_path / "report.json") and not is_perfsleuth_report(tmp_path / "mine.json")
    names = [p.name for p in find_trace_files(tmp_path)]
    # a companion without its main trace stays: it is a trace like any other
    assert names == ["lone.stacks.pt.trace.json.gz", "mine.json", "rank0.pt.trace.json.gz"]
    assert without_companions([tmp_path / "a.stacks.pt.trace.json"]) == [tmp_path / "a.stacks.pt.trace.json"]


def waited_item(tb: RuleTraceBuilder, t0: float) -> None:
    tb.launch("k1", host=(t0, 5), device=(t0 + 10, 300))
    tb.op("aten::item", t0 + 100, 220)
    tb.op("aten::_local_scalar_dense", t0 + 101, 218)
    tb.copy(DTOH, host=(t0 + 102, 216), device=(t0 + 311, 1), nbytes=4)
    tb.launch("k2", host=(t0 + 500, 5), device=(t0 + 510, 400))


def test_findings_take_their_source_lines_from_the_stacks_companion(tmp_path):
    main = RuleTraceBuilder()
    main.step(7, 0, 1000)
    waited_item(main, 0)
    doc = main.build()
    doc["perfsleuth"] = {"version": 1, "stacks_trace": "trace.stacks.pt.trace.json.gz"}
    (tmp_path / "trace.pt.trace.json.gz").write_text(json.dumps(doc))
    stacks = RuleTraceBuilder()
    stacks.step(1, 0, 1000)
    waited_item(stacks, 0)
    frame = stacks.py("train.py(57): train_step", 90, 300)
    stacks.py("<built-in method item of Tensor object at 0x7f>", 99, 222, parent=frame)
    stacks.write(tmp_path / "trace.stacks.pt.trace.json.gz")
    report, facts = analyze(main, tmp_path, name="plain.json.gz")  # the same trace without a companion
    item = next(f for f in report["findings"] if f["rule"] == "item-sync")
    assert item["locations"] == [] and facts["has_stacks"] is False
    joined = analyze_path(tmp_path / "trace.pt.trace.json.gz").to_dict()
    item = next(f for f in joined["findings"] if f["rule"] == "item-sync")
    assert item["locations"] == [{"file": "train.py", "line": 57, "function": "train_step", "count": 1,
                                  "line_kind": "function"}]
    assert "with_stack=True" not in item["message"]
    assert joined["trace"]["has_stacks"] is False  # the analysed trace itself has none
    assert joined["trace"]["stacks_trace"] == str(tmp_path / "trace.stacks.pt.trace.json.gz")
    (tmp_path / "plain.json.gz").unlink()
    folder = analyze_path(tmp_path).to_dict()  # the run's folder: one report, the companion joined
    assert folder["schema"] == "perfsleuth/report@1" and folder["findings"] == joined["findings"]


@pytest.mark.parametrize("missing", [True, False])
def test_a_missing_or_foreign_companion_is_no_error(tmp_path, missing):
    main = RuleTraceBuilder()
    main.step(7, 0, 1000)
    waited_item(main, 0)
    doc = main.build()
    doc["perfsleuth"] = {"version": 1, "stacks_trace": "../../etc/passwd" if not missing else "gone.json.gz"}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    d = analyze_file(tmp_path / "t.json").to_dict()
    assert d["trace"]["stacks_trace"] is None
    assert next(f for f in d["findings"] if f["rule"] == "item-sync")["locations"] == []


SCRIPTS = Path(__file__).resolve().parents[2] / "fixtures" / "scripts" / "cpu"


def test_default_run_times_steps_without_the_profiler_and_records_stacks_apart(tmp_path):
    """The default schedule for real: 5 steps timed without the profiler, warm-up 2, 5 recorded without
    Python stacks, 4 more timed without the profiler, then 2 with stacks in the companion; analyze and diff of
    the folder."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "perfsleuth", "run", "-o", str(out), str(SCRIPTS / "python_dataset.py"),
                           "--steps", "30"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    # 5 + 2 + 5 + 4, the memory window's 3, a step in which no profiler starts, the stacks window's 2
    assert "perfsleuth: stopped the script after step 22 (profiled 5)" in proc.stderr
    assert f"wrote {out / 'trace.stacks.pt.trace.json.gz'} (Python stacks, for source lines)" in proc.stdout
    assert f"wrote {out / 'trace.memory.pt.trace.json.gz'} (memory: allocations over 3 steps)" in proc.stdout
    assert not (out / "trace.pt.trace.json").exists()  # the JSON exported at the window's end, gzipped since
    with gzip.open(out / "trace.pt.trace.json.gz", "rt") as f:
        doc = json.load(f)
    meta = doc["perfsleuth"]
    assert meta["schedule"] == {"wait": 5, "warmup": 2, "active": 5, "after": 4, "with_stack": False,
                                "record_shapes": False, "stack_steps": 2, "stack_shapes": True, "memory_steps": 3}
    assert meta["stacks_trace"] == "trace.stacks.pt.trace.json.gz"
    assert meta["clock"]["after_us"] == []  # recorded at the window's end; the steps after it came later ...
    clock = doc["perfsleuth_final"]["clock"]  # ... and went in when the file was finished
    # the rest is what the window recorded (the memory window came after the `after` steps too)
    assert clock | {"after_us": [], "after_cpu_us": [], "after_queued_us": [], "after_thread_us": [],
                     "memory_us": []} == meta["clock"]
    assert len(clock["memory_us"]) == 3
    assert len(clock["unprofiled_us"]) == 4 and len(clock["warmup_us"]) == 2  # the first step is the start-up
    assert len(clock["after_us"]) == len(clock["after_cpu_us"]) == len(clock["after_queued_us"]) == 4  # Linux
    assert len(clock["unprofiled_cpu_us"]) == 4 and len(clock["profiled_cpu_us"]) == 5
    assert clock["profiled_steps"] == [f"ProfilerStep#{j}" for j in range(7, 12)]
    assert not any(e.get("cat") == "python_function" or "Input type" in (e.get("args") or {})
                   for e in doc["traceEvents"])
    with gzip.open(out / "trace.stacks.pt.trace.json.gz", "rt") as f:
        stacks = json.load(f)
    assert stacks["perfsleuth"]["role"] == "stacks" and len(stacks["perfsleuth"]["clock"]["stacks_us"]) == 2
    assert stacks["perfsleuth"]["clock"]["after_us"] == clock["after_us"]
    assert any(e.get("cat") == "python_function" for e in stacks["traceEvents"])
    assert any("Input type" in (e.get("args") or {}) for e in stacks["traceEvents"])
    rep = json.loads((out / "report.json").read_text())
    m = rep["measurement"]
    un, pr = m["unprofiled_step_us"], m["profiled_step_us"]
    before, after = m["before"], m["after"]
    assert un["n"] + m["unprofiled_warmup_steps"] == 8 and un["n"] == before["n"] + after["n"] and before["n"] >= 2
    assert un["values"] == before["values"] + after["values"] and after["values"] == clock["after_us"][4 - after["n"]:]
    assert m["cpu_us"]["unprofiled"]["n"] == un["n"] and m["cpu_us"]["profiled"]["n"] == pr["n"]
    assert pr["n"] == rep["summary"]["steps"]["steady"] and pr["values"] == [
        v for v, s in zip(clock["profiled_us"], rep["steps"]) if s["phase"] == "steady"]
    assert m["overhead"] == round(pr["median"] / un["median"], 3)
    assert isinstance(m["busy"], bool) and m["others_cores"] is not None  # Linux: /proc/stat was read
    assert "measured step time:" in proc.stdout
    again = analyze_path(out).to_dict()  # the run's folder: its one report, measurement from the trace
    assert again["measurement"] == m and again["verdict"] == rep["verdict"]
    d = diff_reports(again, rep)
    assert d["step_time"]["basis"] == "unprofiled" and d["step_time"]["change_us"] == 0.0


ANNOTATED = """
import sys, torch, perfsleuth
sys.path.insert(0, {scripts!r})
import toy
torch.manual_seed(0)
model = toy.mlp(16, 16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(8, 16), torch.randint(0, 10, (8,))
prof = perfsleuth.profile({out!r}, wait=1, warmup=1, active=2, after={after}, memory_steps={memory},
                          stop_after_window=False)
with prof:
    for epoch in range(24 // {per_epoch}):
        with torch.profiler.record_function("epoch"):  # {per_epoch} steps: spans the end of the main window
            for i in range({per_epoch}):
                opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()
import gc; gc.collect()
print([(j, phase) for j, phase, *_ in prof._session.step_clock.intervals])
"""


def first_clear(boundary: int, per_epoch: int, begun: range) -> int:
    """The first boundary from `boundary` on where no "epoch" block begun in the iterations `begun` is open: at
    boundary b (inside iteration b - 1's optimizer step) the open block is the epoch of iteration b - 1."""
    while (boundary - 1) // per_epoch * per_epoch in begun:
        boundary += 1
    return boundary


WINDOW_CASES = [(6, 0, 0, 7), (1, 0, 0, 5), (4, 0, 0, 5), (12, 4, 0, 13), (1, 4, 0, 8),
                (6, 0, 3, 11), (1, 0, 3, 9), (3, 0, 3, 13), (12, 4, 3, 17), (1, 4, 3, 12)]


@pytest.fixture(scope="module")
def annotated_runs(tmp_path_factory):
    """Each case of WINDOW_CASES run as its own process, two at a time (each waits mostly on torch's import and
    the profiler's start): {case: (process, output folder)}."""
    root = tmp_path_factory.mktemp("annotated")

    def one(case):
        per_epoch, after, memory, _ = case
        out = root / "-".join(map(str, case)) / "o"
        code = ANNOTATED.format(scripts=str(SCRIPTS), out=str(out), per_epoch=per_epoch, after=after,
                                memory=memory)
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300), out
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(WINDOW_CASES, pool.map(one, WINDOW_CASES)))


@pytest.mark.parametrize("per_epoch, after, memory, stacks_from", WINDOW_CASES)
def test_stacks_window_waits_for_annotations_begun_under_the_main_window(annotated_runs, per_epoch, after, memory,
                                                                         stacks_from):
    """A torch profiler session must not start while a record_function block begun under the previous one
    is open (its end would land in the new session and crash the process): the memory window and the stacks
    window wait, also after the unprofiled steps that follow the main window (they start right after them when
    none is open); the stacks window waits for the blocks begun under the memory window (per_epoch 3: two steps)."""
    proc, out = annotated_runs[(per_epoch, after, memory, stacks_from)]
    assert proc.returncode == 0, proc.stderr[-3000:]
    phases = dict(eval(proc.stdout.strip().splitlines()[-1]))
    # step 0 (before the first boundary, the start-up) waits; then warm-up, 2 active, the window ends at
    # boundary 4; `after` steps timed without the profiler; no profiler from there until the memory window's 3
    # steps and the stacks window's 2 (each at least one step after the window before it); the steps between and
    # after those are not timed
    assert [phases[j] for j in (1, 2, 3)] == ["warmup", "active", "active"]
    assert [j for j, p in sorted(phases.items()) if p == "after"] == list(range(4, 4 + after))
    windows = []
    if memory:
        start = first_clear(4 + after + (after == 0), per_epoch, range(0, 4))
        windows = [start, start + 1, start + 2]
        assert first_clear(start + 4, per_epoch, range(start, start + 3)) == stacks_from  # the expectation, derived
        assert [j for j, p in sorted(phases.items()) if p == "memory"] == windows
        assert (out / "trace.memory.pt.trace.json.gz").is_file()
    else:
        assert first_clear(5 + after - (after > 0), per_epoch, range(0, 4)) == stacks_from
    assert [j for j, p in sorted(phases.items()) if p == "stacks"] == [stacks_from, stacks_from + 1]
    assert sorted(phases) == [*range(1, 4 + after), *windows, stacks_from, stacks_from + 1]
    assert (out / "trace.stacks.pt.trace.json.gz").is_file()


def test_gemm_dtypes_come_from_the_companion_when_the_trace_has_no_input_types(tmp_path):
    main = RuleTraceBuilder()
    for i in range(3):
        main.step(7 + i, i * 1000, 1000)
        main.launch("cutlass_gemm_kernel", host=(i * 1000, 5), device=(i * 1000 + 10, 900))  # no dtype in the name
    doc = main.build()
    doc["perfsleuth"] = {"version": 1, "stacks_trace": "t.stacks.pt.trace.json.gz"}
    (tmp_path / "t.pt.trace.json.gz").write_text(json.dumps(doc))
    before = analyze_file(tmp_path / "t.pt.trace.json.gz")
    assert "amp" not in {f["rule"] for f in before.findings}  # the name alone says nothing
    comp = RuleTraceBuilder()
    comp.step(1, 0, 1000)
    comp.typed_launch("aten::mm", ["float", "float"], "cutlass_gemm_kernel", host=(0, 8), device=(10, 600))
    comp.typed_launch("aten::mm", ["c10::BFloat16", "c10::BFloat16"], "cutlass_gemm_kernel", host=(10, 8),
                      device=(610, 200))
    comp.write(tmp_path / "t.stacks.pt.trace.json.gz")
    d = analyze_file(tmp_path / "t.pt.trace.json.gz").to_dict()
    amp = next(f for f in d["findings"] if f["rule"] == "amp")
    # 600 of 800 µs of the companion's GEMM time has FP32 inputs: 0.75 of this trace's 900 µs per step
    assert amp["evidence"]["gemm_fp32_share"] == 0.75 and amp["evidence"]["gemm_fp32_us_per_step"] == 675.0
    assert amp["evidence"]["gemm_dtype_from_inputs"] == 1.0


def test_profile_api_saves_the_trace_with_its_companion(tmp_path):
    code = f"""
import sys, torch, perfsleuth
sys.path.insert(0, {str(SCRIPTS)!r})
import toy
args = toy.parser("t", steps=20, batch_size=8, features=16).parse_args([])
model = toy.mlp(16, 16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with perfsleuth.profile(wait=3, warmup=1, active=3) as prof:
    for x, y in toy.loader(args):
        opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y.long()).backward(); opt.step()
rep = prof.report
print(sorted(p.name for p in rep.save({str(tmp_path / 'saved')!r})))
print(rep.to_dict()["measurement"]["unprofiled_step_us"]["n"] + rep.to_dict()["measurement"]["unprofiled_warmup_steps"])
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved, timed = proc.stdout.strip().splitlines()[-2:]
    assert eval(saved) == ["report.html", "report.json", "summary.md", "trace.memory.pt.trace.json.gz",
                           "trace.pt.trace.json.gz", "trace.stacks.pt.trace.json.gz"]
    assert timed == "6"  # wait 3: the start-up step, then 2 timed without the profiler; 4 after the window
    again = analyze_path(tmp_path / "saved").to_dict()
    assert again["trace"]["stacks_trace"] == str(tmp_path / "saved" / "trace.stacks.pt.trace.json.gz")
