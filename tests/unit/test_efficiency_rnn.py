"""The recurrent layers a CPU runs as one op (aten::mkldnn_rnn_layer and its backward: nn.LSTM on the
CPU), which FlopCounterMode counts as 0 FLOPs: hand-computed numbers, and torch's FlopCounterMode on the
same LSTM run without oneDNN (then it runs as per-step matmuls FlopCounterMode counts)."""

from __future__ import annotations

import torch

from perfsleuth.analysis.efficiency import flops as fl

T, B, I, H, G = 35, 20, 32, 48, 4  # sequence, batch, input, hidden, gates (LSTM)
FWD_DIMS = [[T, B, I], [G * H, I], [G * H, H], [G * H], [G * H], [B, H], [B, H]] + [[]] * 9
FWD_TYPES = ["float"] * 7 + ["Scalar", "ScalarList"] + ["Scalar"] * 7
BWD_DIMS = ([[T, B, I], [G * H, I], [G * H, H], [G * H], [G * H], [B, H], [B, H], [T, B, H], [B, H], [B, H],
             [T, B, H], [], []] + [[]] * 9 + [[2068480]])
BWD_TYPES = ["float"] * 11 + ["", ""] + ["Scalar"] * 9 + ["float"]
MATRIX = 2 * T * B * G * H * (I + H)  # the two matmuls at each of the T·B positions


def test_lstm_layer_forward_and_backward_by_hand():
    fam, flops, nbytes, dtype = fl.model("aten::mkldnn_rnn_layer", FWD_DIMS, FWD_TYPES, [])
    assert (fam, dtype) == ("matmul", "fp32")
    assert flops == MATRIX + 2 * T * B * G * H == 21_772_800  # and the two bias vectors
    inputs = (T * B * I + G * H * I + G * H * H + 2 * G * H + 2 * B * H) * 4
    assert nbytes == inputs + T * B * H * 4 == 294_656
    fam, flops, nbytes, _ = fl.model("aten::mkldnn_rnn_layer_backward", BWD_DIMS, BWD_TYPES, [])
    assert fam == "matmul" and flops == 2 * MATRIX == 43_008_000
    assert fl.model("aten::mkldnn_rnn_layer", [[T, B, I + 1]] + FWD_DIMS[1:], FWD_TYPES, []) is None


def test_lstm_matches_flop_counter_on_its_matmul_path():
    """Without oneDNN the CPU LSTM runs per-step matmuls, which FlopCounterMode counts: forward and
    backward, 3 x 2·T·B·4H·(I + H), our two ops' FLOPs less the biases (which it leaves out)."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(I, H, 1)
    # the oneDNN backward computes every gradient: so must the matmul path (input and initial state)
    x = torch.randn(T, B, I, requires_grad=True)
    h0, c0 = (torch.zeros(1, B, H, requires_grad=True) for _ in range(2))
    with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as counter:
        out, _ = lstm(x, (h0, c0))
        out.sum().backward()
    ours = (fl.model("aten::mkldnn_rnn_layer", FWD_DIMS, FWD_TYPES, [])[1]
            + fl.model("aten::mkldnn_rnn_layer_backward", BWD_DIMS, BWD_TYPES, [])[1])
    assert counter.get_total_flops() == 3 * MATRIX
    assert ours - counter.get_total_flops() == 2 * T * B * G * H  # the bias adds
    with FlopCounterMode(display=False) as counter:  # with oneDNN: one op it has no formula for
        out, _ = lstm(x, (h0, c0))
        out.sum().backward()
    assert counter.get_total_flops() == 0


def test_the_runs_flop_counter_counts_the_lstm_layer_with_our_formula():
    """record/model_flops.py gives FlopCounterMode the formula it lacks: the LSTM counts, by name."""
    from torch.utils.flop_counter import FlopCounterMode

    from perfsleuth.record.model_flops import rnn_formulas

    lstm = torch.nn.LSTM(I, H, 1)
    x = torch.randn(T, B, I, requires_grad=True)
    with FlopCounterMode(display=False, custom_mapping=rnn_formulas()) as counter:
        out, _ = lstm(x)
        out.sum().backward()
    by_op = {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
    assert by_op == {"aten.mkldnn_rnn_layer": MATRIX + 2 * T * B * G * H,
                     "aten.mkldnn_rnn_layer_backward": 2 * MATRIX}
