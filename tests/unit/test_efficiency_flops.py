"""FLOPs and bytes per op (analysis/efficiency/flops.py): hand-computed numbers, torch's own
flop_counter registry on the same shapes, and TraceLens's perf report for the Qwen H100 trace
(fixtures/tracelens/h100_qwen: its GEMM.csv and SDPA_fwd.csv, MIT)."""

from __future__ import annotations

import ast
import csv
from pathlib import Path

import pytest

from perfsleuth.analysis.efficiency.flops import model
from perfsleuth.analysis.efficiency.shapes import decode_signature

TRACELENS = Path(__file__).resolve().parents[2] / "fixtures" / "tracelens" / "h100_qwen"
BF16, F32 = "c10::BFloat16", "float"


def test_matmul_hand_computed():
    # mm 8944x1024 @ 1024x2816 in bf16: 2·M·N·K; bytes (A + B + C) x 2
    assert model("aten::mm", [[8944, 1024], [1024, 2816]], [BF16, BF16], ["", ""]) == (
        "matmul", 2 * 8944 * 2816 * 1024, (8944 * 1024 + 1024 * 2816 + 8944 * 2816) * 2, "bf16")
    # addmm: the bias adds M·N FLOPs and N elements read
    fam, f, b, d = model("aten::addmm", [[32], [4, 128], [128, 32], [], []], [F32] * 3 + ["Scalar"] * 2,
                         ["", "", "", "1", "1"])
    assert (fam, f, b, d) == ("matmul", 2 * 4 * 32 * 128 + 4 * 32, (4 * 128 + 128 * 32 + 4 * 32 + 32) * 4, "fp32")
    fam, f, b, _ = model("aten::bmm", [[3, 5, 7], [3, 7, 11]], [F32, F32], ["", ""])
    assert (f, b) == (2 * 3 * 5 * 7 * 11, 3 * (35 + 77 + 55) * 4)
    assert model("aten::mm", [[4, 5], [6, 7]], [F32, F32], ["", ""]) is None  # K does not match: no model
    assert model("aten::linear", [[4, 128], [32, 128], [32]], [F32] * 3, ["", "", ""]) is None  # its addmm counts


def test_convolution_hand_computed():
    # 3->8 channels, 3x3, stride 2, padding 1 on 4x3x16x16: output 4x8x8x8
    dims = [[4, 3, 16, 16], [8, 3, 3, 3], [8], [], [], [], [], [], []]
    types = [F32, F32, F32, "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]
    concrete = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
    fam, f, b, d = model("aten::convolution", dims, types, concrete)
    out = 4 * 8 * 8 * 8
    assert (fam, f) == ("convolution", 2 * out * 3 * 3 * 3)
    assert b == (4 * 3 * 16 * 16 + 8 * 3 * 3 * 3 + out + 8) * 4
    # grouped, dilated backward (both gradients asked): twice the forward
    bdims = [[4, 8, 4, 4], [4, 8, 8, 8], [8, 4, 3, 3], [], [], [], [], [], [], [], []]
    bconc = ["", "", "", "[8]", "[1, 1]", "[0, 0]", "[2, 2]", "False", "[0, 0]", "2", "[True, True, True]"]
    _, fb, _, _ = model("aten::convolution_backward", bdims, [F32] * 3 + ["ScalarList"] * 8, bconc)
    assert fb == 2 * (2 * 4 * (8 * 4 * 3 * 3) * (4 * 4))


def test_attention_hand_computed_and_causal_halves():
    dims = [[2, 4, 128, 64]] * 3 + [[], [], [], []]
    types = [BF16] * 3 + ["Scalar"] * 4
    full = model("aten::_scaled_dot_product_flash_attention", dims, types, ["", "", "", "0.", "False", "False", ""])
    causal = model("aten::_scaled_dot_product_flash_attention", dims, types, ["", "", "", "0.", "True", "False", ""])
    assert full[1] == 4 * 2 * 4 * 128 * 128 * 64
    assert causal[1] == full[1] // 2
    assert full[2] == 4 * 2 * 4 * 128 * 64 * 2  # q, k, v, out in bf16


def test_elementwise_broadcast_and_scalars():
    # TraceLens's BinaryElementwise.csv rows: a bf16 mul with a broadcast operand; a float add of a double scalar
    _, f, b, _ = model("aten::mul", [[16, 16, 559, 64], [1, 1, 559, 64]], [BF16, BF16], ["", ""])
    assert (f, b) == (9158656, (9158656 + 35776 + 9158656) * 2)
    _, f, b, _ = model("aten::add", [[16, 559, 1], [], []], [F32, "double", "Scalar"], ["", "", "1"])
    assert (f, b) == (8944, 8944 * 4 + 8 + 8944 * 4)


def _shapes(x):
    return [tuple(s) for s in x]


@pytest.mark.parametrize("case", [
    ("mm", [[64, 96], [96, 48]], [F32, F32], ["", ""], 0),
    ("bmm", [[8, 64, 96], [8, 96, 48]], [F32, F32], ["", ""], 0),
    ("addmm", [[48], [64, 96], [96, 48], [], []], [F32] * 3 + ["Scalar"] * 2, ["", "", "", "1", "1"], 64 * 48),
    ("baddbmm", [[8, 64, 48], [8, 64, 96], [8, 96, 48], [], []], [F32] * 3 + ["Scalar"] * 2,
     ["", "", "", "1", "1"], 8 * 64 * 48),
])
def test_matmuls_match_torch_flop_counter(case):
    """flop_counter leaves the bias out: ours is higher by exactly M·N (per batch)."""
    import torch  # the test suite installs torch: a missing one fails, never skips
    from torch.utils.flop_counter import flop_registry

    op, dims, types, concrete, bias = case
    theirs = flop_registry[getattr(torch.ops.aten, op)](*_shapes([d for d in dims if d]))
    assert model(f"aten::{op}", dims, types, concrete)[1] == theirs + bias


def test_convolutions_match_torch_flop_counter():
    import torch  # the test suite installs torch: a missing one fails, never skips
    from torch.utils.flop_counter import flop_registry

    dims = [[4, 8, 16, 16], [16, 4, 3, 3], [16], [], [], [], [], [], []]
    concrete = ["", "", "", "[1, 1]", "[2, 2]", "[2, 2]", "False", "[0, 0]", "2"]
    ours = model("aten::convolution", dims, [F32] * 3 + ["ScalarList"] * 6, concrete)[1]
    theirs = flop_registry[torch.ops.aten.convolution]((4, 8, 16, 16), (16, 4, 3, 3), None, [1, 1], [2, 2], [2, 2],
                                                       False, out_val=(4, 16, 16, 16))
    assert ours == theirs
    # transposed: weight (in, out / groups, k, k); output (in - 1)·s - 2p + d(k - 1) + 1
    tdims = [[2, 8, 5, 5], [8, 3, 4, 4], [], [], [], [], [], [], []]
    tconc = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[0, 0]", "1"]
    ours = model("aten::convolution", tdims, [F32] * 2 + [""] + ["ScalarList"] * 6, tconc)[1]
    theirs = flop_registry[torch.ops.aten.convolution]((2, 8, 5, 5), (8, 3, 4, 4), None, [2, 2], [1, 1], [1, 1],
                                                       True, out_val=(2, 3, 10, 10))
    assert ours == theirs
    # backward, dx and dW asked for: groups=1 matches exactly; with groups=2 flop_counter's dW formula
    # ignores the groups (it convolves the whole input with the whole grad_output): higher by one forward
    fwd = 2 * 4 * (16 * 4 * 3 * 3) * (16 * 16)
    for groups, extra in ((1, 0), (2, fwd)):
        w = (16, 8 // groups, 3, 3)
        bdims = [[4, 16, 16, 16], [4, 8, 16, 16], list(w), [], [], [], [], [], [], [], []]
        bconc = ["", "", "", "[16]", "[1, 1]", "[2, 2]", "[2, 2]", "False", "[0, 0]", str(groups),
                 "[True, True, False]"]
        ours = model("aten::convolution_backward", bdims, [F32] * 3 + ["ScalarList"] * 8, bconc)[1]
        theirs = flop_registry[torch.ops.aten.convolution_backward](
            (4, 16, 16, 16), (4, 8, 16, 16), w, [16], [1, 1], [2, 2], [2, 2], False, [0, 0], groups,
            [True, True, False], out_val=[(4, 8, 16, 16), w, None])
        assert ours + extra * (groups == 2) == theirs, groups
        assert ours == 2 * fwd * (8 // groups) // 4


def test_attention_matches_torch_flop_counter_when_not_causal():
    """flop_counter never halves for causal masks; TraceLens and perfsleuth do."""
    import torch  # the test suite installs torch: a missing one fails, never skips
    from torch.utils.flop_counter import flop_registry

    q = (2, 4, 128, 64)
    dims = [list(q)] * 3 + [[], [], [], []]
    conc = ["", "", "", "0.", "False", "False", ""]
    ours = model("aten::_scaled_dot_product_flash_attention", dims, [BF16] * 3 + ["Scalar"] * 4, conc)[1]
    theirs = flop_registry[torch.ops.aten._scaled_dot_product_flash_attention](q, q, q, out_val=(q,))
    assert ours == theirs
    bdims = [list(q)] * 5 + [[2, 4, 128]] + [[]] * 9
    bconc = [""] * 11 + ["False"] + [""] * 3
    ours = model("aten::_scaled_dot_product_flash_attention_backward", bdims, [BF16] * 6 + ["Scalar"] * 9, bconc)[1]
    theirs = flop_registry[torch.ops.aten._scaled_dot_product_flash_attention_backward](
        q, q, q, q, q, (2, 4, 128), out_val=(q, q, q))
    assert ours == theirs


def _tracelens_rows(name: str) -> list:
    with open(TRACELENS / name, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _ours(row: dict) -> tuple:
    dims = ast.literal_eval(row["Input Dims_first"])
    types = ast.literal_eval(row["Input type_first"])
    concrete = ast.literal_eval(row["Concrete Inputs_first"])
    return model(row["name"], dims, types, concrete)


@pytest.mark.parametrize("csv_name", ["GEMM.csv", "SDPA_fwd.csv", "BinaryElementwise.csv"])
def test_tracelens_perf_report_flops_and_bytes(csv_name):
    """Every row of TraceLens's report on the Qwen H100 trace: the same FLOPs (GFLOPS_first x 1e9) and
    bytes (Data Moved (MB)_first, MiB) -- no differences on these families."""
    rows = _tracelens_rows(csv_name)
    assert rows
    for row in rows:
        fam, flops, nbytes, _ = _ours(row)
        assert flops == round(float(row["GFLOPS_first"]) * 1e9), row["name"]
        assert nbytes == round(float(row["Data Moved (MB)_first"]) * 2**20), row["name"]


def test_signature_text_decodes_once_into_dims_and_concrete():
    dims, concrete = decode_signature('[[2, 3], []]\x1f["", "1"]')
    assert (dims, concrete) == ([[2, 3], []], ["", "1"])
    assert decode_signature("") == ([], [])
    assert decode_signature("not json\x1f[") == ([], [])
