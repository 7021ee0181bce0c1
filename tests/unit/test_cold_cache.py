"""The cores' caches emptied before the batched-op probe's timed calls (record/cold_cache.py, issue 39): how much a
core keeps to itself, read from Linux's sysfs, and the scratch written to push it out."""

from __future__ import annotations

import torch
from perfsleuth.record import cold_cache as cc


def caches(tmp_path, entries):
    """A sysfs cache folder: each (level, type, size text) as an index folder."""
    for i, (level, kind, size) in enumerate(entries):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return tmp_path


def test_a_cores_cache_is_its_largest_data_or_unified_cache_below_the_shared_third_level(tmp_path):
    # this project's machine: L1d 48K, L1i 64K, L2 2048K, a shared L3 of 480 MiB
    root = caches(tmp_path, [(1, "Data", "48K"), (1, "Instruction", "64K"), (2, "Unified", "2048K"),
                             (3, "Unified", "491520K")])
    assert cc.core_cache_bytes(root) == 2 << 20


def test_without_a_readable_cache_a_core_is_taken_to_keep_2_mib(tmp_path):
    assert cc.core_cache_bytes(tmp_path / "absent") == cc.FALLBACK == 2 << 20
    root = caches(tmp_path, [(1, "Instruction", "64K"), (3, "Unified", "32M"), (2, "Unified", "big")])
    assert cc.core_cache_bytes(root) == 2 << 20
    assert (cc._bytes("1M"), cc._bytes("512"), cc._bytes("2048K")) == (1 << 20, 512, 2 << 20)


def test_the_scratch_is_twice_the_cache_per_thread_at_most_64_mib_and_each_call_writes_all_of_it():
    e = cc.Evict(torch, threads=2, per_core=1 << 20)
    assert e.nbytes == 4 << 20 and e.scratch.numel() == (4 << 20) // 4
    e()
    e()
    assert float(e.scratch.min()) == float(e.scratch.max()) == 2.0
    assert cc.Evict(torch, threads=64, per_core=2 << 20).nbytes == 64 << 20
