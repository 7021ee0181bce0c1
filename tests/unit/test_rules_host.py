"""cuda-graphs, fused-optimizer, zero-grad: launch-bound steps, per-parameter optimizers, zeroing grads."""

import pytest
from tracebuilder_rules import RuleTraceBuilder, analyze, fired, rated, rule_severity


def launch_bound_trace(kernels: int, kernel_us: float = 3.0, step_us: float = 1000.0) -> RuleTraceBuilder:
    """One step per trace pair: `kernels` short kernels launched every 9 µs; the device idles in between."""
    tb = RuleTraceBuilder()
    for i in range(2):
        t0 = i * step_us
        tb.step(i + 1, t0, step_us)
        for k in range(kernels):
            tb.launch("void elementwise_kernel<float>", host=(t0 + k * 9, 4), device=(t0 + k * 9 + 5, kernel_us))
    return tb


@pytest.mark.parametrize("kernels, fires", [(100, True), (99, False)])
def test_cuda_graphs_min_kernels_per_step(tmp_path, kernels, fires):
    report, facts = analyze(launch_bound_trace(kernels), tmp_path)
    assert facts["kernels_per_step"] == kernels
    assert facts["kernel_median_us"] == 3.0 and facts["short_kernel_share"] == 1.0
    assert facts["host_share"] == round(1 - kernels * 3 / 1000, 4)
    assert ("cuda-graphs" in fired(report)) is fires


@pytest.mark.parametrize("kernel_us, fires", [(6.5, True), (20.0, True), (20.5, False)])
def test_cuda_graphs_max_kernel_median(tmp_path, kernel_us, fires):
    report, facts = analyze(launch_bound_trace(100, kernel_us=kernel_us, step_us=3000), tmp_path)
    assert facts["kernel_median_us"] == kernel_us
    assert ("cuda-graphs" in fired(report)) is fires


def test_cuda_graphs_finding(tmp_path):
    report, facts = analyze(launch_bound_trace(100), tmp_path)
    f = fired(report)["cuda-graphs"]
    assert rule_severity("cuda-graphs", facts) == "high" and rated(f, "high")  # host share 0.7 >= 0.5
    assert f["ceiling"]["saving_us"] == 700.0 and f["ceiling"]["speedup"] == round(1000 / 300, 3)
    assert 'torch.compile(MyModel().cuda(), mode="reduce-overhead")' in f["fix"]
    assert f["category"] == "host"


def test_cuda_graphs_needs_a_host_bound_step(tmp_path):
    report, facts = analyze(launch_bound_trace(100, kernel_us=7.0, step_us=1000), tmp_path)
    assert facts["host_share"] == 0.3  # 100 x 7 µs of kernels in 1000 µs
    assert "cuda-graphs" in fired(report)
    report, facts = analyze(launch_bound_trace(100, kernel_us=7.1, step_us=1000), tmp_path, name="b.json")
    assert facts["host_share"] == 0.29
    assert "cuda-graphs" not in fired(report)


def optimizer_trace(kernels: int, foreach: bool = False, name: str = "SGD") -> RuleTraceBuilder:
    tb = RuleTraceBuilder()
    for i in range(2):
        t0 = i * 2000
        tb.step(i + 1, t0, 2000)
        tb.launch("fwd", host=(t0, 5), device=(t0 + 10, 500))
        tb.annotation(f"Optimizer.step#{name}.step", t0 + 600, kernels * 10 + 10)
        if foreach:
            tb.op("aten::_foreach_add_", t0 + 601, kernels * 10)
        for k in range(kernels):
            tb.launch("void add_kernel<float>", host=(t0 + 602 + k * 10, 4), device=(t0 + 607 + k * 10, 2))
    return tb


@pytest.mark.parametrize("kernels, fires", [(50, True), (49, False)])
def test_fused_optimizer_min_kernels(tmp_path, kernels, fires):
    report, facts = analyze(optimizer_trace(kernels), tmp_path)
    assert facts["optimizer_name"] == "SGD" and facts["optimizer_fused"] is False
    assert facts["optimizer_kernels_per_step"] == kernels
    assert facts["optimizer_us_per_step"] == kernels * 10 + 10
    assert ("fused-optimizer" in fired(report)) is fires
    if fires:
        f = fired(report)["fused-optimizer"]
        assert "torch.optim.SGD(model.parameters(), lr=1e-3, fused=True)" in f["fix"]
        assert f["ceiling"]["saving_us"] == 408.0  # 0.8 of 510 µs
        assert rule_severity("fused-optimizer", facts) == "medium" and rated(f, "medium")  # 510 µs of 2000


@pytest.mark.parametrize("foreach, name", [(True, "SGD"), (False, "FusedAdam")])
def test_fused_or_foreach_optimizers_are_fine(tmp_path, foreach, name):
    report, facts = analyze(optimizer_trace(80, foreach=foreach, name=name), tmp_path)
    assert facts["optimizer_fused"] is True
    assert "fused-optimizer" not in fired(report)


def zero_grad_trace(fills: int, steps: int = 2) -> RuleTraceBuilder:
    tb = RuleTraceBuilder()
    for i in range(steps):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        tb.annotation("Optimizer.zero_grad#SGD.zero_grad", t0 + 1, 60)
        for k in range(fills if i == 0 else fills // 2):
            tb.op("aten::zero_", t0 + 2 + k * 20, 15)
            tb.op("aten::fill_", t0 + 3 + k * 20, 13)
            tb.memset(t0 + 100 + k * 5, 2, host=(t0 + 4 + k * 20, 10))
        tb.launch("fwd", host=(t0 + 70, 5), device=(t0 + 200, 700))
    return tb


@pytest.mark.parametrize("fills, fires", [(2, True), (1, False)])
def test_zero_grad_min_fill_ops(tmp_path, fills, fires):
    """Step 1 zeroes `fills` gradients, step 2 half as many: 1.5 or 0.5 fills per step."""
    report, facts = analyze(zero_grad_trace(fills), tmp_path)
    assert facts["zero_grad_calls_per_step"] == 1.0
    assert facts["zero_grad_fill_ops_per_step"] == (fills + fills // 2) / 2
    assert facts["zero_grad_us_per_step"] == 60.0
    assert facts["zero_grad_device_us_per_step"] == (fills + fills // 2) * 2 / 2
    assert ("zero-grad" in fired(report)) is fires
    if fires:
        f = fired(report)["zero-grad"]
        assert rule_severity("zero-grad", facts) == "medium" and rated(f, "medium")  # 60 µs of 1000 >= 0.02
        assert "zero_grad(set_to_none=True)" in f["fix"] and f["ceiling"]["saving_us"] == 60.0
