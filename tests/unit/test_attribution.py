"""Unit truth: hand-built traces with exact expected microseconds per category per step."""

import pytest
from perfsleuth.analysis.attribution import CATEGORIES
from perfsleuth.api import analyze_file
from tracebuilder import TraceBuilder

PAGEABLE_HTOD = "Memcpy HtoD (Pageable -> Device)"


def breakdown(tb: TraceBuilder, tmp_path) -> list[dict]:
    report = analyze_file(tb.write(tmp_path / "t.json.gz")).to_dict()
    for st in report["steps"]:
        assert sum(st["time_us"].values()) == pytest.approx(st["duration_us"], abs=1e-6)
    return report["steps"]


def only(**cats) -> dict:
    return {c: float(cats.get(c, 0.0)) for c in CATEGORIES}


def test_kernel_and_host(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.op("aten::mm", 2, 6)
    tb.launch("ampere_sgemm_128x64_tn", host=(5, 3), device=(10, 50))
    (step,) = breakdown(tb, tmp_path)
    assert step["name"] == "ProfilerStep#1"
    assert step["duration_us"] == 100.0
    assert step["time_us"] == only(kernel=50, host=50)


def test_memcpy_under_a_kernel_is_kernel_time(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k", host=(1, 2), device=(10, 50))
    tb.copy("Memcpy HtoD (Pinned -> Device)", host=(3, 2), device=(40, 40))  # [40, 80): 20 us exposed
    (step,) = breakdown(tb, tmp_path)
    assert step["time_us"] == only(kernel=50, transfer=20, host=30)


def test_sync_then_drain_bubble(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 200)
    tb.launch("k1", host=(0, 5), device=(10, 90))  # device busy [10, 100)
    tb.runtime("cudaStreamSynchronize", 20, 80)  # host blocked [20, 100)
    tb.launch("k2", host=(130, 5), device=(140, 40))  # next kernel only at 140: drain [100, 140)
    (step,) = breakdown(tb, tmp_path)
    assert step["time_us"] == only(kernel=130, sync=40, host=30)


def test_item_on_gpu_is_sync(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k1", host=(0, 5), device=(10, 30))  # [10, 40)
    tb.op("aten::item", 20, 40)  # [20, 60): waits for k1, then copies 4 bytes
    tb.op("aten::_local_scalar_dense", 21, 38)
    tb.copy("Memcpy DtoH (Device -> Pageable)", host=(22, 36), device=(41, 1), nbytes=4)  # [41, 42)
    tb.launch("k2", host=(70, 5), device=(80, 10))  # drain after item: [60, 80)
    (step,) = breakdown(tb, tmp_path)
    # [0,10) host, [10,40) kernel, [40,41) sync, [41,42) transfer, [42,60) sync, [60,80) drain=sync,
    # [80,90) kernel, [90,100) host
    assert step["time_us"] == only(kernel=40, sync=39, transfer=1, host=20)


def test_pageable_copy_blocks_the_host(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.copy(PAGEABLE_HTOD, host=(10, 40), device=(30, 15), nbytes=1 << 20)  # host blocked [10, 50)
    tb.launch("k", host=(52, 3), device=(60, 30))
    (step,) = breakdown(tb, tmp_path)
    assert step["time_us"] == only(kernel=30, transfer=40, host=30)


def test_exposed_collective_is_communication(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
              host=(1, 2), device=(10, 40), api="cudaLaunchKernelExC")
    tb.launch("k", host=(4, 2), device=(40, 30))  # overlaps the collective on [40, 50)
    (step,) = breakdown(tb, tmp_path)
    assert step["time_us"] == only(kernel=30, communication=30, host=40)


def test_dataloader_fetch_while_device_runs_previous_step(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k1", host=(90, 5), device=(95, 85))  # step 1's kernel runs until 180
    tb.step(2, 100, 200)
    tb.dataloader(100, 150)  # [100, 250): the first 80 us hide behind k1
    tb.launch("k2", host=(255, 5), device=(262, 28))
    s1, s2 = breakdown(tb, tmp_path)
    assert (s1["start_us"], s1["duration_us"]) == (0.0, 180.0)  # extended to the end of k1
    assert s1["time_us"] == only(kernel=85, host=95)
    assert (s2["start_us"], s2["duration_us"]) == (180.0, 120.0)  # starts where step 1 ends
    assert s2["time_us"] == only(dataloader=70, kernel=28, host=22)


def test_cpu_only_trace(tmp_path):
    tb = TraceBuilder(device=False, rank=None)
    tb.step(1, 0, 100)
    tb.dataloader(0, 30)
    tb.op("aten::stack", 20, 10)  # collate inside the fetch is data loading, not compute
    tb.op("aten::mm", 40, 40)
    tb.op("aten::item", 85, 1)  # costs nothing on CPU: compute, never sync
    report = analyze_file(tb.write(tmp_path / "cpu.json")).to_dict()
    (step,) = report["steps"]
    assert step["time_us"] == only(dataloader=30, kernel=41, host=29)
    assert report["trace"]["device_type"] == "cpu"
    assert report["summary"]["device_busy"] is None


def test_optimizer_step_fallback(tmp_path):
    tb = TraceBuilder()
    tb.op("aten::mm", 0, 10)
    tb.annotation("Optimizer.step#SGD.step", 40, 10)
    tb.annotation("Optimizer.step#SGD.step", 90, 10)
    tb.launch("k", host=(60, 5), device=(70, 10))
    report = analyze_file(tb.write(tmp_path / "t.json")).to_dict()
    assert report["steps_source"] == "Optimizer.step"
    assert [(s["start_us"], s["duration_us"]) for s in report["steps"]] == [(0.0, 50.0), (50.0, 50.0)]
    assert any("Optimizer.step" in w for w in report["warnings"])


def test_whole_trace_fallback_without_steps(tmp_path):
    tb = TraceBuilder()
    tb.op("aten::mm", 0, 10)
    tb.launch("k", host=(2, 3), device=(20, 30))
    tb.op("aten::add", 60, 10)
    report = analyze_file(tb.write(tmp_path / "t.json")).to_dict()
    assert report["steps_source"] == "whole-trace"
    (step,) = report["steps"]
    # [0,10) host op (launch inside), [10,20) nothing on the host, [20,50) kernel, [50,60) nothing, [60,70) host
    assert step["time_us"] == only(kernel=30, host=20, other=20)
    assert any("whole trace" in w for w in report["warnings"])


def test_summary_shares_and_device_busy(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k", host=(5, 3), device=(10, 50))
    tb.step(2, 100, 100)
    tb.launch("k", host=(101, 3), device=(105, 95))
    report = analyze_file(tb.write(tmp_path / "t.json")).to_dict()
    assert report["summary"]["time_share"]["kernel"] == 0.725
    assert report["summary"]["time_share"]["host"] == 0.275
    assert report["summary"]["device_busy"] == 0.725
    assert report["summary"]["step_time_us"] == {"median": 100.0, "mean": 100.0, "p90": 100.0}
    assert report["verdict"] == "kernel-bound"
