"""The what-if replay (analysis/forecast/replay.py, timeline.py, analysis/forecast/plan.py): exact schedules of hand-built
graphs and traces, the unchanged replay reproducing the recording, and edits with hand-computed
results. Times in the traces are µs; the replay works in ns."""

from __future__ import annotations

import numpy as np
import pandas as pd
from perfsleuth.analysis.forecast.replay import Graph, solve
from perfsleuth.analysis.steps import find_steps
from perfsleuth.analysis.forecast.timeline import OWN, QUEUE, SYNC, build_timeline, step_ends, to_graph
from perfsleuth.analysis.forecast.plan import drop_waits, plan, remove_host, step_ns
from perfsleuth.trace.model import load_trace
from tracebuilder import TraceBuilder

US = 1000.0


def graph(a, b, offsets, free, edges=()):
    src, dst, lag = (np.array([e[i] for e in edges], dtype=float if i == 2 else np.int64) for i in range(3))
    return Graph(a=np.array(a, float), b=np.array(b, float), offsets=np.array(offsets), free_at=np.array(free, float),
                 src=src.astype(np.int64), dst=dst.astype(np.int64), lag=lag.astype(float))


def test_a_resource_runs_its_nodes_in_order_after_it_is_free():
    s = solve(graph([5, 5, 5], [5, 5, 5], [0, 3], [100.0]))
    assert s.end.tolist() == [105, 110, 115] and s.converged


def test_edges_delay_a_node_until_its_predecessor_ends_plus_lag():
    # host: launch (5), launch (5), sync (3 own, waits for kernel 2); device: two 50-long kernels, 7 after launch
    s = solve(graph([5, 5, 3, 50, 50], [0, 0, 0, 50, 50], [0, 3, 5], [0.0, 0.0],
                    edges=[(0, 3, 7.0), (1, 4, 7.0), (4, 2, 1.0)]))
    assert s.end.tolist() == [5, 10, 113, 62, 112]  # kernel 2 waits for kernel 1 (stream busy), not for its launch


def test_a_fixed_ready_time_holds_without_edges():
    g = graph([5, 5], [5, 5], [0, 2], [0.0])
    g.ready0 = np.array([-np.inf, 40.0])
    assert solve(g).end.tolist() == [5, 45]


def test_a_positive_cycle_is_reported_not_looped_forever():
    s = solve(graph([1, 1], [1, 1], [0, 1, 2], [0.0, 0.0], edges=[(0, 1, 1.0), (1, 0, 1.0)]), max_rounds=20)
    assert not s.converged and s.rounds > 20


# --- a hand-built step: launch, .item() (copy + synchronize), Python, launch ---------------------
def sync_trace(tmp_path, steps=1):
    """Per step (period 400 µs): K1 launched at 10 runs 20-220; .item() at 20-232 copies (22-26 call,
    220-222 on the device) and synchronizes (27-225, waiting for the copy); Python until 300; K2
    launched at 300 runs 310-360; the step's host window ends at 320."""
    tb = TraceBuilder()
    for k in range(steps):
        o = 400 * k
        tb.step(k + 1, o, 320)
        tb.launch("volta_sgemm_128x64_nn", host=(o + 10, 5), device=(o + 20, 200))
        tb.op("aten::item", o + 20, 212)
        tb.copy("Memcpy DtoH (Device -> Pageable)", host=(o + 22, 4), device=(o + 220, 2))
        tb.runtime("cudaStreamSynchronize", o + 27, 198)
        tb.launch("void at::native::vectorized_elementwise_kernel<4>", host=(o + 300, 5), device=(o + 310, 50))
    return load_trace(tb.write(tmp_path / "sync.json"))


def timeline_of(trace):
    return build_timeline(trace, find_steps(trace).frame)


def test_the_unchanged_replay_reproduces_the_recording(tmp_path):
    tl = timeline_of(sync_trace(tmp_path, steps=3))
    s = solve(to_graph(tl))
    assert np.allclose(s.end[: tl.n_items], tl.e)
    assert np.allclose(s.end[tl.n_items:], tl.d_end)
    assert np.allclose(step_ends(tl, s.end), tl.steps["end"].to_numpy())


def test_the_synchronize_waits_for_the_last_work_queued_before_it(tmp_path):
    tl = timeline_of(sync_trace(tmp_path))
    sync = int(np.flatnonzero(tl.name == "cudaStreamSynchronize")[0])
    (edge,) = np.flatnonzero(tl.w_dst == sync)
    assert tl.w_why[edge] == SYNC and tl.d_name[tl.w_src[edge]].startswith("Memcpy DtoH")
    assert tl.w_lag[edge] == 3 * US  # returned 3 µs after the copy ended
    assert tl.latency_ns == 10 * US and not tl.queue_observed


def test_without_the_wait_the_host_runs_ahead_and_the_step_ends_earlier(tmp_path):
    tl = timeline_of(sync_trace(tmp_path))
    p = plan(tl)
    before, _ = step_ns(p)
    assert before == 360 * US
    drop_waits(p, tl.name == "cudaStreamSynchronize")
    after, _ = step_ns(p)
    # the sync returns at 27+1 µs, K2 is launched at 28+75+5 = 108 and runs after the copy: 222-272
    assert after == 272 * US


def test_removing_host_work_shortens_what_follows(tmp_path):
    tl = timeline_of(sync_trace(tmp_path))
    p = plan(tl)
    cut = remove_host(p, (np.array([250 * US]), np.array([290 * US])))  # 40 µs of the Python before K2
    assert cut == 40 * US
    assert step_ns(p)[0] == 320 * US


def test_a_blocking_copy_waits_for_its_own_copy(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 200)
    tb.launch("volta_sgemm_128x64_nn", host=(5, 5), device=(15, 100))
    tb.copy("Memcpy HtoD (Pageable -> Device)", host=(20, 130), device=(115, 30), nbytes=1 << 20)
    tb.launch("volta_sgemm_128x64_nn", host=(160, 5), device=(170, 20))
    tl = timeline_of(load_trace(tb.write(tmp_path / "t.json")))
    copy = int(np.flatnonzero(tl.name == "cudaMemcpyAsync")[0])
    (edge,) = np.flatnonzero(tl.w_dst == copy)
    assert tl.w_why[edge] == OWN and tl.w_lag[edge] == 5 * US
    assert np.allclose(solve(to_graph(tl)).end[: tl.n_items], tl.e)


def test_the_launch_queue_depth_is_read_off_blocked_launches(tmp_path):
    """Kernels of 100 µs; the host launches every 10 µs until 2 launches are pending, then each launch
    returns when the kernel two places back ends (depth 2)."""
    tb = TraceBuilder()
    tb.step(1, 0, 1200)
    t = 0.0
    for k in range(10):
        start = 10 + 100 * k
        ends = [10 + 100 * (j + 1) for j in range(k + 1)]
        ret = ends[k - 2] + 1 if k >= 2 else t + 5
        tb.launch("volta_sgemm_128x64_nn", host=(t, ret - t), device=(start, 100))
        t = ret + 5
    tl = timeline_of(load_trace(tb.write(tmp_path / "q.json")))
    assert tl.queue_observed and tl.queue_depth == 2
    assert (tl.w_why == QUEUE).sum() >= 6
    assert np.allclose(solve(to_graph(tl)).end[: tl.n_items], tl.e)


def test_a_cpu_trace_is_its_host_chain(tmp_path):
    tb = TraceBuilder(device=False)
    for k in range(3):
        tb.step(k + 1, 1000 * k, 900)
        tb.dataloader(1000 * k + 10, 500)
        tb.op("aten::addmm", 1000 * k + 600, 250)
    tl = timeline_of(load_trace(tb.write(tmp_path / "cpu.json")))
    assert tl.n_nodes == 0 and (tl.kind == 1).sum() == 3
    assert step_ns(plan(tl))[0] == 1000 * US  # steady: from the end of the first step to the end of the last


def test_steps_frame_columns_are_what_the_forecaster_reads(tmp_path):
    frame = find_steps(sync_trace(tmp_path, 2)).frame
    assert {"name", "start", "end", "host_start", "host_end"} <= set(frame.columns)
    assert isinstance(frame, pd.DataFrame)
