"""issue 28: device activity perfsleuth used to misread. MTIA's device events are read like kernels (device named);
a trace that launches device work but holds none of it (the CUPTI range profiler) says which device it did not
read and gets no verdict from host op time; a memory timeline is named; huge timestamps' rounding is no overlap.
HTA's own test traces: fixtures/traces/hta/README.md."""

import json
from pathlib import Path

import pytest
from perfsleuth.api import analyze_trace
from perfsleuth.errors import TraceError
from perfsleuth.trace.model import KERNEL, MEMCPY, OTHER, load_trace
from tracebuilder import TraceBuilder

HTA = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "hta"
MTIA_INFERENCE = HTA / "mtia_inference_trace" / "mtia_inference_rank_0.json.gz"
CUPTI_RANGES = HTA / "cupti_profiler" / "benchmark_result_924719_1679055439_trace.json.gz"
HOST, DEVICE = 1000, 9


def _mtia_trace(path: Path) -> Path:
    """Three 100 µs steps; in each a 50 µs MTIA kernel launched by runFunction, a 10 µs DMA copy and a 20 µs
    stream wait (no work) on the device."""
    ev = [{"ph": "M", "name": "process_name", "pid": DEVICE, "tid": 0, "args": {"name": "MTIA 9"}}]
    for i in range(3):
        t = 100.0 * i

        def x(cat, name, ts, dur, pid=HOST, tid=HOST, **args):
            ev.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": t + ts, "dur": dur,
                       "args": args})

        x("user_annotation", f"ProfilerStep#{i + 1}", 0, 100.0)
        x("mtia_runtime", "runFunction - job_prep_and_submit_for_execution", 5, 3.0, correlation=10 + i)
        x("mtia_ccp_events", "add-dtype_Float", 10, 50.0, pid=DEVICE, tid=4, correlation=10 + i, stream=1)
        x("mtia_ccp_events", "dma_request", 60, 10.0, pid=DEVICE, tid=801, direction="DEVICE_TO_HOST", size=4096)
        x("mtia_ccp_events", "event_wait", 70, 20.0, pid=DEVICE, tid=5, stream=2)
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_mtia_device_events_are_attributed_like_kernels(tmp_path):
    trace = load_trace(_mtia_trace(tmp_path / "mtia.json"))
    assert (trace.device_type, trace.device_name, trace.unread_device) == ("mtia", "MTIA", None)
    report = analyze_trace(trace).to_dict()
    assert [s["time_us"] for s in report["steps"]] == [
        {"dataloader": 0.0, "kernel": 50.0, "sync": 0.0, "transfer": 10.0, "host": 40.0, "communication": 0.0,
         "other": 0.0}] * 3  # the DMA request is a copy; the stream wait is no device work
    assert report["verdict"] == "host-bound" and "kernels 50%" in report["verdict_text"]
    assert report["trace"]["device"] == "MTIA" and report["trace"]["device_type"] == "mtia"


def test_htas_mtia_inference_trace_is_read_with_its_device():
    """It was 'no device activity' though it holds 1,313 MTIA device events."""
    trace = load_trace(MTIA_INFERENCE)
    assert (trace.device_type, trace.device_name) == ("mtia", "ARTEMIS")
    assert trace.device_categories == {"mtia_ccp_events": 1313}
    kinds = trace.events["kind"].value_counts().to_dict()
    assert kinds[MEMCPY] == 877  # dma_request
    assert int(((trace.events["kind"] == KERNEL) & trace.events["name"].isin(["pe_exe", "remote", "merge"])).sum()) \
        == 24 + 37 + 36
    assert int(((trace.events["kind"] == OTHER) & trace.events["name"].isin(["event_record", "event_wait"])).sum()) \
        == 291 + 48
    report = analyze_trace(trace).to_dict()
    assert not [w for w in report["warnings"] if "no device activity" in w]
    assert report["verdict"] != "device-unread" and report["summary"]["time_share"]["kernel"] > 0.5


def test_cupti_range_profiler_trace_gets_no_verdict_from_cpu_op_time():
    """It was 'kernel-bound: ops compute 99%', with no warning: the trace has no kernel at all."""
    trace = load_trace(CUPTI_RANGES)
    assert trace.device_type == "cuda" and trace.device_categories == {"cuda_profiler_range": 77}
    report = analyze_trace(trace).to_dict()
    assert report["verdict"] == "device-unread" and report["degree"] is None
    assert report["verdict_reason"].startswith("the trace launches work on NVIDIA A100-PG509-200 (104 launch and "
                                               "copy calls) but holds none of the device's activity; it holds 77 "
                                               "CUPTI profiler ranges (cuda_profiler_range)")
    assert "no verdict is drawn from host op time" in report["verdict_reason"]
    assert report["verdict_text"].startswith("device-unread: the device's activity is not in the trace")


def test_launches_without_any_device_event_are_said(tmp_path):
    tb = TraceBuilder()
    for i in range(3):
        tb.step(i + 1, 100 * i, 100)
        tb.op("aten::mm", 100 * i + 2, 90)
        tb.runtime("cudaLaunchKernel", 100 * i + 5, 4, corr=500 + i)
    report = analyze_trace(load_trace(tb.write(tmp_path / "t.json"))).to_dict()
    assert report["verdict"] == "device-unread"
    assert "(3 launch and copy calls) but holds none of the device's activity:" in report["verdict_reason"]


def test_a_cpu_trace_and_a_gpu_trace_are_as_before(tmp_path):
    cpu = TraceBuilder(device=False)
    gpu = TraceBuilder()
    for i in range(3):
        cpu.step(i + 1, 100 * i, 100)
        cpu.op("aten::mm", 100 * i + 2, 90)
        gpu.step(i + 1, 100 * i, 100)
        gpu.launch("volta_sgemm_128x64_nn", host=(100 * i + 5, 3), device=(100 * i + 10, 80))
    for tb, device_type, verdict in ((cpu, "cpu", "kernel-bound"), (gpu, "cuda", "kernel-bound")):
        trace = load_trace(tb.write(tmp_path / f"{device_type}.json"))
        assert (trace.device_type, trace.unread_device, trace.device_categories) == (device_type, None, {})
        assert analyze_trace(trace).verdict == verdict


def test_a_memory_timeline_is_named_not_misread():
    with pytest.raises(TraceError) as err:
        load_trace(HTA / "memory_analysis" / "memory_timeline.raw.gz")
    assert str(err.value).endswith("not a PyTorch profiler trace: a JSON list of lists, as in torch.profiler's memory "
                                   "timeline (export_memory_timeline's .raw.gz: [time, action, bytes, category] rows)")


def test_timestamps_whose_rounding_is_coarse_are_said_and_not_called_overlaps(tmp_path):
    """Around 1e17 µs a double resolves 16 µs: 103 µs steps back to back read as overlapping."""
    tb = TraceBuilder(device=False)
    for i in range(6):
        tb.step(i + 1, 1e17 + i * 103.0, 103.0)
        tb.op("aten::mm", 1e17 + i * 103.0 + 5, 90.0)
    trace = load_trace(tb.write(tmp_path / "t.json"))
    assert trace.time_resolution_ns == 16_000
    report = analyze_trace(trace).to_dict()
    assert "timestamps around 1e+17 µs are resolved to only 16 µs as read (double precision): durations and gaps " \
           "shorter than that are not exact" in report["warnings"]
    assert not [w for w in report["warnings"] if "overlap" in w]
    near_epoch = TraceBuilder(device=False)  # Kineto's own µs since the epoch: 0.25 µs, nothing said
    for i in range(3):
        near_epoch.step(i + 1, 1.7e15 + i * 100.0, 100.0)
    trace = load_trace(near_epoch.write(tmp_path / "e.json"))
    assert trace.time_resolution_ns == 250 and not [w for w in trace.warnings if "resolved" in w]
