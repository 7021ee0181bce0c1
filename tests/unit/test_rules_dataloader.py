"""num-workers and dataloader-slow: fire just above min_share, stay silent just below."""

import pytest
from perfsleuth.report.numbers import severity_for
from tracebuilder_rules import MULTI_LOADER, SINGLE_LOADER, RuleTraceBuilder, analyze, fired, rule_severity


def loader_trace(wait_us: float, loader: str = SINGLE_LOADER, steps: int = 2) -> RuleTraceBuilder:
    """Steps of 1000 µs: the loader blocks `wait_us` with the device idle, then one kernel fills the rest."""
    tb = RuleTraceBuilder()
    for i in range(steps):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        tb.annotation(loader, t0, wait_us)
        tb.launch("k", host=(t0 + wait_us, 5), device=(t0 + wait_us + 10, 990 - wait_us))
    return tb


@pytest.mark.parametrize("wait_us, fires", [(51, True), (49, False)])
def test_num_workers_threshold(tmp_path, wait_us, fires):
    report, facts = analyze(loader_trace(wait_us), tmp_path)
    assert facts["dataloader_share"] == wait_us / 1000
    assert facts["dataloader_us_per_step"] == wait_us
    assert facts["dataloader_single_process"] is True and facts["dataloader_multi_process"] is False
    assert facts["dataloader_calls_per_step"] == 1.0
    assert ("num-workers" in fired(report)) is fires
    assert "dataloader-slow" not in fired(report)


def test_num_workers_finding(tmp_path):
    """51 µs of loading per 1000 µs step: the ceiling is those 51 µs; a worker's handoff (~0.3 ms per
    batch) costs more than it hides, so the forecast is a slowdown and the finding low."""
    report, facts = analyze(loader_trace(51), tmp_path)
    f = fired(report)["num-workers"]
    assert rule_severity("num-workers", facts) == "medium"
    assert f["forecast"]["speedup"] < 1.0 and (f["severity"], f["severity_from"]) == ("low", "forecast")
    assert f["category"] == "dataloader"
    assert f["ceiling"]["saving_us"] == 51.0
    assert f["ceiling"]["speedup"] == round(1000 / 949, 3)
    assert f["evidence"] == {"dataloader_share": 0.051, "dataloader_us_per_step": 51.0,
                             "dataloader_calls_per_step": 1.0, "step_us": 1000.0, "dataloader_workers_suggested": 4}
    # the snippet shows the worker count its forecast replays (cores unknown: 4, said in the forecast)
    assert "num_workers=4," in f["fix"] and "persistent_workers=True" in f["fix"]
    assert f["forecast"]["assumptions"]["workers"] == "num_workers=4 (was 0): cores unknown: 4"
    assert "prefetch_factor" in f["fix"] and "```python" in f["fix"]
    assert f["message"].startswith("The GPU waits 51 µs per step (5.1% of step time) while the training process")
    assert f["locations"] == []


def test_num_workers_high_severity_from_high_share(tmp_path):
    """The rule's own threshold (20% of the step); the finding's severity follows its forecast."""
    report, facts = analyze(loader_trace(200), tmp_path)
    f = fired(report)["num-workers"]
    assert rule_severity("num-workers", facts) == "high" and f["severity"] == severity_for(f["forecast"]["speedup"])
    assert rule_severity("num-workers", analyze(loader_trace(199), tmp_path, name="b.json")[1]) == "medium"


@pytest.mark.parametrize("wait_us, fires", [(51, True), (49, False)])
def test_dataloader_slow_for_multiprocess_loaders(tmp_path, wait_us, fires):
    report, facts = analyze(loader_trace(wait_us, MULTI_LOADER), tmp_path)
    assert facts["dataloader_multi_process"] is True and facts["dataloader_single_process"] is False
    assert ("dataloader-slow" in fired(report)) is fires
    assert "num-workers" not in fired(report)
    if fires:
        f = fired(report)["dataloader-slow"]
        assert "_MultiProcessingDataLoaderIter" in f["message"]
        assert "prefetch_factor=4" in f["fix"]


def test_no_loader_no_finding(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("k", host=(0, 5), device=(10, 990))
    report, facts = analyze(tb, tmp_path)
    assert facts["dataloader_share"] == 0.0 and facts["dataloader_calls_per_step"] == 0.0
    assert report["findings"] == []
