"""What a loop's small ops cost once batched, measured on this machine by `perfsleuth run` (issue 39).

The batched-ops forecast replaces a loop of small ops by one whole-tensor op per distinct op. Derived from
the trace alone, the whole-tensor op's time is the loop's arithmetic at a rate some other op of the step ran
at; a batched matmul of 96 8x8 matrices does not run at the rate of the step's one large matmul, and a
`tanh` over 96 slices at once not at the rate of the loop's `tanh` less its dispatch. `perfsleuth run` holds
torch and the recorded shapes, so it times the batched op itself: for each op of the window's exported trace
(read with msgspec, the fields needed only) that repeats at least MIN_PER_STEP times a step with the same
float32 input shapes (and is short: under SHORT_US a call), the same op over a batch of `batch` such inputs
stacked on a new first dimension -- a `mm` / `addmm` as a `bmm` / `baddbmm`, an elementwise or softmax op over
the stacked tensors -- at the window's thread count, the median of REPEATS calls after warming up, in PASSES passes
over all the groups, the lesser kept (`_lesser`: a slow period of the machine is not an op's time), each timed
call after the cores' caches were emptied (cold_cache.Evict: in a step, the op's tensors are no longer there). A
matmul with a dimension of 1 is also timed in the elementwise form people write for it (`_broadcast_call`), and
the faster form is kept (`form`). Only
the ops listed in OPS (their arguments are known from the shapes alone); the rest keep the derived rate.

Recorded in the trace's `perfsleuth_final` metadata as `batched_probe`:
    {"threads": 1, "source": "...", "seconds": 0.41,
     "ops": [{"name": "aten::addmm", "shapes": [[8], [64, 8], [8, 8], [], []], "per_step": 288.0, "batch": 288,
              "ns": 429938}, ...]}
(a matmul with a dimension of 1 also has "form": "batched" or "broadcast", the faster one; an elementwise op
"copy_ns": its batched output copied with the batch's dimension moved second, `_copy_call`; "ladder": [[size, ns
of one call over size items], ...] at a quarter of the batch at a time, down to LADDER_MIN: the analysis takes the
size nearest a loop's calls; a 2-D mm / addmm "wide": [[size, ns], ...] at the batch and the ladder's sizes, the one
matmul with the batch folded into its smallest dimension, `_wide_call`: the rewrite's where the iterations share an
operand; "hot": [[size, ns], ...] at the batch and the ladder's sizes, the same calls back to back, their tensors in
the cache: the forecast's optimistic variant)
(`ns`: one call over the whole batch; per item, ns / batch; `seconds`: what the probe cost the run). After the
recorded window, only with --record-shapes: the reading (0.4 s for the 35 MB of a 5-step loop window) and at
most MAX_SECONDS of timing in the first pass (as much again in each later one); never on a GPU run, whose host
op times are launches.
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

from .batched_calls import CONCRETE, OPS, _broadcast_call, _call, _copy_call, _fits, _wide_call
from .cold_cache import Evict
from .cpu_peak import timed

log = logging.getLogger(__name__)

MIN_PER_STEP = 8  # an op repeated at least this often per step with the same shapes (analysis/loops: MIN_REPEAT)
SHORT_US = 200.0  # ... and short (analysis/loops: a loop's op is under 50 µs, or 200 when its arithmetic is light)
MAX_GROUPS = 48  # the most repeated ones first
MAX_BATCH = 1024
MAX_BYTES = 64 << 20  # the largest batched input
REPEATS = 7
WARM_CALLS, WARM_NS = 3, 2_000_000  # before timing, at least this many calls and this long: the first calls of
# a batched op on fresh tensors ran 1.5-2x its steady time (page faults, the allocator, the caches)
MAX_SECONDS = 1.0  # the probe's own budget (its first pass)
VARY_SHARE = 0.25  # a size in under this share of an op's seldom-repeated calls varies from call to call (`_varying`)
PASSES = 2  # every group timed again after all the others: each number the lesser of the passes'
LADDER_STEP, LADDER_MIN = 4, 8  # smaller batches timed: a quarter of the batch at a time, down to this
ENV = "PERFSLEUTH_NO_BATCHED_PROBE"  # set: no probe (tests that must not time anything)

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
    out, few = [], []
    for (name, _, _), (n, us, dims, concrete, layouts) in seen.items():
        per_step = n / max(steps, 1)
        if us / n > SHORT_US:
            continue
        if per_step >= MIN_PER_STEP:
            strides = max(layouts.values(), key=lambda v: v[0])[1]  # the calls' most common layout
            out.append((name, dims, per_step, concrete, strides))
        else:
            few.append((name, n, us, dims, concrete))
    out += _varying(few, steps)
    out.sort(key=lambda g: -g[2])
    return out[:MAX_GROUPS]


def _is_tensor(d) -> bool:
    """Whether one of a call's Input Dims is a tensor's shape (not a number's, not an empty list)."""
    return isinstance(d, list) and bool(d) and all(isinstance(x, int) for x in d)


def _tensor_dims(dims: list) -> list:
    """The tensor inputs' shapes of a call, in order (numbers and empty lists left out, as the analysis's
    shape text leaves them)."""
    return [d for d in dims if _is_tensor(d)]


def _varying(few: list, steps: int) -> list:
    """Groups of calls whose shapes vary from call to call in some dimensions -- an MoE's experts, each fed the
    tokens routed to it (`expert(x[idx])`: [61, 64] x [64, 128], then [46, 64] x [64, 128], ...) -- that repeat
    MIN_PER_STEP times a step together though no one shape does. Of an op's calls `few` ((name, calls, µs,
    dims, concrete): exact shapes repeated too seldom), a size is rare when under VARY_SHARE of them have it (a
    model's widths are in most; each token count in few), and a call with exactly one rare size (above 1) varies
    in the dimensions that hold it. Calls alike in all other dimensions are one group: (name, shapes with the
    varying size the calls' median, per_step, concrete, None, [[input, dim], ...] the varying ones, counting tensor
    inputs only). The median, not the mean: a seldom call of the experts' widths (a [512, 64] x [64, 128] beside
    their [r, 64] x [64, 128]) joins the group, and the analysis scales each call by its own work anyway. Issue
    39, eighth round: an unseen MoE's 2990 expert matmuls in five steps had 308 distinct shapes, none repeated 8
    times a step."""
    by_name: dict = {}
    for g in few:
        by_name.setdefault(g[0], []).append(g)
    out = []
    for name, calls in by_name.items():
        total = sum(g[1] for g in calls)
        seen_in: dict = {}
        for _, n, _, dims, _ in calls:
            for size in {x for d in _tensor_dims(dims) for x in d}:
                seen_in[size] = seen_in.get(size, 0) + n
        families: dict = {}
        for _, n, us, dims, concrete in calls:
            tensors = _tensor_dims(dims)
            rare = {x for d in tensors for x in d if x > 1 and seen_in[x] < VARY_SHARE * total}
            if len(rare) != 1:  # none, or two (a seldom call of constant shapes: a router's [512, 16] x [16, 64])
                continue
            vary = tuple((k, j) for k, d in enumerate(tensors) for j, x in enumerate(d) if x in rare)
            key = (json.dumps([[x if (k, j) not in vary else -1 for j, x in enumerate(d)]
                               for k, d in enumerate(tensors)]), _key(concrete))
            f = families.setdefault(key, [0, 0.0, [], dims, concrete, vary])
            f[0] += n
            f[1] += us
            f[2].append((n, tensors))
        for n, us, members, dims, concrete, vary in families.values():
            if len(members) < 2 or n / max(steps, 1) < MIN_PER_STEP or us / n > SHORT_US:
                continue
            k, j = vary[0]
            size = statistics.median_low([t[k][j] for c, t in members for _ in range(c)])
            shapes, k = [], 0
            for d in dims:
                if _is_tensor(d):
                    d, k = [size if (k, j) in vary else x for j, x in enumerate(d)], k + 1
                shapes.append(d)
            out.append((name, shapes, n / max(steps, 1), concrete, None, [list(v) for v in vary]))
    return out


def measure(groups: list, threads: int) -> Optional[dict]:
    """Each group's batched op timed at `threads` threads (see the module's docstring), in PASSES passes over all
    the groups, each number the lesser of the passes' (`_lesser`); None when no group could be built."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    started = time.perf_counter()
    ops, kept = [], []
    try:
        evict = Evict(torch, threads)
        with torch.no_grad():
            for group in groups:
                if time.perf_counter() - started > MAX_SECONDS:
                    break
                entry = _entry(torch, group, evict)
                if entry is not None:
                    ops.append(entry)
                    kept.append(group)
            for _ in range(PASSES - 1):
                ops = [_lesser(e, _entry(torch, g, evict)) for e, g in zip(ops, kept)]
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
                       f"recorded shapes (float32) at {threads} thread(s), the median of {REPEATS} calls each after "
                       f"{evict.nbytes >> 20} MiB written (the cores' caches emptied, as a step's other ops leave "
                       f"them), the lesser of {PASSES} passes{load}")}


def _entry(torch, group, evict) -> Optional[dict]:
    """One group's record (the module's docstring), or None when its op cannot be built from the shapes."""
    name, shapes, per_step, concrete, strides, *vary = group
    item = max(_numel(shapes), 1) * 4
    batch = _fits(shapes, strides, int(max(2, min(round(per_step), MAX_BATCH, MAX_BYTES // item))))
    try:
        took = _forms(torch, name, shapes, batch, concrete, strides, evict)
        if not took:
            return None
        form = min(took, key=lambda f: took[f][0])  # the faster rewrite of a matmul with a dimension of 1
        best = took[form][0]
        hot = [[batch, int(min(h for _, h in took.values()))]]
        # a rewrite's op holds one loop's calls, not a step's: smaller batches too (see LADDER)
        ladder = []
        for size in _ladder(batch):
            if t := _forms(torch, name, shapes, size, concrete, strides, evict):
                ladder.append([size, int(min(c for c, _ in t.values()))])
                hot.append([size, int(min(h for _, h in t.values()))])
        # where the iterations share an operand, the rewrite's one wide matmul (the analysis decides)
        wide = [] if vary else [[size, int(_median_ns(fn, evict))] for size in [batch] + _ladder(batch)
                                if (fn := _wide_call(torch, name, shapes, size)) is not None]
        copy = _copy_call(torch, name, shapes, batch, strides)
        copy_ns = _median_ns(copy, evict) if copy is not None else None
    except Exception as exc:  # noqa: BLE001 -- a shape this probe misread: that op keeps the derived rate
        log.info("batched probe: %s %s: %s", name, shapes, exc)
        return None
    return {"name": name, "shapes": shapes, "per_step": round(per_step, 3), "batch": batch,
            "ns": int(best), **({"form": form} if len(took) > 1 else {}),
            **({"ladder": ladder} if ladder else {}),
            "hot": hot,
            **({"wide": wide} if wide else {}),
            **({"copy_ns": int(copy_ns)} if copy_ns is not None else {}),
            **({"vary": vary[0]} if vary else {}),
            **({"concrete": concrete} if concrete else {}),
            **({"strides": strides} if strides else {})}


def _lesser(a: dict, b: Optional[dict]) -> dict:
    """Record `a` with each of its times the lesser of `a`'s and `b`'s (the same group timed in a later pass):
    a slow period of the machine -- another process, the VM's steal -- during one op's timing is not that op's
    time. Issue 39, eighth round: one fitted run's probe timed a batched addmm at 13.5x and a tanh at 3.9x what the
    other two runs' did; its forecast came out at 0.18 of the measured speed-up."""
    if b is None:
        return a
    out = dict(a)
    if b["ns"] < a["ns"]:
        out["ns"] = b["ns"]
        if "form" in b:
            out["form"] = b["form"]
    for key in ("ladder", "wide", "hot"):
        if key in a and key in b:
            theirs = dict((size, ns) for size, ns in b[key])
            out[key] = [[size, min(ns, theirs.get(size, ns))] for size, ns in a[key]]
    if "copy_ns" in a and "copy_ns" in b:
        out["copy_ns"] = min(a["copy_ns"], b["copy_ns"])
    return out


def _forms(torch, name: str, shapes: list, batch: int, concrete, strides, evict) -> dict:
    """{form: (ns of one call over `batch` items, the same with the tensors in the cache: `_medians`)} for the batched
    op and, for a matmul with a dimension of 1, its broadcast form; empty when the op cannot be built."""
    fn = _call(torch, name, shapes, batch, concrete, strides)
    if fn is None:
        return {}
    forms = {"batched": fn}
    alt = _broadcast_call(torch, name, shapes, batch, strides)
    if alt is not None:
        forms["broadcast"] = alt
    return {form: _medians(f, evict) for form, f in forms.items()}


def _median_ns(fn, evict) -> float:
    """ns of the median of REPEATS calls of `fn` after warming it up, each after `evict()` (`_medians`)."""
    return _medians(fn, evict)[0]


def _medians(fn, evict) -> tuple:
    """(ns of the median of REPEATS calls of `fn` after warming it up, each after `evict()` (cold_cache.Evict: the
    core's cache emptied, as a step's other ops leave it); the same back to back, its tensors in the cache). The
    median, as the A/B a user runs takes medians (a ceiling would take the fastest)."""
    _warm(fn)
    hot = statistics.median(timed(fn) for _ in range(REPEATS)) * 1e9
    times = []
    for _ in range(REPEATS):
        evict()
        times.append(timed(fn))
    return statistics.median(times) * 1e9, hot


def _ladder(batch: int) -> list:
    """The smaller batches timed besides `batch`: a quarter at a time down to LADDER_MIN. A rewrite batches one
    loop (16 heads), not all of a step's calls (192): one bmm over 192 heads' input gradients wrote a 50 MB output
    in 26.4 ms where 12 of 16 took 3.9 (issue 39, seventh round)."""
    sizes, size = [], batch // LADDER_STEP
    while size >= LADDER_MIN:
        sizes.append(size)
        size //= LADDER_STEP
    return sizes


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
