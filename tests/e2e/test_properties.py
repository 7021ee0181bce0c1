"""Property-based tests over generated traces (hypothesis)."""

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from perfsleuth.analysis.attribution import CATEGORIES
from perfsleuth.analysis.verdict import VERDICTS
from perfsleuth.api import analyze_file
from tracebuilder import TraceBuilder

span = st.tuples(st.integers(0, 400), st.integers(1, 150))
HOST_KINDS = ("op", "sync", "item", "dataloader", "pageable", "launch", "nccl")


@st.composite
def traces(draw):
    device = draw(st.booleans())
    tb = TraceBuilder(device=device)
    n_steps = draw(st.integers(0, 4))
    t = 0
    for i in range(n_steps):
        dur = draw(st.integers(20, 300))
        tb.step(i + 1, t, dur)
        t += dur + draw(st.integers(0, 30))
    for kind, (ts, dur) in draw(st.lists(st.tuples(st.sampled_from(HOST_KINDS), span), min_size=1, max_size=25)):
        if kind == "op":
            tb.op("aten::mm", ts, dur)
        elif kind == "dataloader":
            tb.dataloader(ts, dur)
        elif not device:
            tb.op("aten::add", ts, dur)
        elif kind == "sync":
            tb.runtime("cudaStreamSynchronize", ts, dur)
        elif kind == "item":
            tb.op("aten::item", ts, dur)
        elif kind == "pageable":
            tb.copy("Memcpy HtoD (Pageable -> Device)", host=(ts, dur), device=(ts + dur // 2, dur // 2 + 1))
        else:
            name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL" if kind == "nccl" else "ampere_sgemm_128x64_tn"
            tb.launch(name, host=(ts, 3), device=(ts + draw(st.integers(1, 50)), dur))
    return tb


def analyze(tb: TraceBuilder) -> dict:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.json"
        path.write_text(json.dumps(tb.build()))
        return analyze_file(path).to_dict()


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(traces())
def test_categories_partition_every_step(tb):
    rep = analyze(tb)
    for step in rep["steps"]:
        assert all(v >= 0 for v in step["time_us"].values())
        assert abs(sum(step["time_us"].values()) - step["duration_us"]) < 1e-6
        assert step["duration_us"] > 0
    assert list(rep["summary"]["time_share"]) == list(CATEGORIES)
    assert abs(sum(rep["summary"]["time_share"].values()) - 1.0) < 1e-3
    assert rep["verdict"] in VERDICTS
    if rep["trace"]["device_type"] == "cpu":
        assert rep["summary"]["time_share"]["sync"] == 0.0
    starts = [s["start_us"] for s in rep["steps"]]
    ends = [s["start_us"] + s["duration_us"] for s in rep["steps"]]
    assert all(e <= s2 + 1e-6 for e, s2 in zip(ends, starts[1:])), "steps never overlap"


BLOCKING = {"cudaStreamSynchronize", "cudaMemcpyAsync", "aten::item"}


def insert_idle_fetch(tb: TraceBuilder, t: int, d: int) -> bool:
    """Make the host wait `d` µs for the DataLoader at time `t` while the device idles: everything
    after `t` moves by `d`, spans across `t` grow by `d`. False when `t` is outside the recorded run, or
    the device (or a blocking call) is busy across `t`, because then the wait would not be idle."""
    if not min(e["ts"] for e in tb.events) <= t <= max(e["ts"] + e["dur"] for e in tb.events):
        return False
    for e in tb.events:
        across = e["ts"] < t < e["ts"] + e["dur"]
        if across and (e["pid"] == 0 or e["name"] in BLOCKING):
            return False
    for e in tb.events:
        if e["ts"] >= t:
            e["ts"] += d
        elif e["ts"] + e["dur"] > t:
            e["dur"] += d
    tb.dataloader(t, d)
    return True


@SETTINGS
@given(traces(), st.integers(0, 600), st.integers(1, 200))
def test_adding_idle_dataloader_time_never_lowers_the_dataloader_share(tb, t, d):
    rep = analyze(tb)
    before, phases = rep["summary"]["time_share"]["dataloader"], [s["phase"] for s in rep["steps"]]
    assume(insert_idle_fetch(tb, t, d))
    rep = analyze(tb)
    # a longer first step may become warm-up and leave the shares (docs/attribution.md#steady-state):
    # the property is about the same steady steps
    assume([s["phase"] for s in rep["steps"]] == phases)
    after = rep["summary"]["time_share"]["dataloader"]
    assert after >= before - 1e-4  # shares are rounded to 4 decimals
