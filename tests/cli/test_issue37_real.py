"""Issue 37 through the real CLI on the real traces it was found on (TraceLens's and HTA's test data, kept in
fixtures/traces/tracelens/ and fixtures/traces/hta/ with their licences): the headline is earned, and what the
data cannot show is said."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from conftest import ROOT
from perfsleuth.cli.main import main

TRACES = ROOT / "fixtures" / "traces"
FIRST_CALLS = TRACES / "tracelens" / "normalization_layer_test.json.gz"
CAPTURE = TRACES / "tracelens" / "sglang_capture_bs_32_rank0.no_python.json.gz"
HOST_OPS_ONLY = TRACES / "hta" / "distributed_info_unavailable" / "distributed_info_not_found.json.gz"
CUPTI_RANGES = TRACES / "hta" / "cupti_profiler" / "benchmark_result_924719_1679055439_trace.json.gz"
MTIA = TRACES / "hta" / "mtia_inference_trace" / "mtia_inference_rank_0.json.gz"


def analyze(path, tmp_path, *more) -> tuple[str, dict, str, str]:
    out = tmp_path / "out"
    run = CliRunner().invoke(main, ["analyze", str(path), "-o", str(out), *more])
    assert run.exit_code == 0, run.output
    report = json.loads((out / "report.json").read_text())
    return run.output, report, (out / "summary.md").read_text(), (out / "report.html").read_text()


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_a_first_call_trace_leads_with_first_calls_and_gets_no_cuda_graphs(tmp_path):
    """It got `[medium] cuda-graphs` and "(no reliable forecast: no reliable forecast: ...)"."""
    text, report, md, html = analyze(FIRST_CALLS, tmp_path)
    rules = [f["rule"] for f in report["findings"]]
    assert rules[0] == "first-calls" and "cuda-graphs" not in rules and "tiny-ops" not in rules
    assert "no reliable forecast: no reliable forecast" not in text + md + html
    assert "\n  [medium] first-calls: The trace records first calls (start-up), not steady steps  (no forecast)" in text
    assert "**Top finding:** The trace records first calls (start-up), not steady steps" in md
    assert "  the trace records first calls (start-up), not steady steps: this verdict describes start-up " \
           "(first-calls)" in text
    f = report["findings"][0]
    assert f["evidence"]["first_call_share"] >= 0.9 and f["evidence"]["step_source"] == "whole-trace"


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_a_graph_capture_is_device_unread(tmp_path):
    """It got HOST-BOUND (high) 100 % and tiny-ops."""
    text, report, md, _ = analyze(CAPTURE, tmp_path)
    assert report["verdict"] == "device-unread"
    assert report["verdict_reason"].startswith(
        "the trace records a HIP graph capture on AMD Instinct MI300X (1 capture begun, next to no "
        "device time)")
    assert "tiny-ops" not in [f["rule"] for f in report["findings"]]
    assert "findings (none is the top one: no finding buys more than 5 %):" in text
    assert "**Top finding:** none (no finding buys more than 5 %)" in md


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_gpu_traces_without_device_activity_do_not_call_op_time_kernel(tmp_path):
    """distributed_info_not_found got HOST-BOUND (high) and "device: A100 (cpu)"; the CUPTI range profiler trace's
    DEVICE-UNREAD sat under a table that said `kernel 98.9 %`."""
    for path, name in ((HOST_OPS_ONLY, "a"), (CUPTI_RANGES, "b")):
        text, report, _, _ = analyze(path, tmp_path / name)
        assert report["verdict"] == "device-unread" and "\nverdict: DEVICE-UNREAD" in text
        assert report["summary"]["time_share"]["kernel"] == 0.0 and re.search(r"^kernel +0\.0% ", text, re.M)
        assert "(device-unread: the device's time is not in the trace; the host's op time is counted as host)" in text
        assert "CPU-only trace" not in text
    assert report["summary"]["time_share"]["host"] == 1.0  # the CUPTI trace: all of it host time, none `kernel`


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_an_mtia_is_never_called_the_gpu(tmp_path):
    text, report, md, html = analyze(MTIA, tmp_path)
    assert report["trace"]["device_type"] == "mtia"
    for said in (text, md, json.dumps(report)):
        assert "the GPU" not in said and "The GPU" not in said
