"""FLOPs and bytes of the recurrent layers a CPU runs as one op: `aten::mkldnn_rnn_layer` (nn.LSTM,
nn.GRU, nn.RNN in fp32 / bf16 on a CPU with oneDNN) and its backward. torch's FlopCounterMode has no
formula for them (it counts an LSTM on the CPU as 0 FLOPs); found by benchmarks/flops_accuracy.py on
pytorch/examples' word_language_model (docs/accuracy.md).

A layer of G gates (LSTM 4, GRU 3, RNN 1) of hidden size H over T steps of a batch of B inputs of size I
multiplies, at each of the T·B positions, the input by W_ih [G·H, I] and the hidden state by W_hh
[G·H, H]: 2·T·B·G·H·(I + H) FLOPs, plus G·H per position for each bias vector. The gates' elementwise
work (a few FLOPs per element of the G·H gate values) is left out, as for the other matrix ops. The
backward computes the gradients of the input, the hidden state and both weights: twice the forward's
matrix FLOPs. Bytes: every tensor argument once, and the output sequence (T·B·H) written.
"""

from __future__ import annotations

import math
from typing import Optional

OPS = ("mkldnn_rnn_layer", "mkldnn_rnn_layer_backward")


def _numel(shape) -> int:
    return math.prod(int(x) for x in shape)


def _shape(d) -> bool:
    return isinstance(d, list) and bool(d) and all(isinstance(x, int) for x in d)


def rnn_layer(op: str, dims: list, bpe: list) -> Optional[tuple]:
    """(FLOPs, bytes) of one call from its Input Dims and each argument's bytes per element (0 for
    non-tensors); None when the shapes do not fit."""
    x, w_ih, w_hh = dims[0], dims[1], dims[2]
    if not (_shape(x) and len(x) == 3 and _shape(w_ih) and _shape(w_hh)):
        return None
    gh, i = w_ih
    gh2, h = w_hh
    if gh != gh2 or x[2] != i or not h:
        return None
    positions = x[0] * x[1]  # T·B, batch first or not
    tensors = sum(_numel(d) * b for d, b in zip(dims, bpe) if _shape(d) and b)
    out = positions * h * (bpe[0] or 4)
    if op == "mkldnn_rnn_layer":
        biases = sum(1 for d in dims[3:5] if _shape(d) and d == [gh])
        return 2 * positions * gh * (i + h) + biases * positions * gh, tensors + out
    return 4 * positions * gh * (i + h), 2 * tensors
