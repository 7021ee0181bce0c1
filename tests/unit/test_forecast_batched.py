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
