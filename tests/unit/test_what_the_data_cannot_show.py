"""Issue 37, item 3: say what the data cannot show. Hand-built traces with exact numbers: first calls recorded
instead of steady steps (no cuda-graphs advice; a `first-calls` finding, said by the verdict), a graph capture
(DEVICE-UNREAD, no tiny-ops), a trace that lists a GPU and holds only host ops (DEVICE-UNREAD, op time not
`kernel`), a step mostly without events (`untraced-time` explains `other`), a withheld forecast's reason said
once, and an MTIA device named as what it is."""

from perfsleuth.analysis.verdict import verdict_text
from perfsleuth.report.present import fmt_forecast, forecast_details
from tracebuilder_rules import RuleTraceBuilder, analyze, fired


def first_call_trace() -> RuleTraceBuilder:
    """One call, no ProfilerStep: 150 launches of 5 µs kernels, each launch 10 µs except 3 first launches of 100 ms."""
    tb = RuleTraceBuilder()
    t = 0.0
    for k in range(150):
        dur = 100_000.0 if k in (0, 50, 100) else 10.0
        tb.launch("void at::native::vectorized_elementwise_kernel<4>()", host=(t, dur), device=(t + dur + 1, 5))
        t += dur + 20
    return tb


def test_a_first_call_trace_gets_no_steady_state_advice(tmp_path):
    report, facts = analyze(first_call_trace(), tmp_path)
    assert facts["step_source"] == "whole-trace"
    assert (facts["first_call_launches_per_step"], facts["first_call_us_per_step"]) == (3.0, 300_000.0)
    step = facts["step_us"]
    assert facts["first_call_share"] == round(300_000.0 / step, 4) and facts["first_calls"] is True
    got = fired(report)
    assert "cuda-graphs" not in got and "tiny-ops" not in got
    f = got["first-calls"]
    assert f["message"] == (
        "3 launch calls per step take 300.00 ms (" + f"{facts['first_call_share']:.1%}" + " of step time), and the "
        "trace has no step annotation (ProfilerStep). A launch takes microseconds once its code is loaded; one "
        "that takes milliseconds is a first call loading it. The trace records start-up: launch overhead, graph "
        "capture and other steady-state advice cannot be drawn from it, and no fix is forecast.")
    assert (f["severity"], f["severity_from"]) == ("medium", "rule") and report["findings"][0]["rule"] == "first-calls"
    assert "schedule(wait=1, warmup=2, active=3)" in f["fix"]
    assert report["verdict_notes"][-1] == ("the trace records first calls (start-up), not steady steps: this "
                                           "verdict describes start-up (first-calls)")


def capture_trace() -> RuleTraceBuilder:
    """Three 1 ms steps of host work around a graph capture: 400 small ops and launches, one 2 µs kernel."""
    tb = RuleTraceBuilder()
    for i in range(3):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        if i == 0:
            tb.runtime("cudaStreamBeginCapture", t0 + 1, 2)
        for k in range(400):
            tb.op("aten::add", t0 + 5 + k * 2.4, 1.5)
        tb.runtime("cudaStreamEndCapture", t0 + 980, 2)
    tb.launch("k", host=(2990, 1), device=(2992, 2))
    return tb


def test_a_graph_capture_is_device_unread_not_host_bound(tmp_path):
    report, facts = analyze(capture_trace(), tmp_path)
    assert report["verdict"] == "device-unread" and facts["device_unread"] is True
    assert report["verdict_reason"].startswith(
        "the trace records a CUDA graph capture on NVIDIA A100-SXM4-80GB (1 capture begun, next to no device time): "
        "captured kernels do not run while they are captured")
    assert "tiny-ops" not in fired(report) and "cuda-graphs" not in fired(report)
    assert report["verdict_notes"] == [report["verdict_reason"]]  # said once, nothing "elsewhere"


def test_a_gpu_trace_with_host_ops_only_is_device_unread_and_its_ops_are_host_time(tmp_path):
    """HTA's distributed_info_not_found: `device: NVIDIA A100-PG509-200 (cpu)`, HOST-BOUND (high)."""
    tb = RuleTraceBuilder()  # deviceProperties lists an A100; no kernel, copy or launch call
    for i in range(3):
        tb.step(i + 1, i * 1000, 1000)
        tb.op("aten::mm", i * 1000 + 100, 600)
    report, facts = analyze(tb, tmp_path)
    assert report["verdict"] == "device-unread" and report["trace"]["device_type"] == "cpu"
    assert report["verdict_reason"] == (
        "the trace lists NVIDIA A100-SXM4-80GB but holds none of its activity (no kernel, copy or launch call): only "
        "the host's ops were recorded, so the device's share of the step is unknown and no verdict is drawn from host "
        "op time (record with the device's activity on: ProfilerActivity.CUDA)")
    share = report["summary"]["time_share"]
    assert share["kernel"] == 0.0 and share["host"] == 1.0  # 600 µs of op time is the host's, not `kernel`
    assert not [w for w in report["warnings"] if "analysed as a CPU-only trace" in w]


def test_a_step_without_events_is_explained(tmp_path):
    """No step annotation: a 1.49 ms kernel, an 18.5 ms stretch with no event at all, another 1.49 ms kernel."""
    tb = RuleTraceBuilder()
    for t0 in (0, 20_000):
        tb.launch("k", host=(t0, 5), device=(t0 + 10, 1490))
    report, facts = analyze(tb, tmp_path)
    # the trace spans [0, 21500): kernels 2 x 1490, launches 2 x 5, no event in [5, 10), [1500, 20000), [20005, 20010)
    assert facts["step_source"] == "whole-trace" and facts["step_us"] == 21_500.0
    assert facts["other_us_per_step"] == 18_510.0 and facts["other_share"] == 0.8609
    assert facts["longest_gap_us"] == 18_500.0
    f = fired(report)["untraced-time"]
    assert f["message"] == (
        "86.1% of the step (18.51 ms per step) holds no event at all; the longest such stretch is 18.50 ms. The "
        "profiler recorded nothing there: the program ran code it does not trace (a thread or process that was not "
        "profiled, a sleep, I/O or a lock wait, Python recorded without with_stack), so the trace cannot say what "
        "fills this time, and no fix is forecast for it.")
    assert f["severity"] == "low" and f["forecast"]["speedup"] is None


def test_a_withheld_forecast_says_no_reliable_forecast_once():
    fc = {"kind": "unreliable", "speedup": None, "low": 2.89, "high": 14.65, "model": "cuda-graphs",
          "reason": "no reliable forecast: its assumptions give 2.89-14.65x (more than 3x apart; "
                    "the central one 14.65x)"}
    assert fmt_forecast(fc, 200) == ("no reliable forecast: its assumptions give 2.89-14.65x (more than 3x apart; "
                                     "the central one 14.65x)")
    assert ("no reliable forecast", "its assumptions give 2.89-14.65x (more than 3x apart; the central one 14.65x)") \
        in forecast_details(fc)


def test_an_mtia_device_is_not_called_the_gpu():
    share = {"dataloader": 0.0, "kernel": 0.2, "sync": 0.0, "transfer": 0.0, "host": 0.7, "communication": 0.0,
             "other": 0.1}
    assert verdict_text("host-bound", share, True, "MTIA") == (
        "host-bound: 70% of each step the MTIA waits for the host (Python, op dispatch, launches); kernels 20%")
    assert "the GPU" in verdict_text("host-bound", share, True)
