"""What a loop's small ops cost once batched, measured on this machine by `perfsleuth run` (issue 39).

The batched-ops forecast replaces a loop of small ops by one whole-tensor op per distinct op. Derived from
the trace alone, the whole-tensor op's time is the loop's arithmetic at a rate some other op of the step ran
at; a batched matmul of 96 8x8 matrices does not run at the rate of the step's one large matmul, and a
`tanh` over 96 slices at once not at the rate of the loop's `tanh` less its dispatch. `perfsleuth run` holds
torch and the recorded shapes, so it times the batched op itself: for each op of the window's exported trace
(read with msgspec, the fields needed only) that repeats at least MIN_PER_STEP times a step with the same
float32 input shapes (and is short: under SHORT_US a call), the same op over a batch of `batch` such inputs
stacked on a new first dimension -- a `mm` / `addmm` as a `bmm` / `baddbmm`, an elementwise or softmax op over
the stacked tensors -- at the window's thread count, the median of REPEATS calls after warming up. A matmul
with a dimension of 1 is also timed in the elementwise form people write for it (`_broadcast_call`), and the
faster form is kept (`form`). Only
the ops listed in OPS (their arguments are known from the shapes alone); the rest keep the derived rate.

Recorded in the trace's `perfsleuth_final` metadata as `batched_probe`:
    {"threads": 1, "source": "...", "seconds": 0.41,
     "ops": [{"name": "aten::addmm", "shapes": [[8], [64, 8], [8, 8], [], []], "per_step": 288.0, "batch": 288,
              "ns": 429938}, ...]}
(a matmul with a dimension of 1 also has "form": "batched" or "broadcast", the faster one)
(`ns`: one call over the whole batch; per item, ns / batch; `seconds`: what the probe cost the run). After the
recorded window, only with --record-shapes: the reading (0.4 s for the 35 MB of a 5-step loop window) and at
most MAX_SECONDS of timing; never on a GPU run, whose host op times are launches.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any, Optional

import msgspec

from .cpu_peak import timed

log = logging.getLogger(__name__)

MIN_PER_STEP = 8  # an op repeated at least this often per step with the same shapes (analysis/loops: MIN_REPEAT)
SHORT_US = 50.0  # ... and short (analysis/loops: a loop's ops are short)
MAX_GROUPS = 48  # the most repeated ones first
MAX_BATCH = 1024
MAX_BYTES = 64 << 20  # the largest batched input
REPEATS = 7
WARM_CALLS, WARM_NS = 3, 2_000_000  # before timing, at least this many calls and this long: the first calls of
# a batched op on fresh tensors ran 1.5-2x its steady time (page faults, the allocator, the caches)
MAX_SECONDS = 1.0  # the probe's own budget
ENV = "PERFSLEUTH_NO_BATCHED_PROBE"  # set: no probe (tests that must not time anything)

UNARY = ("tanh", "relu", "sigmoid", "gelu", "silu", "exp", "log", "neg", "abs", "sqrt", "rsqrt", "sin", "cos",
         "reciprocal", "square", "erf", "log_sigmoid")
BINARY = ("add", "sub", "mul", "div", "tanh_backward", "sigmoid_backward", "gelu_backward", "silu_backward",
          "maximum", "minimum", "pow")
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


def _numel(shapes: list) -> int:
    total = 0
    for s in shapes:
        n = 1
        for d in s if isinstance(s, list) else []:
            n *= d if isinstance(d, int) and d > 0 else 1
        total = max(total, n)
    return total


class _Args(msgspec.Struct):
    dims: Optional[list] = msgspec.field(name="Input Dims", default=None)
    types: Optional[list] = msgspec.field(name="Input type", default=None)
    concrete: Optional[list] = msgspec.field(name="Concrete Inputs", default=None)
    strides: Optional[list] = msgspec.field(name="Input Strides", default=None)


class _Event(msgspec.Struct):
    name: str = ""
    cat: str = ""
    dur: float = 0.0
    args: Optional[_Args] = None


class _Doc(msgspec.Struct):
    traceEvents: list[_Event] = []


def _key(dims: Any) -> str:
    return json.dumps(dims, separators=(",", ":"))


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while the window is decoded: the decoded events hold no reference
    cycles, yet their millions of new objects set it off, and each full collection walks the whole heap. On
    grouped_mlp's 35 MB window five of them took 1.2 s of the probe's 1.5 s (gc.callbacks, in the user's
    process); 0.36 s with it paused."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def groups_of(trace_json: Path, steps: int) -> list:
    """[(name, shapes, per_step, concrete inputs or None, strides or None)] of the ops of the window's trace
    (the JSON torch exported) that this probe can batch: float32 inputs, repeated at least MIN_PER_STEP times
    a step with the same shapes, short; the most repeated first (at most MAX_GROUPS). Read with msgspec: only
    the fields needed (the profiler's own `key_averages` took 8 s over the 96,000 events of a 5-step loop
    window)."""
    with _collector_paused():
        doc = msgspec.json.decode(Path(trace_json).read_bytes(), type=_Doc)
    seen: dict = {}  # (name, dims, concrete) -> [calls, µs, dims, concrete, {layout: [calls, strides]}]
    for e in doc.traceEvents:
        if e.cat != "cpu_op" or e.name not in OPS or e.args is None or not isinstance(e.args.dims, list):
            continue
        types = e.args.types or []
        if any(isinstance(d, list) and d and (i >= len(types) or types[i] != "float")
               for i, d in enumerate(e.args.dims)):
            continue  # fp32 tensors only: the batched op is built in float32
        concrete = e.args.concrete if e.name in CONCRETE and isinstance(e.args.concrete, list) else None
        g = seen.setdefault((e.name, _key(e.args.dims), _key(concrete)), [0, 0.0, e.args.dims, concrete, {}])
        g[0] += 1
        g[1] += e.dur
        g[4].setdefault(_key(e.args.strides), [0, e.args.strides])[0] += 1
    out = []
    for (name, _, _), (n, us, dims, concrete, layouts) in seen.items():
        per_step = n / max(steps, 1)
        if per_step >= MIN_PER_STEP and us / n <= SHORT_US:
            strides = max(layouts.values(), key=lambda v: v[0])[1]  # the calls' most common layout
            out.append((name, dims, per_step, concrete, strides))
    out.sort(key=lambda g: -g[2])
    return out[:MAX_GROUPS]


def measure(groups: list, threads: int) -> Optional[dict]:
    """Each group's batched op timed at `threads` threads (see the module's docstring); None when no group
    could be built."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    started = time.perf_counter()
    ops = []
    try:
        with torch.no_grad():
            for name, shapes, per_step, concrete, strides in groups:
                if time.perf_counter() - started > MAX_SECONDS:
                    break
                item = max(_numel(shapes), 1) * 4
                batch = _fits(shapes, strides, int(max(2, min(round(per_step), MAX_BATCH, MAX_BYTES // item))))
                try:
                    fn = _call(torch, name, shapes, batch, concrete, strides)
                    if fn is None:
                        continue
                    forms = {"batched": fn}
                    alt = _broadcast_call(torch, name, shapes, batch, strides)
                    if alt is not None:
                        forms["broadcast"] = alt
                    took = {}
                    for form, f in forms.items():
                        _warm(f)
                        # the median call, as the A/B a user runs takes medians (a ceiling would take the fastest)
                        took[form] = statistics.median(timed(f) for _ in range(REPEATS)) * 1e9
                    form = min(took, key=took.get)  # the faster rewrite of a matmul with a dimension of 1
                    best = took[form]
                except Exception as exc:  # noqa: BLE001 -- a shape this probe misread: that op keeps the derived rate
                    log.info("batched probe: %s %s: %s", name, shapes, exc)
                    continue
                ops.append({"name": name, "shapes": shapes, "per_step": round(per_step, 3), "batch": batch,
                            "ns": int(best), **({"form": form} if len(took) > 1 else {}),
                            **({"concrete": concrete} if concrete else {}),
                            **({"strides": strides} if strides else {})})
    finally:
        torch.set_num_threads(before)
    if not ops:
        return None
    try:
        load = f", load average {os.getloadavg()[0]:.1f}"
    except OSError:
        load = ""
    return {"threads": threads, "ops": ops,
            "source": (f"measured by perfsleuth run: each repeated small op batched over `batch` inputs of its "
                       f"recorded shapes (float32) at {threads} thread(s), the median of {REPEATS}{load}")}


def _warm(fn) -> None:
    t0, calls = time.perf_counter_ns(), 0
    while calls < WARM_CALLS or time.perf_counter_ns() - t0 < WARM_NS:
        fn()
        calls += 1


def for_run(trace_json: Optional[Path], steps: int, record_shapes: bool, threads: Optional[int] = None) \
        -> Optional[dict]:
    """`perfsleuth run`'s probe over the window's exported trace, on a CPU-only machine (None on a GPU, without
    recorded shapes, with PERFSLEUTH_NO_BATCHED_PROBE set, or when nothing repeats); never raises."""
    if not record_shapes or trace_json is None or os.environ.get(ENV):
        return None
    try:
        import torch

        if torch.cuda.is_available():
            return None
        t0 = time.perf_counter()
        groups = groups_of(trace_json, steps)
        out = measure(groups, int(threads) if threads else torch.get_num_threads()) if groups else None
        if out is not None:
            out["seconds"] = round(time.perf_counter() - t0, 3)  # what the probe cost the run, reading included
        return out
    except Exception as exc:  # noqa: BLE001 -- never the user's run's problem
        log.warning("no batched-op probe: %s", exc)
        return None
