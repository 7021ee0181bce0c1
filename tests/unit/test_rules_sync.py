"""item-sync: device idle time caused by host reads, thresholds, source lines from python stacks, CPU-only."""

import pytest
from perfsleuth.report.numbers import capped
from tracebuilder_rules import DTOH, RuleTraceBuilder, analyze, fired, rule_severity


def item_trace(gap_us: float, device: bool = True, stacks: str = "builtin", steps: int = 2,
               tensor_read: bool = False, device_read: bool = True) -> RuleTraceBuilder:
    """1000 µs steps: kernel k1 busy [10, 419) and the 4-byte copy [419, 420); `.item()` blocks the
    host [20, 420) waiting for them; the next kernel only starts `gap_us` after the read returns (the
    drain). `device_read=False`: `.item()` of a CPU tensor (no copy, no synchronize inside)."""
    tb = RuleTraceBuilder(device=device)
    for i in range(steps):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        if stacks:
            top = tb.py("train.py(57): train_step", t0 + 15, 420)
            if stacks == "builtin":
                mid = tb.py("torch/_tensor.py(41): wrapped", t0 + 18, 405, parent=top)
                tb.py("<built-in method item of Tensor object at 0x7f3a>", t0 + 19, 402, parent=mid)
            else:  # only a finished sibling frame before the read: climb to its enclosing parent
                tb.py("train.py(50): log_metrics", t0 + 16, 1, parent=top)
        if device:
            tb.launch("k1", host=(t0, 5), device=(t0 + 10, 409))
        tb.op("aten::item", t0 + 20, 400)
        tb.op("aten::_local_scalar_dense", t0 + 21, 398)
        if device and device_read:  # copy 4 bytes back [419, 420) and wait for it
            tb.copy(DTOH, host=(t0 + 22, 3), device=(t0 + 419, 1), nbytes=4)
            tb.runtime("cudaStreamSynchronize", t0 + 26, 393)
        if device:
            tb.launch("k2", host=(t0 + 421, 2), device=(t0 + 420 + gap_us, 100))
            if tensor_read:
                tb.copy(DTOH, host=(t0 + 700, 30), device=(t0 + 705, 20), nbytes=4096)
    return tb


@pytest.mark.parametrize("gap_us, fires", [(3, True), (1, False)])
def test_item_sync_min_share(tmp_path, gap_us, fires):
    report, facts = analyze(item_trace(gap_us), tmp_path)
    assert facts["sync_item_calls_per_step"] == 1.0
    assert facts["sync_item_us_per_step"] == 400.0
    assert facts["sync_item_idle_us_per_step"] == gap_us
    assert ("item-sync" in fired(report)) is fires


@pytest.mark.parametrize("gap_us, severity", [(19, "low"), (20, "medium"), (99, "medium"), (100, "high")])
def test_item_sync_severity(tmp_path, gap_us, severity):
    """The rule's thresholds (2% and 10% of the step idle); the finding has no forecast here (the reads
    block nothing the replay could move), so it shows the rule's severity, at most medium."""
    report, facts = analyze(item_trace(gap_us), tmp_path)
    f = fired(report)["item-sync"]
    assert rule_severity("item-sync", facts) == severity
    assert (f["severity"], f["severity_from"]) == (capped(severity), "rule") and f["forecast"]["speedup"] is None
    assert f["ceiling"]["saving_us"] == gap_us


def test_item_sync_finding_has_source_lines(tmp_path):
    report, facts = analyze(item_trace(50), tmp_path)
    assert facts.tables["sync_sites"] == [{"file": "train.py", "line": 57, "function": "train_step", "count": 2,
                                           "count_per_step": 1.0, "line_kind": "function"}]
    f = fired(report)["item-sync"]
    assert f["locations"] == [{"file": "train.py", "line": 57, "function": "train_step", "count": 2,
                               "line_kind": "function"}]
    assert "`train.py:57` in `train_step`" in f["message"]
    assert 'torch.cuda.set_sync_debug_mode("warn")' in f["fix"]
    assert "loss.detach()" in f["fix"]
    assert f["category"] == "sync"


def test_source_line_from_the_enclosing_frame_without_a_builtin_event(tmp_path):
    _, facts = analyze(item_trace(50, stacks="enclosing"), tmp_path)
    assert [(s["file"], s["line"], s["function"]) for s in facts.tables["sync_sites"]] == [
        ("train.py", 57, "train_step")]


def test_without_stacks_the_message_says_how_to_get_them(tmp_path):
    f = fired(analyze(item_trace(50, stacks=""), tmp_path)[0])["item-sync"]
    assert f["locations"] == []
    assert "with_stack=True" in f["message"]


def test_blocking_device_to_host_copies_count_as_reads(tmp_path):
    report, facts = analyze(item_trace(50, tensor_read=True), tmp_path)
    assert facts["sync_item_calls_per_step"] == 2.0  # .item() and a .cpu() outside it
    assert facts["sync_dtoh_copies_per_step"] == 2.0  # the item's 4 bytes and the tensor
    assert facts["sync_item_us_per_step"] == 430.0  # [20, 420) and the copy call [700, 730)


def test_item_of_a_cpu_tensor_reads_nothing_from_the_device(tmp_path):
    """E.g. AdamW's step counters: aten::item with no copy or synchronize inside."""
    report, facts = analyze(item_trace(50, device_read=False), tmp_path)
    assert facts["sync_item_calls_per_step"] == 0.0 and facts["sync_item_idle_us_per_step"] == 0.0
    assert "item-sync" not in fired(report)


def test_cpu_only_trace_never_fires(tmp_path):
    report, facts = analyze(item_trace(50, device=False), tmp_path)
    assert facts["device_is_gpu"] is False
    assert facts["sync_item_calls_per_step"] == 0.0  # nothing to read from
    assert facts["sync_item_idle_us_per_step"] == 0.0
    assert "item-sync" not in fired(report)


def explicit_sync_trace(gap_us: float, api: str = "cudaDeviceSynchronize", profiler_stop: bool = False):
    """1000 µs steps: k1 busy [10, 400); the step calls `api` [100, 400) and launches k2 `gap_us` after it.
    After the last step's host window the profiler synchronizes (ignored)."""
    tb = RuleTraceBuilder()
    for i in range(2):
        t0 = i * 1000
        tb.step(i + 1, t0, 1000)
        top = tb.py("bench.py(12): timed_step", t0 + 50, 400)
        tb.launch("k1", host=(t0, 5), device=(t0 + 10, 390))
        tb.runtime(api, t0 + 100, 300)
        tb.launch("k2", host=(t0 + 401, 2), device=(t0 + 400 + gap_us, 100))
        assert top
    if profiler_stop:
        tb.launch("tail", host=(1990, 5), device=(1995, 100))  # the last step's device work ends at 2095
        tb.runtime("cudaDeviceSynchronize", 2001, 94)  # outside the host window
    return tb


@pytest.mark.parametrize("gap_us, fires", [(10, True), (9, False)])
def test_explicit_sync_min_share(tmp_path, gap_us, fires):
    report, facts = analyze(explicit_sync_trace(gap_us), tmp_path)
    assert facts["sync_explicit_calls_per_step"] == 1.0
    assert facts["sync_explicit_idle_us_per_step"] == gap_us
    assert facts["sync_item_calls_per_step"] == 0.0
    assert ("explicit-sync" in fired(report)) is fires
    assert "item-sync" not in fired(report)
    if fires:
        f = fired(report)["explicit-sync"]
        assert f["locations"] == [{"file": "bench.py", "line": 12, "function": "timed_step", "count": 2,
                                   "line_kind": "function"}]
        assert "torch.cuda.Event(enable_timing=True)" in f["fix"]


def test_the_profilers_own_synchronize_is_ignored(tmp_path):
    _, facts = analyze(explicit_sync_trace(50, profiler_stop=True), tmp_path)
    assert facts["steps"] == 2 and facts["step_max_us"] == 1095.0  # the sync sits in the last step's window
    assert facts["sync_explicit_calls_per_step"] == 1.0 and facts["sync_calls_per_step"] == 1.5


@pytest.mark.parametrize("api", ["cudaStreamSynchronize", "cudaEventSynchronize", "hipDeviceSynchronize"])
def test_explicit_sync_apis(tmp_path, api):
    _, facts = analyze(explicit_sync_trace(50, api=api), tmp_path)
    assert facts["sync_explicit_calls_per_step"] == 1.0


def test_sync_after_a_copy_belongs_to_the_copy_rules(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("k1", host=(0, 5), device=(10, 390))
    tb.copy("Memcpy HtoD (Pinned -> Device)", host=(90, 5), device=(400, 10))
    tb.runtime("cudaStreamSynchronize", 96, 315)
    tb.launch("k2", host=(412, 2), device=(500, 100))
    report, facts = analyze(tb, tmp_path)
    assert facts["sync_explicit_calls_per_step"] == 0.0
    assert facts["h2d_pinned_blocking_copies_per_step"] == 1.0
    assert "non-blocking" in fired(report) and "explicit-sync" not in fired(report)
