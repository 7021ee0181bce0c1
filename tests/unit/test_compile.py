"""torch.compile on hand-built traces (docs/compile.md): exact compile time and its parts, compile ids and
recompilations, eager frame calls, graph breaks, the steps set apart, the forecasts; the names parsed."""

from pathlib import Path

from compile_builder import broken_call, compile_frame, compiled_call, eager_call
from perfsleuth.analysis.measurement import measure
from perfsleuth.api import analyze_file
from perfsleuth.facts.core import compute_facts
from perfsleuth.trace.names import compile_id, compile_part, is_compile_event, region_id
from tracebuilder_rules import RuleTraceBuilder, analyze, fired


def varying(tb: RuleTraceBuilder) -> None:
    """7 steps: 1 compiles 0/0 (8510 µs) and is warm-up; 3 recompiles 0/1 (8510 µs); 5 gives up on 0/2
    (100 µs) and runs eager; 6 runs eager (1500 µs); 2, 4, 7 run compiled (1000 µs)."""
    tb.step(1, 0, 10_000)
    compile_frame(tb, 100, 0, 0)
    compiled_call(tb, 8_700, 0, 0, 200)
    tb.step(2, 10_000, 1000)
    compiled_call(tb, 10_100, 0, 0, 200)
    tb.step(3, 11_000, 10_000)
    compile_frame(tb, 11_100, 0, 1)
    compiled_call(tb, 19_700, 0, 1, 200)
    tb.step(4, 21_000, 1000)
    compiled_call(tb, 21_100, 0, 0, 200)
    tb.step(5, 22_000, 1100)
    compile_frame(tb, 22_100, 0, 2, gave_up=True)
    eager_call(tb, 22_300, 500)
    tb.step(6, 23_100, 1500)
    eager_call(tb, 23_200, 500)
    tb.step(7, 24_600, 1000)
    compiled_call(tb, 24_700, 0, 0, 200)


def test_names_of_torch_compile_events():
    assert compile_id("entire_frame_compile_data: fn_name=_compile.compile_inner, compile_id=0/7") == (0, 7)
    assert compile_id("dynamo_data: compile_id=!1/2/3") == (2, 3)  # compiled autograd's frame compile
    assert compile_id("dynamo_data: compile_id=!1") is None
    assert compile_id("aten::mm") is None
    assert region_id("Torch-Compiled Region: 1/5") == (1, 5) and region_id("CompiledFunction") is None
    assert compile_part("bytecode_tracing") == compile_part("bytecode_tracing (dynamo_timed)") == "dynamo"
    assert compile_part("compile_fx_inner (dynamo_timed)") == "inductor" and compile_part("build_guards") == "guards"
    assert compile_part("create_aot_dispatcher_function") == "aot" and compile_part("aten::mm") is None
    assert is_compile_event("gc (dynamo_timed)") and is_compile_event("compile_attempt_1")
    assert not is_compile_event("Torch-Compiled Region: 0/0") and not is_compile_event("TorchDynamo Cache Lookup")


def test_steps_that_recompile_are_set_apart_not_warm_up(tmp_path):
    tb = RuleTraceBuilder(device=False)
    varying(tb)
    report, facts = analyze(tb, tmp_path)
    assert [s["phase"] for s in report["steps"]] == ["warmup", "steady", "compile", "steady", "compile", "steady", "steady"]
    assert report["summary"]["steps"] == {"steady": 4, "warmup": 1, "partial": 0, "compile": 2}
    reasons = [s.get("phase_reason") for s in report["steps"]]
    assert reasons[0] == "10.0 ms, 10.0x the median steady step; 8.5 ms compiling (torch.compile 0/0)"
    assert reasons[2] == "10.0 ms, 10.0x the median steady step; 8.5 ms recompiling (torch.compile 0/1)"
    assert reasons[4] == "1.1 ms, 1.1x the median steady step; 100 µs recompiling (torch.compile 0/2 gave up)"
    v = facts.values
    assert (v["compile_window_steps"], v["compile_window_step_us"]) == (7, round(25_600 / 7, 3))
    assert (v["compile_steps"], v["compile_steps_after_warmup"], v["compiles"], v["compiles_after_warmup"]) == (3, 2, 3, 2)
    assert v["compile_us_per_step"] == round(17_120 / 7, 3)  # 8510 + 8510 + 100
    assert v["recompile_us_per_step"] == v["compile_after_warmup_us_per_step"] == round(8610 / 7, 3)
    assert (v["recompiles"], v["recompiled_frames"], v["compile_max_per_frame"], v["compile_gave_up"]) == (2, 1, 3, 1)
    assert v["compile_limit_hit"] is True
    parts = {p: v[f"compile_{p}_us_per_step"] for p in ("dynamo", "aot", "inductor", "guards", "backend", "other")}
    assert parts == {"dynamo": round(2000 / 7, 3), "aot": round(4000 / 7, 3), "inductor": round(10_000 / 7, 3),
                     "guards": round(1000 / 7, 3), "backend": 0.0, "other": round(120 / 7, 3)}
    assert v["compile_window_share"] == round(17_120 / 25_600, 4)
    # steady steps 2, 4, 6, 7: four frame calls, the one in step 6 eager
    assert (v["compile_frame_calls_per_step"], v["compile_eager_calls_per_step"], v["compile_eager_steps"]) == (1.0, 0.25, 1)
    assert (v["compile_eager_share"], v["compiled_calls_per_step"], v["graph_breaks_per_step"]) == (0.25, 0.75, 0.0)
    assert v["compile_live"] is False and v["recompile_reason"] == ""


def test_recompilation_forecast_removes_the_recompile_time_from_the_recorded_steps(tmp_path):
    tb = RuleTraceBuilder(device=False)
    varying(tb)
    report, _ = analyze(tb, tmp_path)
    found = fired(report)
    assert {"recompilation", "compile-fallback", "compile-in-steady-state"} <= set(found)
    assert "graph-breaks" not in found
    fc = found["recompilation"]["forecast"]
    before, saving = 25_600 / 7, 8610 / 7  # the mean recorded step; in `low` the rest of it runs 10% slower
    rest = before - 17_120 / 7
    assert (fc["kind"], fc["model"], fc["saving_us"], fc["speedup"]) == (
        "forecast", "no-recompilation", round(saving, 3), round(before / (before - saving), 3))
    assert (fc["low"], fc["high"]) == (round(before / (before - saving + 0.1 * rest), 3), fc["speedup"])
    assert found["recompilation"]["severity"] == "high"
    assert found["recompilation"]["ceiling"]["saving_us"] == 1125.0  # like every ceiling, at most the steady step
    assert found["compile-in-steady-state"]["forecast"]["speedup"] == fc["speedup"]
    # compile-fallback: the eager steady step (1500 µs) against the compiled ones (1000 µs), 1 of 4 steps
    fb = found["compile-fallback"]["forecast"]
    assert (fb["model"], fb["saving_us"], fb["speedup"]) == ("compiled-not-eager", 125.0, round(1125 / 1000, 3))
    assert found["compile-fallback"]["severity"] == "medium"
    assert "recompile limit" in found["compile-fallback"]["message"]


def test_graph_breaks_counted_per_call_with_the_time_between_the_graphs(tmp_path):
    tb = RuleTraceBuilder(device=False)
    tb.step(1, 0, 10_000)
    compile_frame(tb, 100, 0, 0, 1000, 1000, 1000, 500)
    compile_frame(tb, 4_000, 1, 0, 1000, 1000, 1000, 500)
    broken_call(tb, 8_000)
    for i in range(4):
        tb.step(2 + i, 10_000 + 1000 * i, 1000)
        broken_call(tb, 10_100 + 1000 * i)
    report, facts = analyze(tb, tmp_path)
    v = facts.values
    assert [s["phase"] for s in report["steps"]] == ["warmup"] + ["steady"] * 4
    assert (v["graph_breaks_per_step"], v["graph_break_calls_per_step"], v["graph_break_us_per_step"]) == (1.0, 1.0, 40.0)
    assert (v["graph_break_share"], v["compiled_calls_per_step"], v["compile_frame_calls_per_step"]) == (0.04, 1.0, 2.0)
    assert (v["compile_eager_calls_per_step"], v["recompiles"], v["compile_steps_after_warmup"]) == (0.0, 0, 0)
    found = fired(report)
    assert set(found) & {"recompilation", "compile-fallback", "compile-in-steady-state"} == set()
    gb = found["graph-breaks"]
    assert gb["forecast"]["speedup"] is None and gb["forecast"]["model"] == "graph-break-free"
    assert "cannot be replayed" in gb["forecast"]["reason"]
    assert (gb["severity"], gb["severity_from"], gb["ceiling"]["saving_us"]) == ("low", "rule", 40.0)
    assert gb["message"].startswith("1 graph break per step: 1 compiled call per step run 2 graphs each, with 40 µs")


def test_a_clean_compiled_loop_has_no_compile_finding_after_warm_up(tmp_path):
    tb = RuleTraceBuilder(device=False)
    tb.step(1, 0, 10_000)
    compile_frame(tb, 100, 0, 0)
    compiled_call(tb, 8_700, 0, 0, 200)
    for i in range(4):
        tb.step(2 + i, 10_000 + 1000 * i, 1000)
        compiled_call(tb, 10_100 + 1000 * i, 0, 0, 800)
    report, facts = analyze(tb, tmp_path)
    assert [s["phase"] for s in report["steps"]] == ["warmup"] + ["steady"] * 4
    assert report["steps"][0]["phase_reason"] == "10.0 ms, 10.0x the median steady step; 8.5 ms compiling (torch.compile 0/0)"
    assert facts.values["compile_steps"] == 1 and facts.values["compile_steps_after_warmup"] == 0
    assert not {f["rule"] for f in report["findings"]} & {"recompilation", "graph-breaks", "compile-fallback",
                                                          "compile-in-steady-state"}


def test_when_every_step_recompiles_that_is_the_steady_state(tmp_path):
    tb = RuleTraceBuilder(device=False)
    for i in range(4):
        tb.step(1 + i, 10_000 * i, 10_000)
        compile_frame(tb, 10_000 * i + 100, 0, 1 + i)
        compiled_call(tb, 10_000 * i + 8_700, 0, 1 + i, 200)
    report, facts = analyze(tb, tmp_path)
    assert [s["phase"] for s in report["steps"]] == ["steady"] * 4
    assert "every step after the warm-up compiled (4 steps; torch.compile): the steady state includes compilation" \
        in report["warnings"]
    assert report["summary"]["time_share"]["host"] == 1.0  # compilation is host time (no op ran here)
    assert {"recompilation", "compile-in-steady-state"} <= set(fired(report))


def clock(unprofiled: list, compiled: list) -> dict:
    return {"clock": {"unit": "us", "unprofiled_us": unprofiled, "profiled_us": [1000.0] * 3,
                      "profiled_steps": ["ProfilerStep#5", "ProfilerStep#6", "ProfilerStep#7"]},
            "compile": {"version": 1, "steps": {"wait": compiled}}}


def test_unprofiled_steps_that_compile_are_left_out_of_the_measurement(tmp_path):
    tb = RuleTraceBuilder(device=False)
    for i, n in enumerate((5, 6, 7)):
        tb.step(n, 1000 * i, 1000)
    steps = analyze_file(tb.write(tmp_path / "t.json.gz")).steps
    m = measure(clock([365_000.0, 1050.0, 380_000.0, 990.0], [360_000, 0, 371_000, 0]), steps)
    assert (m["unprofiled_step_us"]["values"], m["unprofiled_compile_steps"]) == ([1050.0, 990.0], 2)
    assert (m["overhead"], m["distorted"]) == (round(1000 / 1020, 3), False)
    m = measure(clock([365_000.0, 380_000.0], [360_000, 371_000]), steps)
    assert m["unprofiled_step_us"] is None and m["distorted"] is False and m["overhead"] is None
    assert m["note"].startswith("every unprofiled step compiled (2, torch.compile)")
    m = measure(clock([365_000.0, 380_000.0], [0, 0]), steps)  # not known to compile: a busy machine, as before
    assert m["busy"] is True and "a profiler does not speed a program up" in m["busy_reason"]
    assert "unprofiled_compile_steps" not in m


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "compile"


def test_recorded_varying_lengths():
    """fixtures/traces/compile/varying_mlp: two recompiling steps (the second gives up at the limit), then the
    model runs eager in every steady step; the unprofiled step compiled, so no overhead is claimed."""
    report = analyze_file(FIXTURES / "varying_mlp.pt.trace.json.gz")
    facts = compute_facts(report.trace, report.steps, report.breakdown).values
    d = report.to_dict()
    assert [s["phase"] for s in d["steps"]] == ["compile", "compile", "steady", "steady"]
    assert (facts["compiles"], facts["recompiles"], facts["compile_gave_up"], facts["compile_limit_hit"]) == (2, 2, 1, True)
    assert (facts["compile_eager_calls_per_step"], facts["compile_frame_calls_per_step"]) == (1.0, 1.0)
    assert (facts["compile_live_recompiles"], facts["compile_recompile_limit"], facts["compile_unprofiled_steps"]) == (3, 3, 1)
    assert facts["recompile_reason"] == "tensor 'x' size mismatch at index N. expected N, actual N"
    assert {"recompilation", "compile-in-steady-state", "compile-fallback"} <= set(fired(d)) and "graph-breaks" not in fired(d)
    assert d["measurement"]["distorted"] is False and d["measurement"]["unprofiled_compile_steps"] == 1


def test_recorded_graph_break():
    """fixtures/traces/compile/graph_break_mlp: one break per call, two frame calls per step (the forward and
    its resume function), no recompilation in the window; the one recorded outside it is perfsleuth's."""
    report = analyze_file(FIXTURES / "graph_break_mlp.pt.trace.json.gz")
    facts = compute_facts(report.trace, report.steps, report.breakdown).values
    d = report.to_dict()
    assert [s["phase"] for s in d["steps"]] == ["steady"] * 3
    assert (facts["graph_breaks_per_step"], facts["graph_break_calls_per_step"], facts["compile_frame_calls_per_step"]) \
        == (1.0, 1.0, 2.0)
    assert (facts["recompiles"], facts["compile_own_recompiles"], facts["compile_live_recompiles"]) == (0, 1, 1)
    assert facts["graph_break_reason"] == "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    assert [f["rule"] for f in d["findings"]] == ["graph-breaks"]


def test_cuda_graph_trees_recording_again_after_warm_up(tmp_path):
    """mode="reduce-overhead": CUDA graph trees record a graph (`CUDAGraphNode.record`) and replay it with one
    graph launch per step; a record after the warm-up is a re-record, and compilation time in its step."""
    tb = RuleTraceBuilder()
    tb.step(1, 0, 10_000)
    compile_frame(tb, 100, 0, 0)
    for i in range(4):
        t = 10_000 + 1000 * i if i else 8_700
        if i:
            tb.step(1 + i, t, 1000)
        if i in (0, 2):  # recorded in the warm-up step, recorded again in step 3
            tb.op("CUDAGraphNode.record", t, 200)
            tb.op("CUDAGraphNode.record (dynamo_timed)", t + 1, 198)
        tb.launch("triton_poi_fused_relu_0", host=(t + 300, 10), device=(t + 320, 500), api="cudaGraphLaunch")
    report, facts = analyze(tb, tmp_path)
    v = facts.values
    assert [s["phase"] for s in report["steps"]] == ["warmup", "steady", "compile", "steady"]
    assert (v["cudagraph_records"], v["cudagraph_records_after_warmup"], v["cudagraph_launches_per_step"]) == (2, 1, 1.0)
    assert v["compile_after_warmup_us_per_step"] == 50.0  # 200 µs over 4 recorded steps
    f = fired(report)["compile-in-steady-state"]
    assert "CUDA graph trees recorded 1 graph again" in f["message"]


def test_renderers_know_which_forecasts_are_not_replays(tmp_path):
    """report/present.py names the window models without importing them (renderers stay light)."""
    from perfsleuth.analysis.forecast.models.compile import WINDOW_MODELS
    from perfsleuth.report.present import COMPILE_MODELS
    from perfsleuth.render.terminal import render_terminal

    assert set(COMPILE_MODELS) == set(WINDOW_MODELS) - {"graph-break-free"}  # the one that never has a number
    tb = RuleTraceBuilder(device=False)
    varying(tb)
    text = render_terminal(analyze_file(tb.write(tmp_path / "t.json.gz")).to_dict())
    assert "torch.compile's fixes: the recorded steps, compiling ones included, without the time the fix removes" in text
