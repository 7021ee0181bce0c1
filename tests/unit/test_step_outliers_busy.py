"""Issue 37, item 1: step outliers on a machine the run found busy are the machine's (low, with the busy
evidence, no forecast); a compile fix is never advised to a program that does not compile; the slow step is
named as the trace names it (ProfilerStep#N) in the evidence, the message and the chart."""

from perfsleuth.render.html import chart
from tracebuilder_rules import RuleTraceBuilder, analyze, fired, run_metadata

BUSY_REASON = ("other processes kept 1.50 of the 2 CPUs this run could use busy during the recorded "
               "window (this run: 1.00)")


def outlier_trace(first: int = 7, busy: bool = False) -> RuleTraceBuilder:
    """Four 1 ms steps, ProfilerStep#7..#10; #9 takes 4 ms (4x the median: medium on a quiet machine)."""
    tb = RuleTraceBuilder()
    t0 = 0.0
    for i, d in enumerate((1000, 1000, 4000, 1000)):
        tb.step(first + i, t0, d)
        tb.launch("k", host=(t0, 5), device=(t0 + 10, d - 20))
        t0 += d
    if busy:
        names = [f"ProfilerStep#{first + i}" for i in range(4)]
        walls = [1000.0, 1010.0, 990.0, 1000.0]
        clock = {"unit": "us", "unprofiled_us": walls, "unprofiled_cpu_us": [w - 100 for w in walls],
                 "after_us": walls, "after_cpu_us": [w - 100 for w in walls], "profiled_us": [1000.0, 1000.0, 4000.0,
                 1000.0], "profiled_cpu_us": [900.0, 900.0, 3900.0, 900.0], "profiled_steps": names}
        meta = run_metadata(cores=2)
        meta["host"]["accelerator"] = "cuda"
        meta.update(clock=clock, cpu={"window": {"wall_s": 1.0, "main_cpu_s": 0.9, "tree_cpu_s": 1.0,
                                                 "others_cpu_s": 1.5, "counted_cpus": 2, "machine_cpus": 2,
                                                 "tick_s": 0.01}})
        tb.run_metadata = meta
    return tb


def test_a_quiet_machines_outlier_names_its_step_and_gives_no_compile_fix_without_compile(tmp_path):
    report, facts = analyze(outlier_trace(), tmp_path)
    assert (facts["step_slowest_index"], facts["step_slowest_name"]) == (2, "ProfilerStep#9")
    assert (facts["machine_busy"], facts["machine_busy_reason"], facts["compile_seen"]) == (False, "", False)
    f = fired(report)["step-outliers"]
    assert f["evidence"]["step_slowest_name"] == "ProfilerStep#9" and "step_slowest_index" not in f["evidence"]
    assert f["message"].startswith("The slowest of 4 steps, `ProfilerStep#9`, takes 4.00 ms, 4x the median")
    assert "torch.compile" not in f["fix"] and "gc.freeze()" in f["fix"]
    assert f["forecast"]["kind"] == "forecast" and f["severity"] in ("medium", "high")
    # the chart's step axis says the trace's own numbers: 7, 8, 9, 10 (not 1..4)
    bars = chart(report["steps"], report["summary"]["step_time_us"]["median"])
    assert [label for _, label in bars["xticks"]] == ["7", "8", "9", "10"]


def test_a_busy_machines_outlier_is_the_machines(tmp_path):
    """The word_language_model run: the red busy box on top, yet `[high] step-outliers est. 2.56×` advised
    torch.compile(dynamic=True) to a script that never compiles."""
    report, facts = analyze(outlier_trace(busy=True), tmp_path)
    assert report["measurement"]["busy"] is True
    assert (facts["machine_busy"], facts["machine_busy_reason"]) == (True, BUSY_REASON)
    f = fired(report)["step-outliers"]
    assert (f["severity"], f["severity_from"]) == ("low", "rule")
    assert f["forecast"]["kind"] == "none" and f["forecast"]["speedup"] is None
    assert f["forecast"]["reason"] == (f"the run found the machine busy ({BUSY_REASON}): the slow steps are the "
                                       "machine's, not the program's")
    assert f["evidence"]["machine_busy"] is True and f["evidence"]["machine_busy_reason"] == BUSY_REASON
    assert f["message"] == (f"The slowest of 4 steps, `ProfilerStep#9`, takes 4.00 ms, 4x the median steady step "
                            f"(1.00 ms); the run found the machine busy ({BUSY_REASON}): the slow steps are the "
                            "machine's, not the program's, and no fix of the program is forecast for them.")
    assert f["fix"].startswith("Measure again on a quiet machine") and "torch.compile" not in f["fix"]
