"""pin-memory and non-blocking on hand-built copies: counts, bytes, blocked time, thresholds."""

import pytest
from tracebuilder_rules import PAGEABLE_HTOD, PINNED_HTOD, RuleTraceBuilder, analyze, fired, rated, rule_severity


def copy_trace(kind: str = PAGEABLE_HTOD, host_us: float = 30, nbytes: int = 4 << 20, steps_with_copy=(0, 1),
               after: str = "", api: str = "cudaMemcpyAsync", device: bool = True) -> RuleTraceBuilder:
    """Two 1000 µs steps: a kernel [10, 500), then (in the listed steps) one copy whose runtime call
    blocks the host `host_us`, optionally followed by the runtime call `after`."""
    tb = RuleTraceBuilder(device=device)
    for i in range(2):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        tb.launch("k", host=(t0, 5), device=(t0 + 10, 490))
        if i in steps_with_copy:
            tb.copy(kind, host=(t0 + 600, host_us), device=(t0 + 610, 5), api=api, nbytes=nbytes)
            if after == "cudaStreamSynchronize":
                tb.runtime(after, t0 + 600 + host_us + 1, 20)
            elif after:
                tb.launch("k2", host=(t0 + 600 + host_us + 1, 5), device=(t0 + 700, 10), api=after)
    return tb


def test_pageable_copies_facts_and_finding(tmp_path):
    report, facts = analyze(copy_trace(), tmp_path)
    assert facts["h2d_pageable_copies_per_step"] == 1.0
    assert facts["h2d_pageable_bytes_per_step"] == 4 << 20
    assert facts["h2d_pageable_bytes_per_copy"] == 4 << 20
    assert facts["h2d_pageable_us_per_step"] == 5.0
    assert facts["h2d_pageable_host_us_per_step"] == 30.0
    f = fired(report)["pin-memory"]
    assert rule_severity("pin-memory", facts) == "medium" and rated(f, "medium")  # 30 µs of 1000 >= 0.02
    assert f["ceiling"]["saving_us"] == 30.0 and f["ceiling"]["speedup"] == round(1000 / 970, 3)
    assert "pin_memory=True" in f["fix"] and "non_blocking=True" in f["fix"]
    assert "torch.tensor([0.5, 2.0], device=device)" not in f["fix"]  # large copies: the DataLoader fix
    assert f["evidence"]["h2d_pageable_bytes_per_step"] == 4 << 20


@pytest.mark.parametrize("host_us, severity", [(20, "medium"), (19, "low"), (100, "high"), (99, "medium")])
def test_pin_memory_severity_thresholds(tmp_path, host_us, severity):
    report, facts = analyze(copy_trace(host_us=host_us), tmp_path)
    assert rule_severity("pin-memory", facts) == severity and rated(fired(report)["pin-memory"], severity)


@pytest.mark.parametrize("steps_with_copy, fires", [((0, 1), True), ((0,), False)])
def test_pin_memory_min_copies_per_step(tmp_path, steps_with_copy, fires):
    report, facts = analyze(copy_trace(steps_with_copy=steps_with_copy), tmp_path)
    assert facts["h2d_pageable_copies_per_step"] == len(steps_with_copy) / 2
    assert ("pin-memory" in fired(report)) is fires


def test_small_pageable_copies_suggest_creating_tensors_on_the_device(tmp_path):
    report, facts = analyze(copy_trace(nbytes=8), tmp_path)
    assert facts["h2d_pageable_bytes_per_copy"] == 8.0
    f = fired(report)["pin-memory"]
    assert "torch.tensor([0.5, 2.0], device=device)" in f["fix"]
    assert "The copies are small (8 B each on average)" in f["message"]


def test_pinned_async_copies_are_healthy(tmp_path):
    report, facts = analyze(copy_trace(PINNED_HTOD, after="cudaLaunchKernel"), tmp_path)
    assert facts["h2d_pinned_copies_per_step"] == 1.0
    assert facts["h2d_pinned_blocking_copies_per_step"] == 0.0
    assert facts["h2d_pageable_copies_per_step"] == 0.0
    assert {"pin-memory", "non-blocking"}.isdisjoint(fired(report))


def test_pinned_copy_followed_by_a_synchronize_is_blocking(tmp_path):
    report, facts = analyze(copy_trace(PINNED_HTOD, host_us=10, after="cudaStreamSynchronize"), tmp_path)
    assert facts["h2d_pinned_blocking_copies_per_step"] == 1.0
    assert facts["h2d_pinned_blocking_bytes_per_step"] == 4 << 20
    assert facts["h2d_pinned_blocking_us_per_step"] == 31.0  # copy call [600, 610) + sync [611, 631)
    f = fired(report)["non-blocking"]
    assert rule_severity("non-blocking", facts) == "medium" and rated(f, "medium")
    assert f["ceiling"]["saving_us"] == 31.0
    assert "x.to(device, non_blocking=True)" in f["fix"]
    assert "pin-memory" not in fired(report)


def test_pinned_cudamemcpy_is_blocking(tmp_path):
    report, facts = analyze(copy_trace(PINNED_HTOD, host_us=10, api="cudaMemcpy"), tmp_path)
    assert facts["h2d_pinned_blocking_copies_per_step"] == 1.0
    assert facts["h2d_pinned_blocking_us_per_step"] == 10.0
    assert rule_severity("non-blocking", facts) == "low"  # 10 µs of 1000 < medium_share 0.02
    assert rated(fired(report)["non-blocking"], "low")


@pytest.mark.parametrize("steps_with_copy, fires", [((0, 1), True), ((1,), False)])
def test_non_blocking_min_copies_per_step(tmp_path, steps_with_copy, fires):
    report, _ = analyze(copy_trace(PINNED_HTOD, after="cudaStreamSynchronize", steps_with_copy=steps_with_copy),
                        tmp_path)
    assert ("non-blocking" in fired(report)) is fires


def test_a_synchronize_long_after_the_copy_is_not_the_copys(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("k", host=(0, 5), device=(10, 490))
    tb.copy(PINNED_HTOD, host=(600, 10), device=(610, 5))
    tb.runtime("cudaStreamSynchronize", 661, 20)  # 51 µs after the copy call ended
    _, facts = analyze(tb, tmp_path)
    assert facts["h2d_pinned_copies_per_step"] == 1.0 and facts["h2d_pinned_blocking_copies_per_step"] == 0.0
