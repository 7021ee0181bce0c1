"""Sync is charged only while the host waited on a busy device (docs/attribution.md#when-a-sync-costs).

Exact microseconds on hand-built traces, for the attribution and for the sync facts (the same rule).
"""

import numpy as np
import pytest
from perfsleuth.analysis import intervals as iv
from perfsleuth.analysis.attribution import CATEGORIES
from perfsleuth.analysis.syncwait import blocking_calls, charge
from tracebuilder_rules import DTOH, PAGEABLE_HTOD, RuleTraceBuilder, analyze


def only(**cats) -> dict:
    return {c: float(cats.get(c, 0.0)) for c in CATEGORIES}


def one_step(tb, tmp_path):
    report, facts = analyze(tb, tmp_path)
    (step,) = report["steps"]
    assert sum(step["time_us"].values()) == pytest.approx(step["duration_us"], abs=1e-6)
    return step["time_us"], facts


def test_sync_on_an_idle_device_is_host_time_and_has_no_drain(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k1", host=(0, 5), device=(10, 20))  # [10, 30): done long before the sync
    tb.runtime("cudaDeviceSynchronize", 40, 5)  # [40, 45): nothing pending, returns at once
    tb.launch("k2", host=(70, 5), device=(80, 10))  # the old rule called [45, 80) a drain (35 us of sync)
    t, f = one_step(tb, tmp_path)
    assert t == only(kernel=30, host=70)
    assert f["sync_explicit_calls_per_step"] == 1.0 and f["sync_explicit_waited_calls_per_step"] == 0.0
    assert f["sync_explicit_idle_us_per_step"] == 0.0


def test_sync_that_waited_and_drained_the_device(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 200)
    tb.launch("k1", host=(0, 5), device=(10, 90))  # busy [10, 100)
    tb.runtime("cudaStreamSynchronize", 20, 80)  # waits [20, 100) on k1
    tb.launch("k2", host=(130, 5), device=(140, 40))  # drain [100, 140)
    t, f = one_step(tb, tmp_path)
    assert t == only(kernel=130, sync=40, host=30)
    assert f["sync_explicit_waited_calls_per_step"] == 1.0 and f["sync_explicit_idle_us_per_step"] == 40.0


def test_call_time_after_the_device_finished_belongs_to_the_drain(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k1", host=(0, 5), device=(10, 30))  # [10, 40)
    tb.runtime("cudaDeviceSynchronize", 20, 40)  # [20, 60): waits until 40, returns at 60
    tb.launch("k2", host=(70, 5), device=(80, 10))
    t, f = one_step(tb, tmp_path)
    # [0,10) host, [10,40) kernel, [40,80) the device is idle because the wait emptied it: sync,
    # [80,90) kernel, [90,100) host
    assert t == only(kernel=40, sync=40, host=20)
    assert f["sync_explicit_idle_us_per_step"] == 40.0


def test_wait_that_did_not_empty_the_device_has_no_drain(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k1", host=(0, 5), device=(10, 50))  # [10, 60)
    tb.runtime("cudaEventSynchronize", 20, 10)  # [20, 30): an event recorded earlier; k1 runs on
    tb.launch("k2", host=(70, 5), device=(80, 10))
    t, f = one_step(tb, tmp_path)
    # the device was busy through the call; nothing after it is the sync's: [60, 80) is host
    assert t == only(kernel=60, host=40)
    assert f["sync_explicit_waited_calls_per_step"] == 1.0 and f["sync_explicit_idle_us_per_step"] == 0.0


def test_queued_work_that_has_not_started_is_waited_on(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k1", host=(0, 5), device=(30, 20))  # launched at 0, runs [30, 50)
    tb.runtime("cudaStreamSynchronize", 10, 42)  # [10, 52): waits for the queued k1
    tb.launch("k2", host=(60, 5), device=(70, 10))
    t, f = one_step(tb, tmp_path)
    # [0,10) host, [10,30) sync (waiting on queued work), [30,50) kernel, [50,70) drain, [70,80) kernel, [80,100) host
    assert t == only(kernel=30, sync=40, host=30)
    assert f["sync_explicit_idle_us_per_step"] == 40.0


def test_item_on_an_idle_device_costs_its_call_time_as_host(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k1", host=(0, 5), device=(10, 20))  # [10, 30)
    tb.op("aten::item", 40, 20)  # [40, 60): the device is idle, only its own 4-byte copy runs
    tb.op("aten::_local_scalar_dense", 41, 18)
    tb.copy(DTOH, host=(42, 10), device=(50, 1), nbytes=4)  # [50, 51)
    tb.runtime("cudaStreamSynchronize", 53, 5)
    tb.launch("k2", host=(70, 5), device=(80, 10))
    t, f = one_step(tb, tmp_path)
    assert t == only(kernel=30, transfer=1, host=69)
    assert f["sync_item_calls_per_step"] == 1.0 and f["sync_item_waited_calls_per_step"] == 0.0
    assert f["sync_item_idle_us_per_step"] == 0.0
    assert "item-sync" not in {x["rule"] for x in analyze(tb, tmp_path, name="again.json.gz")[0]["findings"]}


def test_item_that_waited_on_a_busy_device(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k1", host=(0, 5), device=(10, 30))  # [10, 40)
    tb.op("aten::item", 20, 40)  # [20, 60): k1 is running when it starts
    tb.op("aten::_local_scalar_dense", 21, 38)
    tb.copy(DTOH, host=(22, 36), device=(41, 1), nbytes=4)  # queued behind k1: [41, 42)
    tb.launch("k2", host=(70, 5), device=(80, 10))
    t, f = one_step(tb, tmp_path)
    # the worked example of docs/attribution.md: [40,41) sync (waiting), [41,42) transfer, [42,80) drain
    assert t == only(kernel=40, sync=39, transfer=1, host=20)
    assert f["sync_item_waited_calls_per_step"] == 1.0 and f["sync_item_idle_us_per_step"] == 39.0


def test_sync_after_its_own_copy_on_an_idle_device_is_not_a_wait(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k1", host=(0, 5), device=(10, 10))  # [10, 20)
    tb.copy(PAGEABLE_HTOD, host=(30, 10), device=(35, 8), nbytes=1 << 16)  # call [30, 40), copy [35, 43)
    tb.runtime("cudaStreamSynchronize", 41, 4)  # [41, 45): waits only for the copy just issued
    tb.launch("k2", host=(60, 5), device=(70, 10))
    t, _ = one_step(tb, tmp_path)
    # [30,35) the host is blocked in the pageable copy call: transfer; [35,43) the copy: transfer;
    # [43,45) the synchronize returns: host; nothing after it is a drain
    assert t == only(kernel=20, transfer=13, host=67)


def test_sync_after_a_copy_queued_behind_busy_work_drains(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k1", host=(0, 5), device=(10, 40))  # [10, 50)
    tb.copy("Memcpy HtoD (Pinned -> Device)", host=(20, 2), device=(50, 5))  # queued: [50, 55)
    tb.runtime("cudaStreamSynchronize", 23, 34)  # [23, 57)
    tb.launch("k2", host=(65, 5), device=(75, 10))
    t, _ = one_step(tb, tmp_path)
    # [0,10) host, [10,50) kernel, [50,55) transfer, [55,75) drain, [75,85) kernel, [85,100) host
    assert t == only(kernel=50, transfer=5, sync=20, host=25)


def test_charge_on_intervals():
    ns = np.array
    pending = iv.merge(ns([0, 200]), ns([100, 300]))  # work pending on [0, 100) and [200, 300)
    busy = iv.merge(ns([10, 210]), ns([100, 300]))
    windows = iv.merge(ns([0]), ns([400]))
    calls = blocking_calls(ns([50, 60, 150, 250]), ns([120, 70, 160, 260]))  # [60, 70) nests in [50, 120)
    waited, drain = charge(calls, pending, busy, windows)
    assert [a.tolist() for a in waited] == [[50, 250], [100, 260]]  # the call on the idle device: not at all
    assert [a.tolist() for a in drain] == [[100], [210]]  # [100, 210); [250, 260) did not empty the device
