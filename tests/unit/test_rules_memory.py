"""rules/memory.toml: each rule on a hand-built trace that must fire and one that must not."""

from memorybuilder import MemoryTraceBuilder, leaky
from tracebuilder_rules import analyze, fired

GiB, MiB = 1 << 30, 1 << 20
CATS = {
    "parameter": 1 * GiB,
    "gradient": 1 * GiB,
    "optimizer_state": 2 * GiB,
    "activation": 8 * GiB,
    "input": 0,
    "temporary": 0,
    "other": 0,
}


def test_memory_leak_fires_names_the_op_and_forecasts_steps_until_full(tmp_path):
    report, _ = analyze(leaky(steps=4, leak=MiB, temp=100, base=0, capacity=GiB), tmp_path)
    f = fired(report)["memory-leak"]
    headroom = GiB - (4 * MiB + 100)
    assert f["severity"] == "medium" and f["forecast"]["speedup"] is None
    assert (
        "grows 1.00 MiB per step" in f["message"]
        and "aten::add allocated 3.00 MiB in 3 steps" in f["message"]
    )
    assert f"full in about {headroom // MiB:,} more steps" in f["message"]


def test_memory_leak_quiet_on_the_clean_twin_and_on_small_growth(tmp_path):
    assert "memory-leak" not in fired(analyze(leaky(steps=4, leak=0), tmp_path)[0])
    assert "memory-leak" not in fired(
        analyze(leaky(steps=4, leak=1000), tmp_path, name="small.json.gz")[0]
    )


def test_memory_leak_needs_three_steady_steps(tmp_path):
    assert "memory-leak" not in fired(analyze(leaky(steps=2, leak=MiB), tmp_path)[0])


def _oom(tmp_path, with_oom: bool):
    tb = MemoryTraceBuilder(capacity=GiB)
    tb.step(1, 0, 100)
    tb.op("aten::addmm", 10, 20)
    tb.alloc(12, 600 * MiB, addr=1)
    if with_oom:
        tb.oom(15, 800 * MiB)
    return analyze(tb, tmp_path)[0]


def test_out_of_memory_fires_and_the_verdict_says_so_first(tmp_path):
    report = _oom(tmp_path, True)
    f = fired(report)["out-of-memory"]
    assert "aten::addmm asked for 800.00 MiB" in f["message"]
    assert report["verdict_text"].startswith(
        "OUT OF MEMORY on cuda:0: an allocation of 838,860,800 bytes in aten::addmm failed"
    )


def test_out_of_memory_quiet_without_the_event(tmp_path):
    report = _oom(tmp_path, False)
    assert "out-of-memory" not in fired(report) and not report["verdict_text"].startswith(
        "OUT OF MEMORY"
    )


def _cache(tmp_path, capacity: int):
    tb = MemoryTraceBuilder(capacity=capacity)
    tb.step(1, 0, 100)
    tb.op("aten::empty", 10, 10)
    tb.alloc(11, 4 * GiB, addr=1, reserve=9 * GiB)  # 9 GiB reserved, 4 GiB allocated
    tb.free(50, addr=1)
    return analyze(tb, tmp_path)[0]


def test_allocator_fragmentation_fires_on_a_nearly_full_device(tmp_path):
    f = fired(_cache(tmp_path, 10 * GiB))["allocator-fragmentation"]
    assert (
        "reserves 9.00 GiB at its peak but allocates at most 4.00 GiB (2.25x; measured)" in f[
            "message"
        ]
    )
    assert "expandable_segments:True" in f["fix"]


def test_allocator_fragmentation_quiet_with_room_to_spare(tmp_path):
    assert "allocator-fragmentation" not in fired(_cache(tmp_path, 40 * GiB))


def test_allocator_fragmentation_never_on_the_cpu(tmp_path):
    tb = leaky(steps=3, leak=0, device=False, device_type=0, device_id=-1)
    report, facts = analyze(tb, tmp_path)
    assert facts["memory_caching_allocator"] is False and "allocator-fragmentation" not in fired(
        report
    )


def _with_categories(tmp_path, cats: dict, world_size: int = 1):
    tb = leaky(steps=3, leak=0, capacity=40 * GiB, world_size=world_size)
    tb.run_metadata = {
        "version": 1,
        "memory": {
            "device": "cuda:0",
            "source": "export_memory_timeline",
            "peak_bytes": sum(cats.values()),
            "categories_at_peak": cats,
        },
    }
    return analyze(tb, tmp_path)


def test_activation_memory_fires_with_forecasts_labelled(tmp_path):
    report, facts = _with_categories(tmp_path, CATS)
    f = fired(report)["activation-memory"]
    assert facts["memory_activation_share"] == round(8 / 12, 4)
    assert "Activations take 8.00 GiB, 66.7% of the 12.00 GiB" in f["message"]
    assert (
        "brings the peak to about 8.00 GiB (forecast" in f["message"]
        and "(hypothesis: half-size" in f["message"]
    )
    # headroom 40 GiB - 5,100 B allocated (the trace's level), plus today's activations, over them
    assert f"about {facts['memory_batch_fits_factor']:.4g}x" in f["message"]
    assert facts["memory_batch_fits_factor"] == round((40 * GiB - 5100 + 8 * GiB) / (8 * GiB), 2)


def test_category_rules_quiet_where_the_peak_is_too_small_to_matter(tmp_path):
    """A 6 MiB CPU job was told to checkpoint its activations: under 256 MiB at the peak no device is short of
    memory, whatever the shares."""
    MiB = 1 << 20
    small = {"activation": 180 * MiB, "parameter": 20 * MiB, "optimizer_state": 50 * MiB,
             "gradient": 5 * MiB}  # 255 MiB: activations 70.6 %, optimizer state 19.6 %
    report, facts = _with_categories(tmp_path, small)
    assert facts["memory_categories_total_bytes"] == 255 * MiB and facts["memory_activation_share"] >= 0.5
    assert "activation-memory" not in fired(report)
    report, facts = _with_categories(tmp_path, {**small, "parameter": 21 * MiB})  # 256 MiB
    assert "activation-memory" in fired(report)
    report, _ = _with_categories(tmp_path, {"optimizer_state": 100 * MiB, "parameter": 50 * MiB})
    assert "optimizer-memory" not in fired(report)


def test_optimizer_memory_fires_with_the_bytes_each_fix_frees(tmp_path):
    cats = {**CATS, "activation": 1 * GiB, "optimizer_state": 4 * GiB, "parameter": 2 * GiB}
    report, facts = _with_categories(tmp_path, cats, world_size=4)
    found = fired(report)
    assert "activation-memory" not in found
    msg = found["optimizer-memory"]["message"]
    assert (
        "Optimizer state takes 4.00 GiB, 50.0% of the 8.00 GiB" in msg
        and "2x the parameters" in msg
    )
    assert (
        "8-bit optimizer frees about 3.00 GiB" in msg
        and "over 4 ranks" in msg
        and "3.00 GiB per rank" in msg
    )


def test_category_rules_quiet_without_categories(tmp_path):
    report, facts = analyze(leaky(steps=3, leak=0), tmp_path)
    assert facts["memory_categories_known"] is False
    assert not {"activation-memory", "optimizer-memory"} & set(fired(report))
