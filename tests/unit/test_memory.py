"""The memory section (analysis/memory/): exact numbers on hand-built traces with allocator events,
and the V100 trace in fixtures (its per-step peak, end-of-step level and capacity, and no leak)."""

from pathlib import Path

import pytest
from memorybuilder import MemoryTraceBuilder, leaky
from perfsleuth.config import MEMORY_UNAVAILABLE
from perfsleuth.trace.model import load_trace
from tracebuilder_rules import analyze

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "real"
GiB = 1 << 30


def device(report: dict) -> dict:
    return report["memory"]["devices"][0]


def test_leak_slope_per_step_peaks_and_what_keeps_it(tmp_path):
    report, facts = analyze(
        leaky(steps=4, leak=1000, temp=100, base=5000, capacity=1_000_000), tmp_path
    )
    d = device(report)
    assert report["memory"]["source"] == "trace" and report["memory_unavailable"] is None
    assert d["device"] == "cuda:0" and d["levels"] == "absolute"
    assert [s["step"] for s in d["steps"]] == [f"ProfilerStep#{i}" for i in range(1, 5)]
    assert [s["peak_allocated_bytes"] for s in d["steps"]] == [6100, 7100, 8100, 9100]
    assert [s["end_allocated_bytes"] for s in d["steps"]] == [6000, 7000, 8000, 9000]
    assert [(s["allocations"], s["allocated_bytes"], s["freed_bytes"]) for s in d["steps"]] == [
        (2, 1100, 100)
    ] * 4
    assert (d["growth_bytes_per_step"], d["growth_steps"], d["growth_monotone"]) == (1000, 4, True)
    assert (d["peak_allocated_bytes"], d["peak_step"], d["peak_at_us"]) == (
        9100,
        "ProfilerStep#4",
        342.0,
    )
    assert d["capacity_bytes"] == 1_000_000 and d["headroom_bytes"] == 1_000_000 - 9100
    assert d["steps_until_full"] == (1_000_000 - 9100) // 1000
    # the last step's allocation is not yet "kept": three steps' worth, all by aten::add
    assert d["kept_across_steps"] == [
        {"op": "aten::add", "bytes": 3000, "allocations": 3, "steps": 3}
    ]
    assert d["top_ops_at_peak"] == [
        {"op": "aten::add", "bytes": 4000, "allocations": 4},
        {"op": "aten::mm", "bytes": 100, "allocations": 1},
    ]
    assert d["allocated_before_window_bytes"] == 5000
    assert facts["memory_growth_bytes_per_step"] == 1000 and facts["memory_kept_op"] == "aten::add"


def test_clean_twin_has_no_growth_and_nothing_kept(tmp_path):
    report, facts = analyze(leaky(steps=4, leak=0, base=5000), tmp_path)
    d = device(report)
    assert [s["end_allocated_bytes"] for s in d["steps"]] == [5000] * 4
    assert [s["peak_allocated_bytes"] for s in d["steps"]] == [5100] * 4
    assert (d["growth_bytes_per_step"], d["growth_monotone"], d["kept_across_steps"]) == (
        0,
        False,
        [],
    )
    assert d["steps_until_full"] is None and facts["memory_steps_until_full"] == -1


def test_fragmentation_on_a_caching_allocator(tmp_path):
    tb = MemoryTraceBuilder(capacity=100_000, base=0, reserved=0)
    tb.step(1, 0, 100)
    tb.op("aten::empty", 10, 10)
    tb.alloc(11, 20_000, addr=1, reserve=50_000)  # the cache reserves 50,000 for it
    tb.op("aten::mul", 30, 10)
    tb.alloc(31, 10_000, addr=2)
    tb.free(50, addr=1)
    d = device(analyze(tb, tmp_path)[0])
    assert (d["peak_allocated_bytes"], d["peak_reserved_bytes"]) == (30_000, 50_000)
    assert d["fragmentation"] == {
        "peak_reserved_over_allocated": round(50_000 / 30_000, 4),
        "reserved_unused_at_peak_bytes": 20_000,
        "reserved_over_allocated_bytes": 20_000,
    }
    assert d["headroom_bytes"] == 100_000 - 50_000 and d["caching_allocator"] is True


def test_out_of_memory_names_the_op(tmp_path):
    tb = MemoryTraceBuilder(capacity=100_000)
    tb.step(1, 0, 100)
    tb.op("aten::linear", 5, 50)
    tb.op("aten::addmm", 10, 20)
    tb.alloc(12, 60_000, addr=1)
    tb.oom(15, 80_000)
    report, facts = analyze(tb, tmp_path)
    d = device(report)
    assert d["out_of_memory"] == [
        {
            "at_us": 15.0,
            "step": "ProfilerStep#1",
            "op": "aten::addmm",
            "bytes": 80_000,
            "allocated_bytes": 60_000,
            "reserved_bytes": 60_000,
        }
    ]
    assert (facts["memory_oom_events"], facts["memory_oom_op"], facts["memory_oom_bytes"]) == (
        1,
        "aten::addmm",
        80_000,
    )


def test_a_trace_without_totals_or_addr_is_read_and_says_what_it_lacks(tmp_path):
    tb = leaky(steps=3, leak=1000, temp=100, base=0, totals=False, addr=False)
    d = device(analyze(tb, tmp_path)[0])
    assert d["levels"] == "relative"  # the running sum of Bytes from the window's start
    assert [s["end_allocated_bytes"] for s in d["steps"]] == [1000, 2000, 3000]
    assert [s["peak_allocated_bytes"] for s in d["steps"]] == [1100, 2100, 3100]
    assert d["growth_bytes_per_step"] == 1000 and d["peak_reserved_bytes"] is None
    assert d["kept_across_steps"] == [] and d["headroom_bytes"] is None
    assert any(m.startswith("Total Allocated") for m in d["missing"]) and any(
        m.startswith("Addr") for m in d["missing"]
    )
    assert d["top_ops_at_peak_basis"].startswith("net bytes")
    # the peak (3,100 in step 3) and what the step allocated up to it
    assert d["top_ops_at_peak"] == [
        {"op": "aten::add", "bytes": 1000, "allocations": 1},
        {"op": "aten::mm", "bytes": 100, "allocations": 1},
    ]


def test_cpu_levels_are_relative_and_said(tmp_path):
    tb = leaky(steps=3, leak=64, temp=32, base=0, device=False, device_type=0, device_id=-1)
    d = device(analyze(tb, tmp_path)[0])
    assert d["device"] == "cpu" and d["levels"] == "relative" and d["caching_allocator"] is False
    assert (
        d["peak_reserved_bytes"] is None
        and d["fragmentation"] is None
        and d["capacity_bytes"] is None
    )
    assert d["growth_bytes_per_step"] == 64 and "relative" in d["notes"][0]


def test_no_memory_events_says_how_to_record_them(tmp_path):
    tb = leaky(steps=2)
    tb.events = [e for e in tb.events if e["ph"] != "i"]
    tb.profile_memory = None
    report, facts = analyze(tb, tmp_path)
    assert report["memory"] is None and report["memory_unavailable"] == MEMORY_UNAVAILABLE
    assert facts["memory_recorded"] is False


def test_memory_companion_and_run_categories(tmp_path):
    comp = leaky(steps=3, leak=0)
    comp.write(tmp_path / "t.memory.pt.trace.json.gz")
    main = leaky(steps=3)
    main.events = [e for e in main.events if e["ph"] != "i"]
    cats = {
        "parameter": 100,
        "gradient": 100,
        "optimizer_state": 200,
        "activation": 4000,
        "input": 10,
        "temporary": 0,
        "other": 5,
    }
    main.run_metadata = {
        "version": 1,
        "memory_trace": "t.memory.pt.trace.json.gz",
        "memory": {
            "device": "cuda:0",
            "source": "export_memory_timeline",
            "peak_bytes": 5100,
            "categories_at_peak": cats,
            "known": {"parameter_bytes": 100},
            "cost": None,
            "unavailable": None,
        },
    }
    report, facts = analyze(main, tmp_path)
    mem = report["memory"]
    assert mem["source"] == "run" and mem["trace"] == "t.memory.pt.trace.json.gz"
    assert (
        device(report)["categories_at_peak"] == cats
        and device(report)["peak_allocated_bytes"] == 5100
    )
    assert facts["memory_activation_share"] == round(4000 / 4415, 4)


def test_a_wrong_memory_metadata_type_drops_that_section_only(tmp_path):
    main = leaky(steps=2)
    main.run_metadata = {"version": 1, "memory": {"peak_bytes": "lots"}, "host": {"cpu_count": 4}}
    trace = load_trace(main.write(tmp_path / "t.json.gz"))
    assert "memory" not in trace.run_metadata and trace.run_metadata["host"] == {"cpu_count": 4}
    assert any("memory metadata was ignored" in w for w in trace.warnings)


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
@pytest.mark.parametrize("jobs", [1, 2])
def test_v100_peak_per_step_capacity_and_no_leak(jobs):
    trace = load_trace(REAL / "v100_df_index_resolver.json.gz", jobs=jobs)
    assert len(trace.memory) == 28_010 and trace.memory_profiled is True
    from perfsleuth.api import analyze_trace

    report = analyze_trace(trace).to_dict()
    gpu, cpu = report["memory"]["devices"]
    # reserved 1.93x allocated, but 37% of the device: no fragmentation finding; no leak, no OOM
    assert not {"memory-leak", "allocator-fragmentation", "out-of-memory"} & {
        f["rule"] for f in report["findings"]
    }
    assert gpu["device"] == "cuda:1" and gpu["capacity_bytes"] == 34_089_730_048
    assert [s["step"] for s in gpu["steps"]] == [f"ProfilerStep#{i}" for i in range(2, 7)]
    assert {s["peak_allocated_bytes"] for s in gpu["steps"]} == {6_629_508_096}  # 6.17 GiB
    assert {s["end_allocated_bytes"] for s in gpu["steps"]} == {4_096_614_400}  # 3.82 GiB
    assert gpu["peak_reserved_bytes"] == 12_782_141_440
    assert gpu["headroom_bytes"] == 34_089_730_048 - 12_782_141_440
    assert (
        gpu["growth_bytes_per_step"] == 0
        and gpu["growth_monotone"] is False
        and gpu["kept_across_steps"] == []
    )
    assert round(gpu["peak_allocated_bytes"] / GiB, 2) == 6.17
    assert cpu["device"] == "cpu" and cpu["levels"] == "relative" and cpu["events"] == 1240


def test_memory_events_read_on_the_lenient_decoding_path(tmp_path):
    """A piece the strict decoder refuses (an Addr written as a hex string) is decoded leniently: the
    events are still read, the address as the integer it spells."""
    tb = leaky(steps=3, leak=1000, temp=100, base=0)
    tb.events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1000, "tid": 1000,
                      "ts": 290, "args": {"Device Type": 1, "Device Id": 0, "Bytes": 8, "Addr": "0x10",
                                          "Total Allocated": 3008, "Total Reserved": 3008}})
    trace = load_trace(tb.write(tmp_path / "t.json.gz"))
    assert len(trace.memory) == 10
    assert trace.memory.addr[trace.memory.bytes == 8].tolist() == [16]  # "0x10", read as the int it says
    assert trace.memory.allocated.max() == 3100
