"""The batched calls `perfsleuth run`'s probe times (record/batched_probe.py, issue 39): for an op the loop
repeats, the same op over a stack of `batch` inputs of its recorded shapes (float32), laid out as the loop's
items lie (their recorded strides); for a matmul with a dimension of 1 also the broadcast form people write,
and for an elementwise op the copy of its batched output with the batch moved second. Each builder returns
a function of no arguments, or None when the shapes (and Concrete Inputs) do not give its arguments."""

from __future__ import annotations

import json
from typing import Any, Optional

UNARY = ("tanh", "relu", "sigmoid", "gelu", "silu", "exp", "log", "neg", "abs", "sqrt", "rsqrt", "sin", "cos",
         "reciprocal", "square", "erf", "log_sigmoid")
BINARY = ("add", "sub", "mul", "div", "tanh_backward", "sigmoid_backward", "gelu_backward", "silu_backward",
          "maximum", "minimum", "pow")
SCALAR_BINARY = ("add", "sub", "mul", "div", "pow")  # also with a number as the second input
OPS = frozenset([f"aten::{o}" for o in UNARY + BINARY] + [
    "aten::threshold_backward", "aten::_softmax", "aten::_log_softmax", "aten::_softmax_backward_data",
    "aten::_log_softmax_backward_data", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::sum"])
# the ops whose arguments beyond the shapes (a reduction's dims) come from the trace's `Concrete Inputs`
CONCRETE = frozenset(["aten::sum"])


def _tensors(shapes: list, n: int) -> Optional[list]:
    """The first `n` inputs' shapes, each a non-empty list of ints; None otherwise."""
    if len(shapes) < n:
        return None
    out = shapes[:n]
    if not all(isinstance(s, list) and s and all(isinstance(d, int) and d > 0 for d in s) for s in out):
        return None
    return out


def _layout(shape: list, strides: Any) -> Optional[tuple]:
    """Where the loop's items lie, from one item's recorded strides: (the batch's stride, how many items fit
    or None). An item with no gaps (contiguous, or transposed: its strides a permutation of a contiguous
    tensor's) is stacked after the others; one with gaps -- a slice `x[:, g]` of a bigger tensor, strides
    [768, 1] for [64, 8] -- has the loop's other slices in them: the batch's stride is the dense block's size
    (8) and as many items fit as the first gap holds (768 / 8 = 96). None: no strides, or nothing fits."""
    if not isinstance(strides, list) or len(strides) != len(shape) \
            or not all(isinstance(x, int) and x >= 0 for x in strides):
        return None
    dense = 1
    for i in sorted(range(len(shape)), key=lambda i: (strides[i], shape[i])):
        if shape[i] == 1 or strides[i] == 0:  # a broadcast dimension (expand) takes no room
            continue
        if strides[i] != dense:
            fit = strides[i] // dense
            return (dense, fit) if fit >= 2 else None
        dense *= shape[i]
    return dense, None


def _stride(strides: Optional[list], i: int) -> Any:
    """Input `i`'s recorded strides (None when the trace has none for it)."""
    return strides[i] if strides and i < len(strides) else None


def _fits(shapes: list, strides: Optional[list], batch: int) -> int:
    """The batch: `batch`, or fewer when the loop's slices of one tensor hold fewer items (at least 2)."""
    for i, shape in enumerate(shapes):
        lay = _layout(shape, _stride(strides, i))
        if lay is not None and lay[1] is not None:
            batch = min(batch, lay[1])
    return max(batch, 2)


def _input(torch, shape: list, strides: Any, batch: int, rank: Optional[int] = None):
    """A batch of `batch` items of `shape` on a new first dimension, laid out as the loop's items lie
    (`_layout`: interleaved where the recorded strides have gaps), aligned to `rank` (broadcasting kept)."""
    lay = _layout(shape, strides)
    if lay is None:
        x = torch.randn(batch, *shape)
    else:
        step = lay[0]
        size = (batch - 1) * step + sum((d - 1) * st for d, st in zip(shape, strides)) + 1
        x = torch.as_strided(torch.randn(size), (batch, *shape), (step, *strides))
    for _ in range((rank or len(shape)) - len(shape)):
        x = x.unsqueeze(1)
    return x


def _sum_dims(concrete: Optional[list], rank: int) -> Optional[tuple]:
    """A sum's (dims, keepdim) from its Concrete Inputs (['', '[0]', 'True', '']), the dims moved past the
    batch's; all of an item's dims for a sum without any; None when they cannot be read."""
    if not concrete or len(concrete) < 2 or concrete[1] in ("", None):
        return tuple(range(1, rank + 1)), False
    try:
        dims = json.loads(concrete[1]) if isinstance(concrete[1], str) else concrete[1]
    except ValueError:
        return None
    dims = [dims] if isinstance(dims, int) else dims
    if not isinstance(dims, list) or not all(isinstance(d, int) and -rank <= d < rank for d in dims):
        return None
    keep = len(concrete) > 2 and str(concrete[2]) == "True"
    return tuple(d + 1 if d >= 0 else d for d in dims) or tuple(range(1, rank + 1)), keep


def _call(torch, name: str, shapes: list, batch: int, concrete: Optional[list] = None,
          strides: Optional[list] = None):
    """A function running `name` batched over `batch` inputs of `shapes` (float32), each input laid out as the
    loop's lie (`strides`: the recorded Input Strides; `_layout`), or None when this probe cannot build its
    arguments from the shapes (and, for a sum, its Concrete Inputs). `batch` should be `_fits`'."""
    op = name.split("::", 1)[-1]
    aten = torch.ops.aten

    def at(i: int, shape: list, rank: Optional[int] = None):
        return _input(torch, shape, _stride(strides, i), batch, rank)
    if op == "sum":
        s = _tensors(shapes, 1)
        got = None if s is None else _sum_dims(concrete, len(s[0]))
        if got is None:
            return None
        x, (dims, keep) = at(0, s[0]), got
        return lambda: torch.sum(x, dim=dims, keepdim=keep)
    if op == "mm":
        s = _tensors(shapes, 2)
        if s is None or len(s[0]) != 2 or len(s[1]) != 2:
            return None
        a, b = at(0, s[0]), at(1, s[1])
        return lambda: torch.bmm(a, b)
    if op == "addmm":
        s = _tensors(shapes, 3)
        if s is None or len(s[1]) != 2 or len(s[2]) != 2 or len(s[0]) > 2:
            return None
        bias, a, b = at(0, s[0], 2), at(1, s[1]), at(2, s[2])
        return lambda: torch.baddbmm(bias, a, b)
    if op in ("bmm", "baddbmm"):
        s = _tensors(shapes, 2 if op == "bmm" else 3)
        if s is None or any(len(x) != 3 for x in s[-2:]):
            return None
        g = s[-1][0]
        a = torch.randn(batch * g, *s[-2][1:])
        b = torch.randn(batch * g, *s[-1][1:])
        if op == "bmm":
            return lambda: torch.bmm(a, b)
        s0 = s[0]
        bias = torch.randn(batch * s0[0], *s0[1:]) if len(s0) == 3 else torch.randn(*s0)  # else: broadcast
        return lambda: torch.baddbmm(bias, a, b)
    if op in UNARY:
        s = _tensors(shapes, 1)
        if s is None:
            return None
        x = at(0, s[0])
        x.copy_(x.abs() + 0.5)  # positive: log, sqrt, rsqrt stay finite (in place: the layout stays)
        fn = getattr(aten, op)
        return lambda: fn(x)
    if op in SCALAR_BINARY and len(shapes) >= 2 and shapes[1] == [] and _tensors(shapes, 1) is not None:
        # a tensor and a number (`att * scale`): the number is no input to stack (issue 39, eighth round: a ViT's
        # per-head score scaling, 64 calls a step, had gone at the rate of the step's GELU)
        x = at(0, shapes[0])
        x.copy_(x.abs() + 0.5)
        fn = getattr(aten, op)
        return lambda: fn(x, 0.5)
    if op in BINARY or op == "threshold_backward":
        s = _tensors(shapes, 2)
        if s is None:
            return None
        rank = max(len(x) for x in s)
        a, b = (at(i, x, rank) for i, x in enumerate(s))
        for x in (a, b):
            x.copy_(x.abs() + 0.5)
        if op == "threshold_backward":
            return lambda: aten.threshold_backward(a, b, 0.0)
        fn = getattr(aten, op)
        return lambda: fn(a, b)
    if op in ("_softmax", "_log_softmax"):
        s = _tensors(shapes, 1)
        if s is None:
            return None
        x = at(0, s[0])
        fn = getattr(aten, op)
        return lambda: fn(x, -1, False)
    if op in ("_softmax_backward_data", "_log_softmax_backward_data"):
        s = _tensors(shapes, 2)
        if s is None or s[0] != s[1]:
            return None
        g, y = at(0, s[0]), at(1, s[1])
        y.copy_(y.softmax(-1))
        fn = getattr(aten, op)
        return lambda: fn(g, y, -1, torch.float32)
    return None


def _broadcast_call(torch, name: str, shapes: list, batch: int, strides: Optional[list] = None):
    """The elementwise form of a batched `mm` / `addmm` with a dimension of 1, as people write that rewrite:
    an inner dimension of 1 is an outer product (`a * b + bias`: `x[:, :, None] * w + b` for a loop of
    nn.Linear(1, d)), an outer dimension of 1 a multiply and a sum over the inner one. None for any other op
    or shape. Issue 39: 48 nn.Linear(1, 16) over a batch of 256 ran as a baddbmm in 202 µs a step (CPU bmm
    calls a gemm per item), as a broadcast multiply-add in 46 µs."""
    op = name.split("::", 1)[-1]
    s = _tensors(shapes, 2 if op == "mm" else 3)
    if op not in ("mm", "addmm") or s is None:
        return None
    (m, k), (_, n) = s[-2], s[-1]
    if len(s[-2]) != 2 or len(s[-1]) != 2 or min(m, k, n) != 1 or (op == "addmm" and len(s[0]) > 2):
        return None
    bias = _input(torch, s[0], _stride(strides, 0), batch, 2) if op == "addmm" else None  # in `_call`'s order
    a, b = (_input(torch, x, _stride(strides, i), batch) for i, x in enumerate(s[-2:], start=len(s) - 2))
    if k == 1:
        product = (lambda: a * b)
    elif n == 1:
        product = (lambda: (a * b.transpose(1, 2)).sum(-1, keepdim=True))
    else:  # m == 1
        product = (lambda: (a.transpose(1, 2) * b).sum(-2, keepdim=True))
    return product if bias is None else (lambda: product() + bias)


def _wide_call(torch, name: str, shapes: list, batch: int):
    """For a 2-D `mm` / `addmm`: the one matmul a rewrite runs where the loop's iterations share an operand, the
    batch folded into the smallest dimension -- a shared input times the iterations' weights side by side (N),
    their weights' gradients against a shared input stacked (M), their input gradients summed (K: the heads'
    dimension inner, the engine's per-head sum gone). None for any other op or shape. Issue 39, seventh round:
    a per-head attention's 192 [512, 8] x [8, 128] input gradients a step took 26.4 ms as one bmm, 2.1 ms as
    [512, 1536] x [1536, 128]."""
    op = name.split("::", 1)[-1]
    s = _tensors(shapes, 2 if op == "mm" else 3)
    if op not in ("mm", "addmm") or s is None or len(s[-2]) != 2 or len(s[-1]) != 2 or \
            (op == "addmm" and len(s[0]) > 2):
        return None
    (m, k), (_, n) = s[-2], s[-1]
    fold = min((n, 0), (m, 1), (k, 2))[1]  # ties: N, then M
    m, k, n = m * batch if fold == 1 else m, k * batch if fold == 2 else k, n * batch if fold == 0 else n
    a, b = torch.randn(m, k), torch.randn(k, n)
    if op == "addmm" and fold == 0:
        bias = torch.randn(n)
        return lambda: torch.addmm(bias, a, b)
    return lambda: torch.mm(a, b)


def _copy_call(torch, name: str, shapes: list, batch: int, strides: Optional[list] = None):
    """For an elementwise op: the copy of its batched output with the batch's dimension moved second, as a rewrite
    does that gathers the loop's outputs with a cat along a later dimension (`out.transpose(0, 1).reshape(b, -1)`;
    analysis/forecast/models/batched_around.py). None for other ops. Issue 39: on `cat_loop`'s [32, 64, 16] the
    copy took 9.2 µs, a relu over it 3.7."""
    op = name.split("::", 1)[-1]
    s = _tensors(shapes, 1)
    if s is None or not (op in UNARY or op in BINARY or op == "threshold_backward"):
        return None
    x = _input(torch, s[0], _stride(strides, 0), batch).contiguous()
    return lambda: x.transpose(0, 1).contiguous()
