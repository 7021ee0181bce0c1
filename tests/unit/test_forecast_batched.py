"""The batched-ops forecast over the whole step (issue 39), on hand-built traces with the numbers worked out
by hand: the forward loop, its backward nodes whatever their time, the gradient accumulation of the parameters
batching merges, zero_grad's and the optimizer's per-parameter work for them; what the rewrite adds; and a
sequential chain that stays without a batching forecast."""

from __future__ import annotations

from perfsleuth.analysis.loops import SEQUENTIAL
from test_forecast import cpu_step_trace, forecaster
from test_forecast_caps import loop

BWD = "autograd::engine::evaluate_function: "
ACC = f"{BWD}torch::autograd::AccumulateGrad"


def test_a_chain_with_an_optimizer_loop_stays_without_a_batching_forecast(tmp_path):
    """48 small sequential layers (LayerNorm + Linear: 96 ops forward, 144 backward nodes with 48 x 2
    AccumulateGrads), and an SGD step whose per-parameter add_ ops form a loop of their own: no cat/stack, no
    slice, no comprehension anywhere. The optimizer's loop is no evidence, the accumulations neither: no
    forecast, the reason says to fuse."""
    def body(tb, o, k):
        loop(tb, o, kinds=("aten::layer_norm", "aten::linear"), n=96, at=20)
        loop(tb, o, kinds=(f"{BWD}AddmmBackward0", f"{BWD}NativeLayerNormBackward0", ACC, ACC), n=192, at=1100)
        tb.annotation("Optimizer.step#SGD.step", o + 3100, 1000)
        loop(tb, o, kinds=("aten::add_",), n=96, at=3105)
    fc = forecaster(cpu_step_trace(tmp_path, body, period=5000)).forecast("batched-ops")
    assert (fc["kind"], fc["reason"]) == ("none", SEQUENTIAL)


def grouped_step(tb, o, k, acc=False):
    """One step (4000 µs) of a loop over 24 small Linear layers, each on a slice: forward 48 ops of 3 µs,
    10 µs apart, from 107 µs (select, linear); the stack of their outputs (587 µs, 30 µs); an mm (627 µs,
    20 µs); StackBackward0 (760 µs, 30 µs); then the loop's backward from 797 µs, 24 iterations 87 µs apart:
    AddmmBackward0 of 60 µs (longer than a short op), 7 µs later TBackward0 (3 µs), 7 µs later
    SelectBackward0 (3 µs) -- with `acc`, then an AccumulateGrad (3 µs, 7 µs later) for the weight and one
    for the bias, each iteration 107 µs apart; then an add_ at 2960 µs (3500 µs with `acc`; 20 µs)."""
    loop(tb, o, kinds=("aten::select", "aten::linear"), n=48, at=107)
    tb.op("aten::stack", o + 587, 30)
    tb.op("aten::mm", o + 627, 20)
    tb.op(f"{BWD}StackBackward0", o + 760, 30)
    period = 107 if acc else 87
    for j in range(24):
        b = o + 797 + period * j
        tb.op(f"{BWD}AddmmBackward0", b, 60)
        tb.op(f"{BWD}TBackward0", b + 67, 3)
        tb.op(f"{BWD}SelectBackward0", b + 77, 3)
        if acc:
            tb.op(ACC, b + 87, 3)
            tb.op(ACC, b + 97, 3)
    tb.op("aten::add_", o + (3500 if acc else 2960), 20)


def test_the_loops_backward_goes_however_long_its_nodes(tmp_path):
    """AddmmBackward0 takes 60 µs, over the 50 µs of a short op: it cut the loop's backward into stretches of
    two nodes, which are no loop, and only the forward loop went. The backward repeats it once per
    iteration of the forward loop (24), so it is the loop's: the backward goes from the 7 µs after
    StackBackward0 to its last node (790-2878 µs: 2088 µs), with the forward loop (107-580 µs: 473 µs).
    Edges: 48 µs before the forward loop (1 µs per op), the 7 µs after it, and 72 µs of the 82 µs after the
    backward; the stack and StackBackward0 go (60 µs). In come 2 whole-tensor ops per kind (2 kinds forward,
    3 backward) at the median of the step's other ops with the Python before them (the mm 20 + 10 µs, the
    add_ 20 + 82 µs: 66 µs)."""
    fc = forecaster(cpu_step_trace(tmp_path, grouped_step, period=4000)).forecast("batched-ops")
    assert fc["speedup"] == round(4000 / (4000 - 473 - 2088 - (48 + 7 + 72) - 60 + 2 * (2 + 3) * 66), 3)
    assert fc["assumptions"]["loops"] == ("2.0 loops per step of 60 short ops (median): their ops and the "
                                          "Python between them go (2561 µs per step)")
