"""A forecast on a run that the profiler slowed beyond its noise (analysis/measurement.py) says that its saving
and its step after the fix are the profiled program's (a fused-optimizer finding's "step after the fix: 49.58 ms"
stood beside a 16.75 ms unprofiled step, with nothing to say which). The loop-batching forecast, which takes the
profiler's cost out itself, states its own scale instead."""

from __future__ import annotations

from perfsleuth.analysis.measurement import measure
from perfsleuth.facts.forecasting import distortion
from test_forecast import cpu_step_trace, forecaster, full
from test_measurement_noise import STEPS, clock, window


def _zero_grad(tb, o, k):
    tb.annotation("Optimizer.zero_grad#SGD.zero_grad", o + 100, 200)
    for j in range(10):
        tb.op("aten::zero_", o + 110 + 19 * j, 4)


def test_only_a_distorted_run_on_a_quiet_machine_has_a_distortion():
    distorted = measure({"clock": clock(profiled=[20000.0, 20200.0, 19800.0])}, STEPS)
    assert distortion(distorted) == (20000.0, 10000.0)
    assert distortion(measure({"clock": clock()}, STEPS)) is None  # 1.10x: within what the rule allows
    busy = measure({"clock": clock(profiled=[20000.0, 20200.0, 19800.0]), **window(1.5)}, STEPS)
    assert busy["busy"] is True and distortion(busy) is None  # the load, not the profiler: said as such
    assert distortion(None) is None


def test_a_forecast_on_a_distorted_run_says_its_numbers_are_the_profiled_programs(tmp_path):
    f = forecaster(cpu_step_trace(tmp_path, _zero_grad))
    plain = f.forecast("zero-grad-none")
    assert "profiled_step" not in plain["assumptions"]
    f = forecaster(cpu_step_trace(tmp_path, _zero_grad))
    f.distortion = (2960.0, 1000.0)
    fc = f.forecast("zero-grad-none")
    assert (fc["speedup"], fc["saving_us"], fc["step_us"]) == (plain["speedup"], plain["saving_us"], plain["step_us"])
    assert fc["assumptions"]["profiled_step"] == (
        "the saving and the step after the fix are the profiled program's: profiling slowed the steps 2.96x "
        "(2.96 ms, 1.00 ms without it, measured); the ratio carries over as far as what the fix removes was slowed "
        "as much as the rest of the step (waits are not slowed: removing them is worth more without the profiler)")


def test_the_engines_forecaster_reads_the_distortion_from_the_runs_clock(tmp_path):
    trace = cpu_step_trace(tmp_path, _zero_grad)
    names = ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    trace.run_metadata = {"clock": {"unit": "us", "unprofiled_us": [500.0, 505.0, 495.0, 500.0],
                                    "after_us": [500.0, 500.0, 505.0, 495.0],
                                    "profiled_us": [1000.0, 1000.0, 1000.0], "profiled_steps": names}}
    assert full(trace).distortion == (1000.0, 500.0)


def test_a_step_whose_only_loop_is_the_optimizers_says_what_a_loop_is(tmp_path):
    """Only Optimizer.step's per-parameter ops form a loop: no batching forecast, and the reason says that only
    such loops were found and what counts as one (an unseen per-head attention program's loop went unfound in
    slower recordings, and the old reason read as a statement about the program)."""
    def body(tb, o, k):
        tb.annotation("Optimizer.step#SGD.step", o + 100, 500)
        for j in range(40):
            tb.op("aten::mul_" if j % 2 else "aten::add_", o + 105 + 10 * j, 3)
    fc = forecaster(cpu_step_trace(tmp_path, body)).forecast("batched-ops")
    assert fc["kind"] == "none" and fc["reason"] == (
        "the only loops of short ops found are the optimizer's per-parameter updates: a foreach optimizer is their "
        "fix (foreach-optimizer forecasts it). A loop is 16 or more ops in a row of kinds whose median call is under "
        "50 µs (200 µs where its arithmetic would take under 50 at the machine's measured ceilings); a slower kind "
        "ends it, so a loop of ops near that time can go unfound in a slower recording")


def test_a_reason_without_a_loop_names_the_repeated_kinds_too_long_for_one(tmp_path):
    """The step above and, after the optimizer, 8 linears of 55 µs a step and 4 convolutions of 60 (a large-expert
    MoE's matmuls, issue 39 ninth round: the reason had spoken only of the optimizer): the reason ends with the
    kinds a step repeats 8 times or more that are too long for a loop's short op; the 4 a step are not named."""
    def body(tb, o, k):
        tb.annotation("Optimizer.step#SGD.step", o + 100, 400)
        for j in range(40):
            tb.op("aten::mul_" if j % 2 else "aten::add_", o + 105 + 10 * j, 3)
        for j in range(8):
            tb.op("aten::linear", o + 510 + 58 * j, 55)
        for j in range(4):
            tb.op("aten::conv2d", o + 1000 + 70 * j, 60)  # too long, but 4 a step
    fc = forecaster(cpu_step_trace(tmp_path, body, period=2000)).forecast("batched-ops")
    assert fc["kind"] == "none" and fc["reason"].endswith(
        "a slower kind ends it, so a loop of ops near that time can go unfound in a slower recording; the kinds the "
        "steps repeat that run too long for a loop's short op: aten::linear (8 a step, median 55 µs)")
