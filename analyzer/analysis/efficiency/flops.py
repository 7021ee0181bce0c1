"""FLOPs and bytes of one aten op from its recorded inputs (`Input Dims`, `Input type`, `Concrete
Inputs`): one model per op family. Called once per distinct signature (shapes.py), never per event.

Conventions (docs/efficiency.md):
- FLOPs count a multiply-add as 2. A matmul is 2·M·N·K, plus M·N for the bias of addmm / baddbmm
  (as TraceLens counts; torch.utils.flop_counter leaves the bias out).
- Bytes assume each tensor is read once and the output written once (perfect caching), so the
  arithmetic intensity they give is an upper bound.
- Attention (the fused SDPA kernels) is 4·B·H·Nq·Nkv·d forward, halved when causal (TraceLens does;
  flop_counter does not halve); the backward is 2.5x the forward (flop_counter's count).
- Which level is counted: the op that does the work, not the composite above it: aten::mm / addmm /
  bmm / baddbmm (not aten::linear, aten::matmul), aten::convolution (not conv2d or the backend op
  below it), the SDPA backend op (not aten::scaled_dot_product_attention; its math fallback runs
  bmm and softmax, which are counted), aten::copy_ (not aten::to / clone / contiguous). When two
  modelled ops nest (aten::relu over aten::clamp_min) only the outer one counts (shapes.py).
"""

from __future__ import annotations

import math
from typing import Optional

from . import rnn

# bytes per element of each `Input type`, and the precision a tensor core / vector unit runs it at
DTYPES = {"float": (4, "fp32"), "double": (8, "fp64"), "c10::BFloat16": (2, "bf16"),
          "c10::Half": (2, "fp16"), "c10::Float8_e4m3fn": (1, "fp8"),
          "c10::Float8_e5m2": (1, "fp8"), "c10::Float8_e4m3fnuz": (1, "fp8"),
          "c10::Float8_e5m2fnuz": (1, "fp8"), "long int": (8, "int64"), "int": (4, "int32"),
          "short int": (2, "int16"), "signed char": (1, "int8"), "unsigned char": (1, "uint8"),
          "bool": (1, "bool"), "c10::complex<float>": (8, "complex64"),
          "c10::complex<double>": (16, "complex128")}

MATMUL, CONV, ATTENTION, ELEMENTWISE, NORM, SOFTMAX, REDUCE, EMBEDDING, COPY = (
    "matmul", "convolution", "attention", "elementwise", "normalisation", "softmax", "reduction",
    "embedding", "copy")
# run on tensor cores / matrix units; the rest on vector units
MATRIX_FAMILIES = (MATMUL, CONV, ATTENTION)

UNARY = {"relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log", "neg", "rsqrt", "sqrt", "abs",
         "cos", "sin", "reciprocal", "erf", "hardtanh", "leaky_relu", "elu", "softplus", "mish",
         "hardswish", "clamp", "clamp_min", "clamp_max", "pow", "square", "log1p", "expm1", "sign",
         "floor", "ceil", "round", "exp2", "log2", "sgn", "relu_", "gelu_", "silu_", "sigmoid_",
         "tanh_", "exp_", "neg_", "sqrt_", "rsqrt_", "clamp_", "clamp_min_", "pow_", "hardtanh_",
         "leaky_relu_"}
BINARY = {"add", "sub", "mul", "div", "add_", "sub_", "mul_", "div_", "maximum", "minimum", "where",
          "masked_fill", "masked_fill_", "threshold_backward", "gelu_backward", "silu_backward",
          "sigmoid_backward", "tanh_backward", "hardtanh_backward", "eq", "ne", "lt", "le", "gt",
          "ge", "addcmul", "addcmul_", "addcdiv", "addcdiv_", "lerp", "lerp_", "rsub", "fmod",
          "remainder", "bitwise_and", "bitwise_or", "logical_and", "logical_or", "_foreach_add_",
          "_foreach_mul_"}
REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "norm", "var", "std", "prod", "argmax",
              "argmin", "linalg_vector_norm", "var_mean", "std_mean", "any", "all", "logsumexp"}
NORMS = {"native_layer_norm": 5, "native_batch_norm": 5, "cudnn_batch_norm": 5,
         "miopen_batch_norm": 5, "_native_batch_norm_legit": 5,
         "_native_batch_norm_legit_no_training": 5, "native_group_norm": 5, "_fused_rms_norm": 4,
         "native_layer_norm_backward": 8, "native_batch_norm_backward": 8,
         "cudnn_batch_norm_backward": 8, "miopen_batch_norm_backward": 8,
         "native_group_norm_backward": 8, "_fused_rms_norm_backward": 7}
SOFTMAX_OPS = {"_softmax": (5, 2), "_log_softmax": (5, 2), "_softmax_backward_data": (4, 3),
               "_log_softmax_backward_data": (4, 3)}
# SDPA backends: (q, k, v) argument positions and where `is_causal` sits in Concrete Inputs;
# backward ops
SDPA = {"_scaled_dot_product_flash_attention": (0, 4, False),
        "_scaled_dot_product_flash_attention_for_cpu": (0, 4, False),
        "_scaled_dot_product_efficient_attention": (0, 6, False),
        "_scaled_dot_product_cudnn_attention": (0, 6, False),
        "_scaled_dot_product_flash_attention_backward": (1, 11, True),
        "_scaled_dot_product_flash_attention_for_cpu_backward": (1, 7, True),
        "_scaled_dot_product_efficient_attention_backward": (1, 11, True),
        "_scaled_dot_product_cudnn_attention_backward": (1, 12, True),
        "_flash_attention_forward": (0, 6, False), "_efficient_attention_forward": (0, 8, False),
        "_flash_attention_backward": (1, 10, True), "_efficient_attention_backward": (1, 11, True)}
MATMULS = {"mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "mv", "addmv"}
COPIES = {"copy_", "cat", "fill_", "zero_", "index_select", "gather", "scatter_add_", "index_add_",
          "stack"}


LIMIT = 1 << 62  # FLOPs or bytes of one call past this are no real op (int64 columns hold them)


def family_of(name: str) -> Optional[str]:
    """The family of a modelled op name (`aten::mm` -> "matmul"); None without a model."""
    if not name.startswith("aten::"):
        return None
    op = name[6:]
    if op in MATMULS or op in rnn.OPS:
        return MATMUL
    if op in ("convolution", "convolution_backward"):
        return CONV
    if op in SDPA:
        return ATTENTION
    if op in UNARY or op in BINARY:
        return ELEMENTWISE
    if op in NORMS:
        return NORM
    if op in SOFTMAX_OPS:
        return SOFTMAX
    if op in REDUCTIONS:
        return REDUCE
    if op in ("embedding", "embedding_dense_backward"):
        return EMBEDDING
    if op in COPIES:
        return COPY
    return None


def _numel(shape) -> int:
    return math.prod(int(x) for x in shape) if isinstance(shape, list) else 0


def _is_shape(d) -> bool:
    return isinstance(d, list) and all(isinstance(x, int) for x in d)


def _bpe(t: str) -> int:
    return DTYPES.get(t, (0, ""))[0]


def _tensors(dims: list, types: list) -> list:
    """(shape, bytes per element) of each tensor argument (a 0-dim tensor is one element; a
    `Scalar`, a list or an absent argument is none)."""
    out = []
    for d, t in zip(dims, types):
        if _is_shape(d) and t in DTYPES:
            out.append((d, _bpe(t)))
    return out


def _broadcast(shapes: list) -> list:
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, x in enumerate(s):
            j = rank - len(s) + i
            out[j] = max(out[j], int(x))
    return out


def _literal(text, default=None):
    """A Concrete Inputs string as a Python value: '[1, 1]' -> [1, 1], 'True' -> True, '2' -> 2."""
    if not isinstance(text, str) or text == "":
        return default
    t = text.strip()
    if t in ("True", "False"):
        return t == "True"
    if t.startswith("[") and t.endswith("]"):
        try:
            return [_literal(x.strip(), x.strip()) for x in t[1:-1].split(",") if x.strip()]
        except ValueError:
            return default
    try:
        return int(t)
    except ValueError:
        try:
            return float(t)
        except ValueError:
            return default


def model(name: str, dims: list, types: list, concrete: list) -> Optional[tuple]:
    """(family, flops, bytes, dtype) of one call, or None when the op has no model or its inputs do
    not
    fit it (the caller counts its time as unmodelled)."""
    fam = family_of(name)
    if fam is None or not isinstance(dims, list) or not isinstance(types, list):
        return None
    concrete = concrete if isinstance(concrete, list) else []
    op = name[6:]
    try:
        got = _MODELS[fam](op, dims, types, concrete)
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return None
    if got is None:
        return None
    flops, nbytes, dtype = got
    if not (0 <= flops < LIMIT and 0 <= nbytes < LIMIT):  # negative or absurd shapes: no model
        return None
    return fam, int(flops), int(nbytes), dtype


def _dtype(types: list, at: int = 0) -> str:
    t = types[at] if at < len(types) else ""
    return DTYPES.get(t, (0, t or "unknown"))[1]


def _matmul(op: str, dims: list, types: list, concrete: list):
    if op in rnn.OPS:  # recurrent layers (rnn.py)
        got = rnn.rnn_layer(op, dims, [_bpe(t) if _is_shape(d) else 0 for d, t in zip(dims, types)])
        return None if got is None else (*got, _dtype(types))
    if op in ("mm", "_scaled_mm"):
        (m, k), (k2, n) = dims[0], dims[1]
        a, b, bias, batch, at = 0, 1, None, 1, 0
    elif op == "addmm":
        (m, k), (k2, n) = dims[1], dims[2]
        a, b, bias, batch, at = 1, 2, 0, 1, 1
    elif op == "bmm":
        (batch, m, k), (_, k2, n) = dims[0], dims[1]
        a, b, bias, at = 0, 1, None, 0
    elif op == "baddbmm":
        (batch, m, k), (_, k2, n) = dims[1], dims[2]
        a, b, bias, at = 1, 2, 0, 1
    elif op in ("mv", "addmv"):
        a, b = (0, 1) if op == "mv" else (1, 2)
        (m, k), (k2,), n, batch, at = dims[a], dims[b], 1, 1, a
        bias = 0 if op == "addmv" else None
    else:
        return None
    if k != k2:
        return None
    flops = 2 * batch * m * n * k
    ta, tb = types[a], types[b]
    out_bpe = 2 if op == "_scaled_mm" else _bpe(ta)  # fp8 inputs, bf16 output by default
    nbytes = batch * (m * k * _bpe(ta) + k * n * _bpe(tb) + m * n * out_bpe)
    if bias is not None and _is_shape(dims[bias]):
        flops += batch * m * n
        nbytes += _numel(dims[bias]) * _bpe(types[bias])
    return flops, nbytes, _dtype(types, at)


def _out_spatial(size, k, stride, pad, dil, out_pad, transposed):
    if transposed:
        return (size - 1) * stride - 2 * pad + dil * (k - 1) + out_pad + 1
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def _per_dim(v, n: int, default: int) -> list:
    if isinstance(v, list) and len(v) == n:
        return [int(x) for x in v]
    if isinstance(v, list) and len(v) == 1:
        return [int(v[0])] * n
    return [int(v) if isinstance(v, int) else default] * n


def _conv(op: str, dims: list, types: list, concrete: list):
    # convolution: input, weight, bias, stride, padding, dilation, transposed, output_padding,
    # groups; convolution_backward: grad_output, input, weight, bias_sizes, stride, padding,
    # dilation, transposed, output_padding, groups, output_mask
    if op == "convolution":
        x, w, bias_dims = dims[0], dims[1], dims[2]
        stride, pad, dil = (_literal(concrete[i]) for i in (3, 4, 5))
        transposed, out_pad = bool(_literal(concrete[6], False)), _literal(concrete[7])
        mask = [True, False]
        grad = None
    else:
        grad, x, w = dims[0], dims[1], dims[2]
        stride, pad, dil = (_literal(concrete[i]) for i in (4, 5, 6))
        transposed, out_pad = bool(_literal(concrete[7], False)), _literal(concrete[8])
        mask = _literal(concrete[10], [True, True, True])
        bias_dims = []
    spatial = len(x) - 2
    stride, pad, dil, out_pad = (_per_dim(v, spatial, d)
                                 for v, d in ((stride, 1), (pad, 0), (dil, 1), (out_pad, 0)))
    ks = w[2:]
    out_sp = [_out_spatial(x[2 + i], ks[i], stride[i], pad[i], dil[i], out_pad[i], transposed)
              for i in range(spatial)]
    # 2 x (one output position per weight element) -- flop_counter's conv_flop_count
    flops_one = 2 * x[0] * _numel(w) * _numel(x[2:] if transposed else out_sp)
    bpe = _bpe(types[0])
    if grad is not None and _is_shape(grad):
        out_numel = _numel(grad)
    elif transposed:  # weight (in, out / groups, k...)
        out_numel = x[0] * w[1] * int(_literal(concrete[8], 1) or 1) * _numel(out_sp)
    else:
        out_numel = x[0] * w[0] * _numel(out_sp)
    tensors = _numel(x) + _numel(w) + out_numel
    if op == "convolution":
        flops = flops_one
        nbytes = tensors * bpe + (_numel(bias_dims) * bpe if _is_shape(bias_dims) else 0)
    else:
        n = int(bool(mask[0])) + int(bool(mask[1]))
        flops = n * flops_one
        nbytes = (tensors + _numel(x) * int(bool(mask[0])) + _numel(w) * int(bool(mask[1]))) * bpe
    return flops, nbytes, _dtype(types)


def _attention(op: str, dims: list, types: list, concrete: list):
    first, causal_at, backward = SDPA[op]
    q, k, v = dims[first], dims[first + 1], dims[first + 2]
    if not (_is_shape(q) and len(q) == 4 and _is_shape(k) and _is_shape(v)):
        return None
    if op.startswith("_flash_attention") or op.startswith("_efficient_attention"):
        b, nq, hq, d = q  # (batch, seq, heads, dim) at this level
        nkv, dv = k[1], v[3]
    else:
        b, hq, nq, d = q  # (batch, heads, seq, dim)
        nkv, dv = k[2], v[3]
    flops = 2 * b * hq * nq * nkv * (d + dv)
    if _literal(concrete[causal_at] if causal_at < len(concrete) else "", False) is True:
        flops //= 2
    bpe = _bpe(types[first])
    out = b * hq * nq * dv
    nbytes = (_numel(q) + _numel(k) + _numel(v) + out) * bpe
    if backward:
        flops = flops * 5 // 2
        nbytes *= 2  # reads q, k, v, out, grad_out; writes dq, dk, dv
    return flops, nbytes, _dtype(types, first)


def _elementwise(op: str, dims: list, types: list, concrete: list):
    ts = _tensors(dims, types)
    if not ts:
        return None
    out = _broadcast([s for s, _ in ts])
    n = _numel(out)
    nbytes = sum(_numel(s) * b for s, b in ts) + n * ts[0][1]
    if op.endswith("_") and not op.startswith("_"):  # in place: the output is the first input
        nbytes -= n * ts[0][1] if _numel(ts[0][0]) == n else 0
    return n, nbytes, _dtype(types)


def _norm(op: str, dims: list, types: list, concrete: list):
    ts = _tensors(dims, types)
    x = ts[0] if op.endswith("_backward") is False else ts[min(1, len(ts) - 1)]
    n = _numel(x[0])
    params = sum(_numel(s) * b for s, b in ts[1:] if _numel(s) < n)
    reads = 2 if op.endswith("_backward") else 1
    return NORMS[op] * n, n * x[1] * (reads + 1) + params, _dtype(types)


def _softmax(op: str, dims: list, types: list, concrete: list):
    per, touches = SOFTMAX_OPS[op]
    n = _numel(dims[0])
    return per * n, touches * n * _bpe(types[0]), _dtype(types)


def _reduce(op: str, dims: list, types: list, concrete: list):
    ts = _tensors(dims[:1], types[:1])
    if not ts:
        return None
    n = _numel(ts[0][0])
    return n, n * ts[0][1], _dtype(types)  # the (smaller) output is left out


def _embedding(op: str, dims: list, types: list, concrete: list):
    if op == "embedding":  # weight, indices
        w, idx = dims[0], dims[1]
        rows, width, bpe = _numel(idx), w[-1], _bpe(types[0])
        return 0, rows * width * bpe * 2 + rows * _bpe(types[1]), _dtype(types)
    grad, idx = dims[0], dims[1]  # embedding_dense_backward: grad_output, indices, num_weights
    n, bpe = _numel(grad), _bpe(types[0])
    num_weights = int(_literal(concrete[2], 0) or 0)
    return n, n * bpe + _numel(idx) * _bpe(types[1]) + num_weights * grad[-1] * bpe, _dtype(types)


def _copy(op: str, dims: list, types: list, concrete: list):
    if op in ("cat", "stack"):  # a TensorList: its shapes nested in the first argument
        first = dims[0] if dims and isinstance(dims[0], list) else []
        shapes = first if first and isinstance(first[0], list) else []
        n = sum(_numel(s) for s in shapes if _is_shape(s))
        bpe = _bpe(types[0].split(",")[0]) if types and types[0] in DTYPES else 0
        if not bpe:
            return None
        return 0, 2 * n * bpe, _dtype(types)
    ts = _tensors(dims, types)
    if not ts:
        return None
    if op in ("fill_", "zero_"):
        return 0, _numel(ts[0][0]) * ts[0][1], _dtype(types)
    if op == "copy_":  # self (written), src (read)
        dst, src = ts[0], ts[-1]
        return 0, _numel(dst[0]) * dst[1] + _numel(src[0]) * src[1], _dtype(types)
    if op == "index_select":  # self, dim, index: the selected rows are read and written
        idx = ts[-1]
        width = _numel(dims[0]) // max(int(dims[0][int(_literal(concrete[1], 0) or 0)]), 1)
        return 0, 2 * _numel(idx[0]) * width * ts[0][1] + _numel(idx[0]) * idx[1], _dtype(types)
    n = sum(_numel(s) * b for s, b in ts)
    return 0, n, _dtype(types)


_MODELS = {MATMUL: _matmul, CONV: _conv, ATTENTION: _attention, ELEMENTWISE: _elementwise,
           NORM: _norm, SOFTMAX: _softmax, REDUCE: _reduce, EMBEDDING: _embedding, COPY: _copy}


def misaligned(name: str, dims: list) -> bool:
    """A matmul whose M, N or K is not a multiple of 8: tensor cores pad or fall back (16-bit and
    8-bit
    types want multiples of 8, 16 for fp8; NVIDIA's matmul performance guide)."""
    op = name[6:] if name.startswith("aten::") else name
    at = {"mm": (0, 1), "_scaled_mm": (0, 1), "addmm": (1, 2), "bmm": (0, 1),
          "baddbmm": (1, 2)}.get(op)
    if at is None or len(dims) <= at[1] or not (_is_shape(dims[at[0]]) and _is_shape(dims[at[1]])):
        return False
    a, b = dims[at[0]], dims[at[1]]
    if len(a) < 2 or len(b) < 2:
        return False
    return any(int(x) % 8 for x in (a[-2], a[-1], b[-1]))


def score_softmax(name: str, dims: list) -> bool:
    """A softmax over an attention score matrix written out: input (..., N, N) of 3+ dims, N >= 32
    -- what
    attention as matmul + softmax materialises and scaled_dot_product_attention never does."""
    if name not in ("aten::_softmax", "aten::_softmax_backward_data", "aten::_log_softmax"):
        return False
    x = dims[0] if dims else None
    return bool(_is_shape(x) and len(x) >= 3 and x[-1] == x[-2] and x[-1] >= 32)
