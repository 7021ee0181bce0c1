"""`perfsleuth run`'s batched-op probe (record/batched_probe.py, issue 39): which of the window's ops it times,
and that the op it times is the loop's op over a batch of the recorded inputs (the same arithmetic, stacked)."""

from __future__ import annotations

import json

import pytest
import torch
from perfsleuth.record import batched_calls as bc
from perfsleuth.record import batched_probe as bp
from perfsleuth.record import cold_cache as cc


def window(tmp_path, ops):
    """The JSON torch exports for a window: each (name, dims, types, calls, µs a call) as that many cpu_ops."""
    events = [{"ph": "X", "cat": "cpu_op", "name": name, "ts": 0, "dur": us,
               "args": {"Input Dims": dims, "Input type": types}}
              for name, dims, types, calls, us in ops for _ in range(calls)]
    events.append({"ph": "X", "cat": "user_annotation", "name": "aten::tanh", "ts": 0, "dur": 1})  # not an op
    path = tmp_path / "window.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


F2 = ["float", "float"]


def test_the_ops_it_times_repeat_eight_times_a_step_with_the_same_shapes_and_are_short(tmp_path):
    path = window(tmp_path, [
        ("aten::addmm", [[8], [64, 8], [8, 8], [], []], ["float"] * 3 + ["Scalar"] * 2, 864, 4.0),  # 288 a step
        ("aten::tanh", [[64, 8]], ["float"], 21, 2.0),  # 7 a step: no loop
        ("aten::mm", [[1024, 1024], [1024, 1024]], F2, 30, 900.0),  # 10 a step, 900 µs: not small
        ("aten::select", [[64, 96, 8], [], []], ["float", "Scalar", "Scalar"], 864, 1.0),  # no arithmetic
        ("aten::mul", [[64, 8], [64, 8]], ["c10::Half"] * 2, 96, 3.0),  # not float32
        ("aten::mul", [[64, 8], [64, 8]], F2, 96, 3.0)])
    assert bp.groups_of(path, 3) == [("aten::addmm", [[8], [64, 8], [8, 8], [], []], 288.0, None, None),
                                     ("aten::mul", [[64, 8], [64, 8]], 32.0, None, None)]


def test_a_sums_dims_come_from_its_concrete_inputs(tmp_path):
    """A bias gradient: sum over dim 0 of [64, 8], kept: batched, dim 1 of (batch, 64, 8)."""
    path = tmp_path / "w.json"
    sums = [{"ph": "X", "cat": "cpu_op", "name": "aten::sum", "ts": 0, "dur": 2.0,
             "args": {"Input Dims": [[64, 8], [], [], []], "Input type": ["float", "ScalarList", "Scalar", ""],
                      "Concrete Inputs": ["", "[0]", "True", ""]}}] * 16
    path.write_text(json.dumps({"traceEvents": sums}))
    [group] = bp.groups_of(path, 2)
    assert group == ("aten::sum", [[64, 8], [], [], []], 8.0, ["", "[0]", "True", ""], None)
    assert tuple(bc._call(torch, "aten::sum", group[1], 5, group[3])().shape) == (5, 1, 8)
    assert tuple(bc._call(torch, "aten::sum", [[64, 8], []], 5, ["", ""])().shape) == (5,)  # the whole item
    assert bc._call(torch, "aten::sum", [[64, 8], [], [], []], 5, ["", "[2]", "False", ""]) is None


def test_the_items_lie_as_the_loops_slices_lie(tmp_path):
    """x[:, g] of a [64, 96, 8] tensor: strides [768, 1] for [64, 8]. Its 96 slices sit in the gaps, 8 apart:
    the batch is a [96, 64, 8] view with strides (8, 768, 1), 96 items at most (of the 288 a step the window
    repeats: three layers). A transposed weight ([1, 8]) has no gaps: stacked after each other, 64 apart; an
    expanded bias ([0, 1]) takes 8 elements. The calls' most common layout is the group's."""
    assert bc._layout([64, 8], [768, 1]) == (8, 96)
    assert bc._layout([8, 8], [1, 8]) == (64, None)
    assert bc._layout([64, 8], [0, 1]) == (8, None)
    assert bc._layout([64, 8], [9, 1]) is None  # a gap of one: no other item fits
    assert bc._layout([64, 8], None) is None
    x = bc._input(torch, [64, 8], [768, 1], 96)
    assert x.shape == (96, 64, 8) and x.stride() == (8, 768, 1)
    assert bc._input(torch, [8], [1], 5, rank=2).shape == (5, 1, 8)
    assert bc._fits([[8], [64, 8], [8, 8]], [[1], [768, 1], [1, 8]], 288) == 96
    dims, types = [[64, 8], [64, 8]], ["float", "float"]
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::tanh_backward", "ts": 0, "dur": 2.0,
               "args": {"Input Dims": dims, "Input type": types, "Input Strides": st}}
              for st in [[[768, 1], [8, 1]]] * 20 + [[[8, 1], [8, 1]]] * 4]
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"traceEvents": events}))
    [group] = bp.groups_of(path, 2)
    assert group == ("aten::tanh_backward", dims, 12.0, None, [[768, 1], [8, 1]])


@pytest.mark.parametrize("name, shapes, expected", [
    ("aten::mm", [[64, 8], [8, 4]], (5, 64, 4)),
    ("aten::addmm", [[4], [64, 8], [8, 4], [], []], (5, 64, 4)),
    ("aten::addmm", [[64, 4], [64, 8], [8, 4], [], []], (5, 64, 4)),
    ("aten::bmm", [[3, 16, 8], [3, 8, 4]], (15, 16, 4)),
    ("aten::baddbmm", [[3, 16, 4], [3, 16, 8], [3, 8, 4], [], []], (15, 16, 4)),
    ("aten::tanh", [[64, 8]], (5, 64, 8)),
    ("aten::add", [[64, 8], [8], []], (5, 64, 8)),
    ("aten::tanh_backward", [[64, 8], [64, 8]], (5, 64, 8)),
    ("aten::threshold_backward", [[64, 8], [64, 8], []], (5, 64, 8)),
    ("aten::_softmax", [[16, 16], [], []], (5, 16, 16)),
    ("aten::_softmax_backward_data", [[16, 16], [16, 16], [], []], (5, 16, 16)),
])
def test_each_op_runs_over_a_batch_of_its_recorded_inputs(name, shapes, expected):
    fn = bc._call(torch, name, shapes, 5)
    assert tuple(fn().shape) == expected


def test_what_it_cannot_build_from_shapes_alone_it_leaves_to_the_derived_rate():
    assert bc._call(torch, "aten::prod", [[64, 8], [], [], []], 5) is None
    assert bc._call(torch, "aten::mm", [[64, 8]], 5) is None
    assert bc._call(torch, "aten::addmm", [[4], [2, 64, 8], [8, 4]], 5) is None
    assert bc._call(torch, "aten::tanh", [[]], 5) is None  # a 0-dim input


def test_the_measurement_names_each_op_its_batch_and_time(monkeypatch):
    monkeypatch.setattr(bp, "timed", lambda fn: (fn(), 1e-6)[1])  # a microsecond a call
    monkeypatch.setattr(bp, "MAX_BYTES", 3 * 64 * 64 * 4)  # three 64 x 64 floats per batched input at most
    got = bp.measure([("aten::tanh", [[64, 8]], 288.0, None, None),
                      ("aten::sum", [[64, 8], [], [], []], 288.0, None, None),
                      ("aten::mul", [[64, 64], [64, 64]], 9.0, None, None),
                      ("aten::sum", [[64, 8], [], [], []], 96.0, ["", "[0]", "True", ""], None),
                      ("aten::tanh_backward", [[4, 8], [4, 8]], 288.0, None, [[80, 1], [8, 1]])], threads=1)
    assert got["threads"] == 1 and got["ops"] == [
        # 2 KiB an item: 24 of them in the 48 KiB allowed, not the 288 a step
        {"name": "aten::tanh", "shapes": [[64, 8]], "per_step": 288.0, "batch": 24, "ns": 1000, "hot": [[24, 1000]],
         "copy_ns": 1000},
        {"name": "aten::sum", "shapes": [[64, 8], [], [], []], "per_step": 288.0, "batch": 24, "ns": 1000,
         "hot": [[24, 1000]]},
        {"name": "aten::mul", "shapes": [[64, 64], [64, 64]], "per_step": 9.0, "batch": 3, "ns": 1000,
         "hot": [[3, 1000]], "copy_ns": 1000},
        {"name": "aten::sum", "shapes": [[64, 8], [], [], []], "per_step": 96.0, "batch": 24, "ns": 1000,
         "hot": [[24, 1000]], "concrete": ["", "[0]", "True", ""]},
        # slices 8 apart in rows of 80: 10 of them fit
        {"name": "aten::tanh_backward", "shapes": [[4, 8], [4, 8]], "per_step": 288.0, "batch": 10, "ns": 1000,
         "hot": [[10, 1000]], "copy_ns": 1000, "strides": [[80, 1], [8, 1]]}]
    assert "the median of 7" in got["source"]


def test_calls_that_vary_in_one_size_are_one_group_at_their_median_size(tmp_path, monkeypatch):
    """An MoE's experts in two steps: 16 calls of [r, 64] x [64, 128] (r = 40, 48, 56, 60, 72, 80, 40, 84: each
    shape twice, 1 a step) and their weight gradients [128, r] x [r, 64], besides a router's [512, 16] x [16, 64]
    (twice; two rare sizes: a seldom call of constant shapes, no group) and a [512, 64] x [64, 128] of the
    experts' widths (one rare size: it joins the first group, 9 a step). No one shape repeats 8 times a step; each
    group of one varying size does, timed at the calls' median size (the lower one: 60 of the first group's 18
    calls, 56 of the second's 16), its varying dimensions named; no wide matmul. A call of size 64, the experts'
    width, has no rare size: none of theirs."""
    rs = [40, 48, 56, 60, 72, 80, 40, 84]
    ops = [("aten::mm", [[r, 64], [64, 128]], F2, 2, 5.0) for r in rs] + \
          [("aten::mm", [[128, r], [r, 64]], F2, 2, 5.0) for r in rs] + \
          [("aten::mm", [[512, 16], [16, 64]], F2, 2, 5.0), ("aten::mm", [[512, 64], [64, 128]], F2, 2, 5.0)]
    groups = bp.groups_of(window(tmp_path, ops), 2)
    assert groups == [("aten::mm", [[60, 64], [64, 128]], 9.0, None, None, [[0, 0]]),
                      ("aten::mm", [[128, 56], [56, 64]], 8.0, None, None, [[0, 1], [1, 0]])]
    ops.append(("aten::mm", [[64, 64], [64, 128]], F2, 2, 5.0))
    assert bp.groups_of(window(tmp_path, ops), 2)[0] == groups[0]
    monkeypatch.setattr(bp, "timed", lambda fn: (fn(), 1e-6)[1])
    [entry] = bp.measure(groups[:1], threads=1)["ops"]
    assert entry == {"name": "aten::mm", "shapes": [[60, 64], [64, 128]], "per_step": 9.0, "batch": 9, "ns": 1000,
                     "hot": [[9, 1000]], "vary": [[0, 0]]}


def test_no_probe_without_shapes_or_when_switched_off(tmp_path, monkeypatch):
    path = window(tmp_path, [("aten::tanh", [[64, 8]], ["float"], 96, 1.0)])
    assert bp.for_run(path, 3, record_shapes=False) is None
    monkeypatch.setenv(bp.ENV, "1")
    assert bp.for_run(path, 3, record_shapes=True) is None
    monkeypatch.delenv(bp.ENV)
    got = bp.for_run(path, 3, record_shapes=True, threads=1)
    assert [o["name"] for o in got["ops"]] == ["aten::tanh"] and got["seconds"] >= 0
    assert bp.for_run(tmp_path / "gone.json", 3, record_shapes=True) is None  # never the run's problem


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_off_while_the_window_is_decoded_and_as_it_was_after(tmp_path, monkeypatch, enabled):
    import gc

    path = window(tmp_path, [("aten::mul", [[64, 8], [64, 8]], F2, 96, 3.0)])
    seen, decode = [], bp.msgspec.json.decode
    monkeypatch.setattr(bp.msgspec.json, "decode", lambda *a, **k: seen.append(gc.isenabled()) or decode(*a, **k))
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        assert bp.groups_of(path, 3) == [("aten::mul", [[64, 8], [64, 8]], 32.0, None, None)]
        assert seen == [False] and gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("name, shapes, strides", [
    # nn.Linear(1, 16) on a column of a [256, 48] batch: an outer product
    ("aten::addmm", [[16], [256, 1], [1, 16], [], []], [[1], [48, 1], [1, 1], [], []]),
    # its weight's gradient: the transposed output gradient times the column, a matrix-vector product
    ("aten::mm", [[16, 256], [256, 1]], [[1, 16], [48, 1]]),
    ("aten::mm", [[1, 256], [256, 16]], None),
    ("aten::addmm", [[1, 4], [1, 8], [8, 4], [], []], None),
])
def test_a_matmul_with_a_dimension_of_1_has_a_broadcast_form_equal_to_the_batched_matmul(name, shapes, strides):
    torch.manual_seed(0)
    matmul = bc._call(torch, name, shapes, 6, None, strides)
    torch.manual_seed(0)
    broadcast = bc._broadcast_call(torch, name, shapes, 6, strides)
    assert torch.allclose(matmul(), broadcast(), atol=1e-5)


def test_other_ops_and_shapes_have_no_broadcast_form():
    assert bc._broadcast_call(torch, "aten::mm", [[64, 8], [8, 4]], 5) is None
    assert bc._broadcast_call(torch, "aten::bmm", [[3, 16, 1], [3, 1, 4]], 5) is None
    assert bc._broadcast_call(torch, "aten::tanh", [[64, 1]], 5) is None
    assert bc._broadcast_call(torch, "aten::mm", [[64, 1]], 5) is None


def test_the_faster_form_of_a_matmul_with_a_dimension_of_1_is_kept_and_named(monkeypatch):
    # each form timed back to back, then after the caches are emptied (the same here)
    calls = iter([5e-6] * 14 + [2e-6] * 14 + [1e-6] * 14 + [3e-6] * 14)  # outer product: bmm 5 µs, broadcast 2 µs
    monkeypatch.setattr(bp, "timed", lambda fn: (fn(), next(calls))[1])  # then mat-vec: bmm 1 µs, broadcast 3 µs
    monkeypatch.setattr(bp, "_warm", lambda fn: None)
    monkeypatch.setattr(bp, "_ladder", lambda batch: [])
    monkeypatch.setattr(bp, "_wide_call", lambda *a: None)
    monkeypatch.setattr(bp, "PASSES", 1)
    got = bp.measure([("aten::addmm", [[16], [256, 1], [1, 16], [], []], 48.0, None, None),
                      ("aten::mm", [[16, 256], [256, 1]], 48.0, None, None)], threads=1)
    assert [(o["name"], o["ns"], o["form"]) for o in got["ops"]] == [
        ("aten::addmm", 2000, "broadcast"), ("aten::mm", 1000, "batched")]



def test_an_elementwise_ops_output_is_also_copied_with_the_batch_moved_second():
    """What a rewrite does that gathers the loop's outputs with a cat along a later dimension: [5, 64, 8] -> a
    contiguous [64, 5, 8]. Other ops have no such copy."""
    torch.manual_seed(0)
    copy = bc._copy_call(torch, "aten::relu", [[64, 8]], 5)
    out = copy()
    assert tuple(out.shape) == (64, 5, 8) and out.is_contiguous()
    assert bc._copy_call(torch, "aten::mm", [[64, 8], [8, 4]], 5) is None
    assert bc._copy_call(torch, "aten::sum", [[64, 8], [], [], []], 5) is None


def test_smaller_batches_are_timed_a_quarter_at_a_time(monkeypatch):
    """A rewrite batches one loop's calls (16 heads), not a step's (192): the probe also times a quarter of the
    batch, and a quarter of that, down to 8."""
    assert (bp._ladder(192), bp._ladder(288), bp._ladder(31), bp._ladder(32)) == ([48, 12], [72, 18], [], [8])
    sizes = []

    def timed(fn):
        out = fn()
        sizes.append(out.shape[0])
        return out.shape[0] * 1e-8  # 10 ns an item
    monkeypatch.setattr(bp, "timed", timed)
    monkeypatch.setattr(bp, "_warm", lambda fn: None)
    got = bp.measure([("aten::mm", [[4, 8], [8, 4]], 64.0, None, None)], threads=1)
    assert got["ops"] == [{"name": "aten::mm", "shapes": [[4, 8], [8, 4]], "per_step": 64.0, "batch": 64,
                           "ns": 640, "ladder": [[16, 160]], "hot": [[64, 640], [16, 160]],
                           "wide": [[64, 40], [16, 40]]}]
    # back to back, then each after the caches are emptied; the wide matmuls: [4, 8] x [8, 256], [4, 8] x [8, 64];
    # all of it twice (PASSES)
    assert sizes == ([64] * 14 + [16] * 14 + [4] * 28) * 2


def test_each_time_is_the_lesser_of_two_passes(monkeypatch):
    """A slow period during one op's timing is not its time: every group is timed again after all of them, and
    each number is the lesser. Here the first pass of the first op ran 10x slow (its batch, ladder and wide
    matmuls), the second op's second pass 3x."""
    passes = iter([10, 1, 1, 3])  # (op, pass) in the order timed: op 1, op 2, then op 1, op 2 again

    def entry(torch, group, evict):
        f = next(passes)
        return {"name": group[0], "shapes": group[1], "per_step": 64.0, "batch": 64, "ns": 640 * f,
                "ladder": [[16, 160 * f]], "wide": [[64, 40 * f], [16, 30 * f]], "copy_ns": 50 * f}
    monkeypatch.setattr(bp, "_entry", entry)
    monkeypatch.setattr(bp, "Evict", lambda torch, threads: cc.Evict(torch, threads, per_core=2 << 20))
    got = bp.measure([("aten::mm", [[4, 8], [8, 4]], 64.0, None, None),
                      ("aten::tanh", [[4, 8]], 64.0, None, None)], threads=1)
    assert got["ops"] == [
        {"name": "aten::mm", "shapes": [[4, 8], [8, 4]], "per_step": 64.0, "batch": 64, "ns": 640,
         "ladder": [[16, 160]], "wide": [[64, 40], [16, 30]], "copy_ns": 50},
        {"name": "aten::tanh", "shapes": [[4, 8]], "per_step": 64.0, "batch": 64, "ns": 640,
         "ladder": [[16, 160]], "wide": [[64, 40], [16, 30]], "copy_ns": 50}]
    assert "the median of 7 calls each after 4 MiB written (the cores' caches emptied, as a step's other ops " \
        "leave them), the lesser of 2 passes" in got["source"]

def test_the_wide_matmul_folds_the_batch_into_the_smallest_dimension():
    """Per-head attention's three kinds (issue 39, seventh round), 16 heads: the projections [512, 128] x
    [128, 8] side by side (N), their weights' gradients [8, 512] x [512, 128] stacked (M), their input gradients
    [512, 8] x [8, 128] summed (K); an addmm folded along N keeps its bias; a bmm has no wide form."""
    import torch

    def shapes(fn):
        out = fn()
        return tuple(out.shape)
    assert shapes(bc._wide_call(torch, "aten::mm", [[512, 128], [128, 8]], 16)) == (512, 128)
    assert shapes(bc._wide_call(torch, "aten::mm", [[8, 512], [512, 128]], 16)) == (128, 128)
    assert shapes(bc._wide_call(torch, "aten::mm", [[512, 8], [8, 128]], 16)) == (512, 128)
    fn = bc._wide_call(torch, "aten::addmm", [[8], [512, 128], [128, 8]], 16)
    assert shapes(fn) == (512, 128) and fn.__code__.co_names[-1] == "addmm"
    assert bc._wide_call(torch, "aten::bmm", [[4, 8, 8], [4, 8, 8]], 16) is None


def test_a_tensor_times_a_number_is_batched_over_the_tensor():
    """`att * scale` records Input Dims [[16, 65, 65], []]: the number is no input to stack (issue 39, eighth round:
    a ViT's per-head score scaling went unprobed, at the rate of the step's GELU). An op that needs two tensors
    (tanh_backward) is not built from one."""
    import torch
    out = bc._call(torch, "aten::mul", [[16, 65, 65], []], 3)()
    assert tuple(out.shape) == (3, 16, 65, 65)
    assert bc._call(torch, "aten::tanh_backward", [[4, 8], []], 3) is None
    assert bc._call(torch, "aten::maximum", [[4, 8], []], 3) is None


def test_each_timed_call_comes_after_the_cores_caches_are_emptied(monkeypatch):
    """In a step, an op's tensors are no longer in the core's cache when it runs (issue 39, twelfth round): the
    probe writes twice the per-core cache per thread before each timed call, not before the warm-up calls."""
    log = []
    monkeypatch.setattr(bp, "Evict", lambda torch, threads: type("E", (), {
        "nbytes": (4 << 20) * threads, "__call__": lambda self: log.append("evict")})())
    monkeypatch.setattr(bp, "timed", lambda fn: (log.append("timed"), fn(), 1e-6)[2])
    monkeypatch.setattr(bp, "_warm", lambda fn: log.append("warm"))
    monkeypatch.setattr(bp, "_ladder", lambda batch: [])
    monkeypatch.setattr(bp, "PASSES", 1)
    got = bp.measure([("aten::tanh", [[64, 8]], 16.0, None, None)], threads=1)
    assert got["ops"][0]["ns"] == 1000
    # the batched tanh, then its output copied with the batch second: each warmed, 7 calls back to back (the
    # optimistic variant's), then 7 after the caches are emptied
    assert log == (["warm"] + ["timed"] * 7 + ["evict", "timed"] * 7) * 2
