"""Noise (issue 24 item 5): every branch of `measure()` on hand-built clock metadata, with exact numbers (a
quiet machine, busy by preemption, busy by other processes' CPU, baselines that disagree, distortion beyond
noise, profiled steps faster); /proc/stat parsing and the CPU window on fakes; the top-level key added while
a trace is gzipped, and read back."""

import gzip
import json
import os
from types import SimpleNamespace

import pandas as pd
import pytest
from perfsleuth.analysis.machine import machine_facts
from perfsleuth.analysis.measurement import BUSY, measure
from perfsleuth.analysis.steps import Steps
from perfsleuth.record import trace_metadata as run_facts
from perfsleuth.record.outputs import RawTrace, finish_trace, gzip_json, raw_path
from perfsleuth.render.markdown import render_markdown
from perfsleuth.report.present import measurement_lines
from perfsleuth.render.terminal import render_terminal
from perfsleuth.trace.model import load_trace

NAMES = ["ProfilerStep#7", "ProfilerStep#8", "ProfilerStep#9"]
STEPS = Steps(pd.DataFrame({"name": NAMES, "phase": ["steady"] * 3}), "ProfilerStep")
QUIET_BEFORE = [10000.0, 10100.0, 9900.0, 10000.0]
QUIET_AFTER = [10050.0, 9950.0, 10000.0, 10100.0]


def cpu_of(walls, less=100.0):
    return [w - less for w in walls]


def clock(before=QUIET_BEFORE, after=QUIET_AFTER, profiled=(11000.0, 11100.0, 10900.0), before_cpu=None,
          after_cpu=None, profiled_cpu=None) -> dict:
    """A recorded clock; CPU time 0.1 ms under the wall time unless given (a single-threaded step that ran)."""
    return {"unit": "us", "unprofiled_us": list(before), "unprofiled_cpu_us": before_cpu or cpu_of(before),
            "after_us": list(after), "after_cpu_us": after_cpu or cpu_of(after),
            "profiled_us": list(profiled), "profiled_cpu_us": profiled_cpu or cpu_of(profiled),
            "profiled_steps": NAMES}


def test_a_quiet_run_is_neither_busy_nor_distorted():
    m = measure({"clock": clock()}, STEPS)
    # before and after pooled: 9900 9950 10000 10000 10000 10050 10100 10100 -> median 10000, MAD 50
    assert m["unprofiled_step_us"] == {"median": 10000.0, "mad": 50.0, "p90": 10100.0, "n": 8,
                                       "values": QUIET_BEFORE + QUIET_AFTER}
    assert (m["before"]["median"], m["before"]["mad"], m["after"]["median"], m["after"]["mad"]) == (
        10000.0, 50.0, 10025.0, 50.0)
    assert m["cpu_us"]["unprofiled"]["median"] == 9900.0 and m["cpu_us"]["profiled"]["values"] == [
        10900.0, 11000.0, 10800.0]
    assert m["profiled_step_us"]["median"] == 11000.0 and m["overhead"] == 1.1
    assert (m["busy"], m["busy_reason"], m["distorted"], m["preempted_steps"]) == (False, None, False, 0)
    assert "note" not in m and m["others_cores"] is None and m["unprofiled_warmup_steps"] == 0


def test_steps_that_waited_for_a_core_make_the_run_busy():
    # one step before and one after the window took 2.6x / 2.4x their group's median wall time at the usual CPU
    # time: preempted (the group's median 10050 µs; beyond max(3 robust sigmas, 15 %))
    before, after = [10000.0, 10100.0, 26000.0, 9900.0], [10000.0, 9900.0, 10100.0, 24000.0]
    m = measure({"clock": clock(before, after, before_cpu=[9900.0, 10000.0, 9800.0, 9800.0],
                                after_cpu=[9900.0, 9800.0, 10000.0, 9900.0])}, STEPS)
    assert m["preempted_steps"] == 2 and m["busy"] is True and m["distorted"] is False
    assert m["busy_reason"] == ("2 of 11 steps took far longer than the others at their usual CPU time: they "
                                "waited for a core")
    # pooled: 9900 9900 10000 10000 10100 10100 24000 26000 -> median 10050; 11000 / 10050
    assert m["unprofiled_step_us"]["median"] == 10050.0 and m["overhead"] == 1.095
    assert m["note"] == (f"{BUSY} (2 of 11 steps took far longer than the others at their usual CPU time: they "
                         f"waited for a core; overhead 1.09x: 11.00 ms profiled, 10.05 ms without the profiler)")
    one = measure({"clock": clock(before, QUIET_AFTER, before_cpu=[9900.0, 10000.0, 9800.0, 9800.0])}, STEPS)
    assert one["preempted_steps"] == 1 and one["busy"] is False  # one hiccup: the medians do not mind
    # the same slow step with its CPU time up too did more work: not preempted
    worked = measure({"clock": clock(before, after)}, STEPS)
    assert worked["preempted_steps"] == 0 and worked["busy"] is False


def test_profiled_steps_slower_at_the_same_cpu_time_waited_they_were_not_distorted():
    m = measure({"clock": clock(profiled=[20000.0, 20200.0, 19800.0],
                                profiled_cpu=[10000.0, 10100.0, 9900.0])}, STEPS)
    assert m["overhead"] == 2.0 and m["busy"] is True and m["distorted"] is False
    assert m["busy_reason"] == ("the profiled steps took 20.00 ms against 10.00 ms without the profiler, at about the "
                                "same CPU time (10.00 ms and 9.90 ms): they waited for a core, the profiler's own "
                                "cost is CPU time")
    assert "PROFILER DISTORTION" not in measurement_lines({"measurement": m})[1]
    # on a GPU the profiler also costs time the host's CPU time does not show: that is distortion
    gpu = measure({"clock": clock(profiled=[20000.0, 20200.0, 19800.0], profiled_cpu=[10000.0, 10100.0, 9900.0]),
                   "host": {"accelerator": "cuda"}}, STEPS)
    assert (gpu["busy"], gpu["distorted"]) == (False, True)
    # where the run queue was measured, it decides: 9.5 ms of the 10 ms more in the queue
    queued = clock(profiled=[20000.0, 20200.0, 19800.0], profiled_cpu=[10000.0, 10100.0, 9900.0])
    queued.update(unprofiled_queued_us=[0.0] * 4, after_queued_us=[0.0] * 4, profiled_queued_us=[9500.0] * 3)
    m = measure({"clock": queued, "host": {"accelerator": "cuda"}}, STEPS)
    assert m["busy"] is True and m["preempted_steps"] == 3 and m["queued_us"]["profiled"]["median"] == 9500.0
    assert m["busy_reason"] == ("3 of 11 steps spent 15% or more of their time waiting for a core (the run queue); "
                                "the profiled steps took 20.00 ms against 10.00 ms without the profiler, waiting for "
                                "a core 9.50 ms of it")


def test_steps_that_wait_for_data_are_not_preempted():
    # a DataLoader-bound loop: 1 ms of CPU a step, and every fourth step waits 30 ms more for its batch
    walls, cpus = [10000.0, 40000.0, 10000.0, 10100.0], [1000.0, 1000.0, 1000.0, 1100.0]
    m = measure({"clock": clock(walls, walls, [10000.0, 40000.0, 10100.0], before_cpu=cpus, after_cpu=cpus,
                                profiled_cpu=[1100.0, 1100.0, 1100.0])}, STEPS)
    assert m["preempted_steps"] == 0 and m["busy"] is False  # CPU time is not what such steps are made of
    queued = clock(walls, walls, [10000.0, 40000.0, 10100.0], before_cpu=cpus, after_cpu=cpus)
    queued.update(unprofiled_queued_us=[0.0, 0.0, 0.0, 0.0], after_queued_us=[0.0, 29000.0, 0.0, 0.0],
                  profiled_queued_us=[0.0, 0.0, 0.0])
    m = measure({"clock": queued}, STEPS)  # ... unless the run queue says the long one waited for a core
    assert m["preempted_steps"] == 1 and m["busy"] is False and m["queued_us"]["unprofiled"]["n"] == 8


def window(others_cpu_s, tree_cpu_s=1.0, wall_s=1.0, cpus=2) -> dict:
    return {"cpu": {"window": {"wall_s": wall_s, "main_cpu_s": 0.9, "tree_cpu_s": tree_cpu_s,
                               "others_cpu_s": others_cpu_s, "counted_cpus": cpus, "machine_cpus": cpus,
                               "tick_s": 0.01}},
            "host": {"cpu_count": cpus, "affinity_cpus": cpus}}


def test_other_processes_on_this_runs_cpus_make_it_busy():
    m = measure({"clock": clock(), **window(1.5)}, STEPS)
    assert m["others_cores"] == 1.5 and m["busy"] is True and m["distorted"] is False
    assert m["busy_reason"] == ("other processes kept 1.50 of the 2 CPUs this run could use busy during the "
                                "recorded window (this run: 1.00)")
    assert m["note"].startswith(BUSY + " (other processes kept 1.50 of the 2 CPUs")
    # 0.3 cores, or 1.2 of 64 CPUs (the run and they leave most idle): not busy
    assert measure({"clock": clock(), **window(0.3)}, STEPS)["busy"] is False
    assert measure({"clock": clock(), **window(1.2, cpus=64)}, STEPS)["busy"] is False
    # over a 30 ms window /proc/stat's ticks (10 ms per CPU, and this run's) are ±1 core: 1.0 is not enough
    assert measure({"clock": clock(), **window(0.03, tree_cpu_s=0.03, wall_s=0.03)}, STEPS)["busy"] is False
    m = machine_facts(window(1.5))
    assert (m.cores, m.others_cores, m.free_cores) == (2.0, 1.5, 0.5)
    assert m.assumptions["others_cores"] == ("1.50 cores of the 2 CPUs this run could use kept busy by other "
                                             "processes over the recorded window (/proc/stat less this process and "
                                             "its DataLoader workers, ±0.03)")
    off_linux = window(1.5)
    del off_linux["cpu"]["window"]["others_cpu_s"]
    m = machine_facts(off_linux)
    assert m.others_cores is None and m.free_cores == 2.0 and m.assumptions["others_cores"].startswith(
        "not recorded (no /proc/stat: not Linux")
    assert measure({"clock": clock(), **off_linux}, STEPS)["others_cores"] is None


def test_baselines_that_disagree_beyond_their_spread_make_it_busy():
    after = [14000.0, 14100.0, 13900.0, 14000.0]  # 40 % slower after the window, the CPU time with it
    m = measure({"clock": clock(after=after, profiled=[15000.0, 15100.0, 14900.0])}, STEPS)
    assert (m["before"]["median"], m["after"]["median"], m["unprofiled_step_us"]["median"]) == (
        10000.0, 14000.0, 12000.0)
    assert m["busy"] is True and m["distorted"] is False and m["overhead"] == 1.25
    assert m["busy_reason"] == ("the unprofiled steps before the profiled window (median 10.00 ms) and after it "
                                "(14.00 ms) differ beyond their spread")
    waited = measure({"clock": clock(after=after, after_cpu=cpu_of(QUIET_AFTER))}, STEPS)
    assert waited["busy_reason"] == (  # CPU medians 9900 and 9925 µs
        "the unprofiled steps before the profiled window (median 10.00 ms) and after it (14.00 ms) differ beyond their "
        "spread, at about the same CPU time (9.90 ms and 9.93 ms): the slower ones waited for a core")
    # 10 % apart: within what the rule calls noise
    assert measure({"clock": clock(after=[11000.0, 11100.0, 10900.0, 11000.0])}, STEPS)["busy"] is False


def test_distortion_only_beyond_the_unprofiled_steps_noise():
    m = measure({"clock": clock(profiled=[20000.0, 20200.0, 19800.0])}, STEPS)
    assert (m["overhead"], m["distorted"], m["busy"]) == (2.0, True, False)
    # 3 robust sigmas of the unprofiled steps: 3 x 1.4826 x 50 µs = 0.22 ms
    assert m["note"] == ("profiling slowed the steps 2.00x, beyond their noise (median 20.00 ms profiled, 10.00 ms "
                         "± 0.22 ms without the profiler): the shares, the verdict and the savings describe the "
                         "profiled program; larger steps (a bigger batch, fewer and larger ops) shrink the profiler's "
                         "per-op cost")
    shapes = measure({"clock": clock(profiled=[20000.0, 20200.0, 19800.0]),
                      "schedule": {"record_shapes": True}}, STEPS)
    # input shapes are what the efficiency section and the batching forecast read: not advised away
    assert shapes["note"].endswith("the profiled program; larger steps (a bigger batch, fewer and larger ops) shrink "
                                   "the profiler's per-op cost; input shapes add to it too, but the efficiency section "
                                   "and the loop-batching forecast need them")
    stacks = measure({"clock": clock(profiled=[20000.0, 20200.0, 19800.0]),
                      "schedule": {"with_stack": True}}, STEPS)
    assert stacks["note"].endswith("the profiled program; record the window without Python stacks (the default), or "
                                   "with larger steps")
    both = measure({"clock": clock(profiled=[20000.0, 20200.0, 19800.0]),
                    "schedule": {"with_stack": True, "record_shapes": True}}, STEPS)
    assert both["note"] == stacks["note"] + ("; input shapes add to it too, but the efficiency section and the "
                                             "loop-batching forecast need them")
    # 30 % slower on the medians, but the unprofiled steps spread wider than that (MAD 3250 µs): not distortion
    wide = measure({"clock": {"unprofiled_us": [6000.0, 14000.0, 7000.0, 13000.0], "after_us": [
        6500.0, 13500.0, 10000.0, 10000.0], "profiled_us": [13000.0] * 3, "profiled_steps": NAMES}}, STEPS)
    assert wide["unprofiled_step_us"]["mad"] == 3250.0 and wide["overhead"] == 1.3
    assert (wide["distorted"], wide["busy"]) == (False, False) and "note" not in wide


@pytest.mark.parametrize("profiled, overhead", [([5000.0, 5100.0, 4900.0], 0.5), ([800.0] * 3, 0.08)])
def test_profiled_faster_than_unprofiled_is_never_distortion(profiled, overhead):
    m = measure({"clock": clock(profiled=profiled)}, STEPS)
    assert (m["overhead"], m["distorted"], m["busy"]) == (overhead, False, True)
    assert m["busy_reason"].startswith(f"the profiled steps were faster than the unprofiled ones ({overhead:.2f}x, ")
    assert m["busy_reason"].endswith("a profiler does not speed a program up")
    line, flag = measurement_lines({"measurement": m})
    assert flag.startswith(BUSY) and "DISTORTION" not in flag and "--no-shapes" not in flag


def test_a_busy_run_says_so_in_the_warnings_and_the_headlines(tmp_path):
    from clock_traces import two_steps

    doc = two_steps().build()
    doc["perfsleuth"] = {"version": 1, "clock": clock([100.0] * 3, [100.0] * 3, [40.0, 40.0],
                                                      profiled_cpu=[40.0, 40.0])}
    doc["perfsleuth"]["clock"]["profiled_steps"] = NAMES[:2]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    from perfsleuth.api import analyze_file

    d = analyze_file(path).to_dict()
    m = d["measurement"]
    assert m["busy"] is True and m["distorted"] is False and m["note"] in d["warnings"]
    assert m["note"].startswith(BUSY) and BUSY in render_terminal(d) and BUSY in render_markdown(d)
    assert "PROFILER DISTORTION" not in render_terminal(d)


def test_measure_without_unprofiled_steps_before_takes_those_after():
    m = measure({"clock": clock(before=[], profiled=[10500.0] * 3)}, STEPS)
    assert m["before"] is None and m["after"]["n"] == 4 and m["unprofiled_step_us"]["median"] == 10025.0
    assert m["overhead"] == round(10500 / 10025, 3) and not m["busy"]
    none = measure({"clock": clock(before=[], after=[])}, STEPS)
    assert none["unprofiled_step_us"] is None and none["note"].startswith("no unprofiled step was timed")


PROC_STAT = """cpu  100 0 50 1000 10 0 5 7 0 0
cpu0 60 0 30 500 5 0 3 0 0 0
cpu1 40 0 20 500 5 0 2 7 3 0
intr 1 2 3
ctxt 99
cpu_oops x y
"""


def test_proc_stat_busy_time_per_cpu(tmp_path):
    # busy = user + nice + system + irq + softirq + steal (guest is inside user already; idle and iowait are not)
    # the last: the steal ticks among the busy ones (cpu1's 7)
    assert run_facts.parse_proc_stat(PROC_STAT) == (60 + 30 + 3 + 40 + 20 + 2 + 7, 2, 2, 7)
    assert run_facts.parse_proc_stat(PROC_STAT, {1}) == (69, 1, 2, 7)
    assert run_facts.parse_proc_stat(PROC_STAT, {0}) == (93, 1, 2, 0)
    assert run_facts.parse_proc_stat("cpu  1 2 3\nintr 4\n") is None  # no per-CPU line
    assert run_facts.parse_proc_stat("cpu0 5 1\n") == (6, 1, 1, 0)  # an old kernel's short lines
    (tmp_path / "stat").write_text(PROC_STAT)
    busy = run_facts.machine_busy(str(tmp_path / "stat"))  # the CPUs of this process's affinity
    mine = run_facts.parse_proc_stat(PROC_STAT, os.sched_getaffinity(0))
    tick = os.sysconf("SC_CLK_TCK")
    assert busy == (mine[0] / tick, mine[1], 2, mine[3] / tick)
    assert run_facts.machine_busy(str(tmp_path / "missing")) is None  # not Linux: nothing recorded


def test_cpu_clock_records_what_others_took_over_the_window(monkeypatch):
    t = {"perf": iter([10.0, 11.0]), "thread": iter([1.0, 1.9]), "process": iter([2.0, 3.2])}
    monkeypatch.setattr(run_facts, "time", SimpleNamespace(
        perf_counter=lambda: next(t["perf"]), thread_time=lambda: next(t["thread"]),
        process_time=lambda: next(t["process"])))
    readings = iter([(50.0, 2, 2), (53.0, 2, 2)])
    monkeypatch.setattr(run_facts, "machine_busy", lambda: next(readings))
    c = run_facts.CpuClock()
    c.start()
    w = c.window()
    # 3 busy CPU seconds on this run's 2 CPUs in 1 s, 1.2 of them this process's: 1.8 other processes'
    assert (w["wall_s"], w["main_cpu_s"], w["tree_cpu_s"], w["others_cpu_s"]) == (1.0, 0.9, 1.2, 1.8)
    assert (w["counted_cpus"], w["machine_cpus"], w["workers"], w["worker_cpu_s"]) == (2, 2, 0, 0)
    assert machine_facts({"cpu": {"window": w}, "host": {"affinity_cpus": 2}}).others_cores == 1.8
    assert "steal_cpu_s" not in w  # readings without steal time (before it was recorded)


def test_the_hypervisors_steal_time_is_said_apart_from_other_processes(monkeypatch):
    """A VM whose host gave 0.94 of its 2 CPUs to other machines: the run is as slowed as by other processes,
    but none of this machine's took the CPUs. The window records the steal seconds; busy_reason names who."""
    t = {"perf": iter([10.0, 11.0]), "thread": iter([1.0, 1.9]), "process": iter([2.0, 3.0])}
    monkeypatch.setattr(run_facts, "time", SimpleNamespace(
        perf_counter=lambda: next(t["perf"]), thread_time=lambda: next(t["thread"]),
        process_time=lambda: next(t["process"])))
    readings = iter([(50.0, 2, 2, 4.0), (52.0, 2, 2, 4.94)])
    monkeypatch.setattr(run_facts, "machine_busy", lambda: next(readings))
    c = run_facts.CpuClock()
    c.start()
    w = c.window()
    assert (w["others_cpu_s"], w["steal_cpu_s"]) == (1.0, 0.94)
    m = measure({"clock": clock(), "cpu": {"window": w}, "host": {"cpu_count": 2, "affinity_cpus": 2}}, STEPS)
    assert (m["busy"], m["others_cores"], m["steal_cores"]) == (True, 1.0, 0.94)
    assert m["busy_reason"] == ("the hypervisor (the VM's steal time: its CPUs given to other machines) kept 1.00 of "
                                "the 2 CPUs this run could use busy during the recorded window (this run: 1.00)")
    # a smaller part of it: both named
    w = {**w, "others_cpu_s": 1.5, "steal_cpu_s": 0.3}
    m = measure({"clock": clock(), "cpu": {"window": w}, "host": {"cpu_count": 2, "affinity_cpus": 2}}, STEPS)
    assert m["busy_reason"] == ("other processes and the hypervisor (steal time: 0.30) kept 1.50 of the 2 CPUs this "
                                "run could use busy during the recorded window (this run: 1.00)")
    # within /proc/stat's error (one tick per CPU over the window: 0.03 cores): other processes alone
    w = {**w, "steal_cpu_s": 0.02}
    m = measure({"clock": clock(), "cpu": {"window": w}, "host": {"cpu_count": 2, "affinity_cpus": 2}}, STEPS)
    assert m["busy_reason"].startswith("other processes kept 1.50 of the 2 CPUs")


def test_the_final_key_is_added_while_the_trace_is_gzipped_and_read_back(tmp_path):
    from tracebuilder_rules import RuleTraceBuilder

    tb = RuleTraceBuilder()
    tb.step(7, 0, 200)
    tb.launch("k", host=(0, 5), device=(10, 180))
    doc = tb.build()
    doc["perfsleuth"] = {"version": 1, "clock": {"unprofiled_us": [1.0], "after_us": []}, "stacks_trace": None}
    raw = raw_path(tmp_path / "trace.pt.trace.json.gz")
    assert raw == tmp_path / "trace.pt.trace.json"
    raw.write_text(json.dumps(doc, indent=1) + "\n\n")  # torch's export, with trailing white space
    path, error = finish_trace(RawTrace(raw, tmp_path / "trace.pt.trace.json.gz", None),
                               {"clock": {"unprofiled_us": [1.0], "after_us": [2.0, 3.0]}})
    assert (path, error) == (tmp_path / "trace.pt.trace.json.gz", None) and not raw.exists()
    finished = json.loads(gzip.decompress(path.read_bytes()))
    final = {"clock": {"unprofiled_us": [1.0], "after_us": [2.0, 3.0]}}
    assert finished == {**json.loads(json.dumps(doc)), "perfsleuth_final": final}
    meta = load_trace(path).run_metadata  # perfsleuth_final's keys replace perfsleuth's
    assert meta["clock"] == {"unprofiled_us": [1.0], "after_us": [2.0, 3.0]} and meta["version"] == 1
    (tmp_path / "empty.json").write_text("{ }")
    gzip_json(tmp_path / "empty.json", tmp_path / "empty.json.gz", {"clock": {}})  # nothing to add a key to
    assert json.loads(gzip.decompress((tmp_path / "empty.json.gz").read_bytes())) == {}


def test_a_trace_whose_json_is_gone_is_exported_again_or_said_lost(tmp_path):
    class Prof:
        def export_chrome_trace(self, path):
            with open(path, "w") as f:
                f.write('{"traceEvents": []}')

    gone = tmp_path / "gone" / "trace.pt.trace.json"
    path, error = finish_trace(RawTrace(gone, gone.with_name("trace.pt.trace.json.gz"), Prof()), {"clock": {}})
    assert path is not None and path.parent != tmp_path / "gone" and error.startswith(
        f"could not write the trace to {tmp_path / 'gone' / 'trace.pt.trace.json.gz'} (FileNotFoundError")
    assert json.loads(gzip.decompress(path.read_bytes())) == {"traceEvents": [], "perfsleuth_final": {"clock": {}}}
    path, error = finish_trace(RawTrace(None, tmp_path / "x.gz", Prof(), "could not write the trace: lost"))
    assert (path, error) == (None, "could not write the trace: lost")
