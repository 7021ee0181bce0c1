"""exposed-communication and step-outliers; a healthy trace gets no finding above low severity."""

import statistics

import pytest
from tracebuilder_rules import PINNED_HTOD, RuleTraceBuilder, analyze, fired, rated, rule_severity

BF16 = ["c10::BFloat16", "c10::BFloat16"]


def comm_trace(exposed_us: float, hidden_us: float = 0.0) -> RuleTraceBuilder:
    """1000 µs steps: compute [10, 500); an all-reduce on stream 20 runs `hidden_us` under the compute
    and `exposed_us` after it."""
    tb = RuleTraceBuilder(world_size=8)
    for i in range(2):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        tb.launch("fwd_gemm", host=(t0, 5), device=(t0 + 10, 490))
        corr = tb._next_corr()
        tb.runtime("cudaLaunchKernel", t0 + 6, 3, corr=corr)
        tb.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                  t0 + 500 - hidden_us, hidden_us + exposed_us, corr=corr, stream=20)
    return tb


@pytest.mark.parametrize("exposed_us, fires", [(100, True), (99, False)])
def test_exposed_communication_min_share(tmp_path, exposed_us, fires):
    report, facts = analyze(comm_trace(exposed_us, hidden_us=100), tmp_path)
    assert facts["communication_share"] == exposed_us / 1000
    assert facts["comm_kernel_us_per_step"] == exposed_us + 100
    assert facts["comm_exposed_fraction"] == round(exposed_us / (exposed_us + 100), 4)
    assert facts["world_size"] == 8
    assert ("exposed-communication" in fired(report)) is fires
    if fires:
        f = fired(report)["exposed-communication"]
        assert rule_severity("exposed-communication", facts) == "medium" and rated(f, "medium")
        assert f["ceiling"]["saving_us"] == exposed_us
        assert "bucket_cap_mb" in f["fix"] and "no_sync()" in f["fix"]
        assert "50.0% of all collective time is exposed (8 ranks)" in f["message"]


def test_exposed_communication_high(tmp_path):
    """The rule says high (30% of the step); it has no forecast model, so its finding shows medium."""
    report, facts = analyze(comm_trace(300), tmp_path)
    f = fired(report)["exposed-communication"]
    assert rule_severity("exposed-communication", facts) == "high"
    assert (f["severity"], f["severity_from"], f["forecast"]["speedup"]) == ("medium", "rule", None)


def steps_trace(durations: list) -> RuleTraceBuilder:
    tb = RuleTraceBuilder()
    t0 = 0.0
    for i, d in enumerate(durations):
        tb.step(i + 1, t0, d)
        tb.launch("k", host=(t0, 5), device=(t0 + 10, d - 20))
        t0 += d
    return tb


@pytest.mark.parametrize("durations, fires", [([1000, 1000, 1500], True), ([1000, 1000, 1490], False),
                                              ([1000, 3000], False)])
def test_step_outliers_thresholds(tmp_path, durations, fires):
    report, facts = analyze(steps_trace(durations), tmp_path)
    assert facts["steps"] == len(durations)
    assert facts["step_max_ratio"] == round(max(durations) / statistics.median(durations), 4)
    assert ("step-outliers" in fired(report)) is fires


def test_step_outliers_finding_later_step(tmp_path):
    report, facts = analyze(steps_trace([1000, 1000, 1500]), tmp_path)
    assert facts["step_slowest_index"] == 2 and facts["step_excess_us_per_step"] == round(500 / 3, 3)
    f = fired(report)["step-outliers"]
    assert rule_severity("step-outliers", facts) == "low" and rated(f, "low") and f["category"] == "other"
    assert f["ceiling"]["saving_us"] == round(500 / 3, 3)
    assert "first profiled step" not in f["message"]
    # a program that does not compile hears nothing of torch.compile (issue 37)
    assert facts["compile_seen"] is False and "torch.compile" not in f["fix"] and "gc.freeze()" in f["fix"]


def test_step_outliers_first_step_is_warm_up(tmp_path):
    report, facts = analyze(steps_trace([3000, 1000, 1000]), tmp_path)
    f = fired(report)["step-outliers"]
    assert rule_severity("step-outliers", facts) == "medium" and rated(f, "medium")  # 3.0x the median
    assert "warm-up step at the start of the trace" in f["message"] and "schedule(wait=1, warmup=2, active=5)" in f["fix"]


def healthy_trace() -> RuleTraceBuilder:
    """Kernel-bound in bf16: pinned non-blocking copies, no syncs, a few long kernels, fused optimizer."""
    tb = RuleTraceBuilder()
    for i in range(4):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        tb.copy(PINNED_HTOD, host=(t0, 4), device=(t0 + 5, 20), nbytes=1 << 20)
        for j in range(3):
            tb.typed_launch("aten::mm", BF16, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", host=(t0 + 5 + j * 8, 6),
                            device=(t0 + 25 + j * 320, 320))
        tb.annotation("Optimizer.step#FusedAdamW.step", t0 + 40, 20)
        tb.launch("fused_adamw_kernel", host=(t0 + 45, 5), device=(t0 + 985, 10))
    return tb


def test_healthy_trace_has_no_finding(tmp_path):
    report, facts = analyze(healthy_trace(), tmp_path)
    assert report["verdict"] == "kernel-bound"
    assert facts["gemm_reduced_share"] == 1.0 and facts["h2d_pinned_copies_per_step"] == 1.0
    assert facts["sync_item_calls_per_step"] == 0.0 and facts["h2d_pinned_blocking_copies_per_step"] == 0.0
    assert report["findings"] == []
