"""Forecast model of DataLoader worker processes: W workers make the batches the step waits for.

Per batch, the loading is CPU work (core seconds) plus waiting (I/O, sleeps) -- split by the CPU time
`run` measured inside the loader, else assumed all CPU. In W worker processes the CPU work runs at the
speed one of n busy threads gets on this machine (`Machine.speed`: the capacity probe, or free cores),
the waits overlap freely, and handing a batch over costs CPU on both sides. The main process's own host
work slows down the same way when the workers take cores from it. n -- the main thread's busy share
plus the workers' -- comes from the replay itself, iterated to a fixed point. The replay runs the
workers as resources: batch j is made by worker j mod W once the main process has taken batch
j - prefetch*W, and the step's `__next__` waits for it.
"""

from __future__ import annotations

import math

import numpy as np

from dataclasses import fields
from typing import Optional

from ..registry import Inputs, NoForecast, model
from .loader_work import in_process_work
from ...machine import Machine
from ..timeline import LOADER
from ..plan import Plan, Workers, act_host, step_ns

# What a worker process costs beside the Dataset's own work, measured with benchmarks/handoff.py on the
# 2-core development machine, torch 2.13 (CPU), load average 0.5-0.7, two runs of 5 interleaved repeats
# (docs/forecast.md has the table): per batch of T tensors the worker spends 0.7-2.1 ms of CPU outside
# __getitem__ beyond what collating in-process costs (collate into shared memory, pickle, the queue's
# feeder thread, serving the file descriptors), fitted as 0.3 ms + 0.3 ms per tensor; the main process
# spends 0.5-1.5 ms per batch taking it (unpickle, receive the descriptors, map the memory), fitted as
# 0.4 ms + 0.2 ms per tensor. The Dataset's own work ran 1.06-1.29x slower in the worker than in-process
# (a Python-heavy Dataset; 1.3-1.5x on samples of under 0.1 ms): 1.1x. Pessimistic variant: twice the
# handoff; optimistic: half.
HANDOFF_WORKER_BATCH_NS = 300_000.0
HANDOFF_WORKER_NS = 300_000.0  # per tensor
HANDOFF_MAIN_BATCH_NS = 400_000.0
HANDOFF_MAIN_NS = 200_000.0  # per tensor
WORKER_SLOWDOWN = 1.1
# Wall time per batch that a worker spends neither computing nor handing over: its wait on the queues
# (the feeder thread, the pipe, waking the consumer). Measured by the same benchmark: wall minus the
# worker's CPU per batch was 0.22-0.78 ms (median 0.3). Pessimistic variant: twice; optimistic: half.
HANDOFF_WAIT_NS = 300_000.0
# Under contention the loading and the compute phases get different CPU shares by chance; a loader
# whose CPU share is at least half the main thread's is taken as all CPU work (a sleeping or I/O-bound
# loader gets far less).
CPU_BOUND = 0.5
DEFAULT_TENSORS = 2  # (inputs, targets) when the trace shows no collate
MAX_WORKERS = 8  # the fix's suggestion: min(8, free cores)
UNKNOWN_CORES_WORKERS = 4
ROUNDS = 6
ROUND_UP_FROM = 0.5  # free cores round to the nearest whole core (whole_free_cores)
TIE = 1.02  # a count forecast within 2% of the best is as good (the model is no finer): the free
#             cores' count is kept
CLOSE_CALL = (0.3, 0.7)  # ... a fraction of a core in here decided the count: said


def whole_free_cores(cores: float, others: Optional[float]) -> tuple[int, str]:
    """The free cores as a whole number, and how it was reached: the cores less what other
    processes kept busy, rounded to the nearest core (a half rounds up), at least 1. The busy
    figure is a measurement over the window (noise of a few tenths of a core: issue 40): 1.99 free
    cores are 2, not 1. When the fraction left is near a half (0.3-0.7) the rounding decided the
    count, and the text says so."""
    if not others:
        return max(1, int(round(cores))), f"{cores:g} cores"
    free = max(cores - others, 1.0)
    low = math.floor(free)
    whole = max(1, math.floor(free + ROUND_UP_FROM))
    what = f"{free:.1f} free of {cores:g} cores"
    if whole != free and CLOSE_CALL[0] <= free - low <= CLOSE_CALL[1]:
        what += f", rounded to {whole}: a close call between {low} and {low + 1}"
    elif abs(whole - free) >= 0.05:
        what += f", rounded to {whole}"
    return whole, what


def suggested_workers(cores: Optional[float], others: Optional[float],
                      before: int) -> tuple[int, str]:
    """The worker count the fix suggests -- its snippet (facts: `dataloader_workers_suggested`)
    and, unless another count forecasts faster (`dataloader_workers`), its forecast -- and why:
    min(8, free cores), always more than `before`. Free cores: `whole_free_cores` (rounded: int()
    made 1.99 free cores of a 2-core machine one worker, 0.80x measured, where two ran 1.7x; issue
    40). (One fewer than the cores, to leave the training loop one, measured worse on the 2-core
    machine: a Python-heavy Dataset's step went 0.93x with 1 worker and 1.36x with 2,
    docs/accuracy.md.)"""
    if not cores:
        return max(before + 1, UNKNOWN_CORES_WORKERS), f"cores unknown: {UNKNOWN_CORES_WORKERS}"
    whole, what = whole_free_cores(cores, others)
    return max(before + 1, min(MAX_WORKERS, whole)), f"min(8, {what})"


def forecast_counts(cores: float, before: int, suggested: int) -> list:
    """The worker counts the forecast compares (issue 40): from one more than now up to the cores
    and one above, at most MAX_WORKERS, and the suggested count."""
    top = min(MAX_WORKERS, max(1, int(round(cores))) + 1)
    return sorted(set(range(before + 1, top + 1)) | {suggested})


def advised_workers(curve: dict, suggested: int, before: int, why: str) -> tuple[int, str]:
    """The count the forecast advises and its `workers` assumption: the count with the best central
    forecast (`curve`: count -> speed-up), the suggested one unless another forecasts more than TIE
    (2%) faster; when every count forecasts below 1.0x, the least slow one, and the text says that
    no count helps on this machine."""
    best = max(curve, key=lambda c: (curve[c], -abs(c - suggested)))
    if suggested in curve and curve[suggested] * TIE >= curve[best]:
        best = suggested
    shown = ", ".join(f"{c}: {curve[c]:.2f}x" for c in sorted(curve))
    head = f"num_workers={best} (was {before}): "
    if curve[best] < 1.0:
        return best, (f"{head}no count helps on this machine, every count forecasts slower "
                      f"({shown}); the least slow is shown; the free cores: {why}")
    said = "" if best == suggested else f", not the free cores' {suggested}"
    return best, f"{head}the best forecast ({shown}){said}; the free cores: {why}"


def loading_cpu_fraction(m: Machine, multi: bool, before: int) -> tuple[float, Optional[float]]:
    """The part of the loading that is CPU work (and the measured CPU share it comes from, None when
    not recorded: then all of it)."""
    if multi:
        share = m.worker_cpu_share
        return _cpu_fraction(share, m.speed(1 + before)), share
    share = m.loader_cpu_share
    return _cpu_fraction(share, m.recording_speed), share


class AsItWas(Machine):
    """The machine as it was during the recording: the cores other processes kept busy over the window
    (`others_cores`) are not this run's, whatever the capacity probe said at its start."""

    def capacity(self, n: float) -> float:
        c = super().capacity(n)
        free = self.free_cores
        if self.others_cores is None or free is None:
            return c
        # what this run used while recorded was free by definition: never below the main thread's share
        return float(min(c, max(free, self.main_share or 0.0, 1e-3)))


def as_it_was(m: Machine) -> Machine:
    return AsItWas(**{f.name: getattr(m, f.name) for f in fields(m)})


def _cpu_fraction(share, speed: float) -> float:
    """The part of the loading that is CPU work: its CPU share over the speed a busy thread got."""
    if share is None or speed <= 0:
        return 1.0
    frac = share / speed
    return 1.0 if frac >= CPU_BOUND else frac


# Issue 37 item 4: where torch runs more than one intra-op thread and the workers would leave them fewer
# cores than threads, every parallel op waits at its barrier for a thread the OS descheduled -- far more
# than a fair share of the cores would cost, and nothing in the trace prices it. Measured on the 2-core
# machine, two torch threads, num_workers 0 -> 2 (benchmarks/unseen.py; docs/accuracy.md): the Lightning
# module 0.65x (this model had said 1.39-1.67x), a JPEG-decoding Dataset written elsewhere 0.98x (1.43x);
# a model step alone ran 8x slower with 2 threads than with 1 beside other processes. With one thread
# (issue 40's program: 1.47-1.61x measured, 1.66-1.72x forecast) the fair share holds.
THREADS_CROWDED = ("torch runs {threads} intra-op threads: with {workers} worker process{es} beside them "
                   "{busy} threads want the {free} free cores, and each parallel op then waits for threads "
                   "the OS has descheduled -- a cost the trace does not show (the Lightning module measured "
                   "0.65x with 2 workers where this model said 1.39x; docs/forecast.md); "
                   "`perfsleuth run --verify` measures it")


def _no_room_for_threads(m: Machine, workers: int) -> None:
    """NoForecast where the main process's intra-op threads and `workers` workers oversubscribe the cores
    other processes left free (THREADS_CROWDED)."""
    threads = m.torch_threads or 0
    free = m.free_cores
    if threads > 1 and free is not None and threads + workers > free + 0.5:
        raise NoForecast(THREADS_CROWDED.format(threads=threads, workers=workers, es="" if workers == 1 else "es",
                                                busy=threads + workers, free=f"{free:.1f}"))


def _loader_settings(x: Inputs) -> dict:
    loaders = [ld for ld in x.machine.loaders if isinstance(ld.get("num_workers"), int)]
    return max(loaders, key=lambda ld: ld["num_workers"]) if loaders else {}


def _tensors_per_batch(x: Inputs, loaders: np.ndarray) -> int:
    """Collate makes one tensor per field: an aten::stack (which calls aten::cat: one of them) for a
    field of tensors, a torch.tensor (aten::lift_fresh) for a field of Python numbers -- counted from
    the first stack on, since the samples' own torch.tensor calls come before the collate."""
    tl, ops = x.tl, x.ops
    if loaders.size == 0:
        return DEFAULT_TENSORS
    name = ops["name"].to_numpy()
    stacks = name == "aten::stack"
    if not stacks.any():
        stacks = name == "aten::cat"
    ts = ops["ts"].to_numpy()
    i = np.searchsorted(tl.t[loaders], ts, side="right") - 1
    inside = (i >= 0) & (ts < tl.e[loaders][np.clip(i, 0, None)])
    first = np.full(loaders.size, np.inf)
    np.minimum.at(first, i[inside & stacks], ts[inside & stacks])
    fields = inside & (stacks | ((name == "aten::lift_fresh") & (ts > first[np.clip(i, 0, None)])))
    if not (inside & stacks).any():
        return DEFAULT_TENSORS
    per = np.bincount(i[fields], minlength=loaders.size)
    return int(max(1, np.median(per)))


@model("dataloader-workers")
def dataloader_workers(x: Inputs, p: Plan, variant: str) -> dict:
    tl, m = x.tl, as_it_was(x.machine)
    loaders = np.flatnonzero(tl.kind == LOADER)
    if loaders.size == 0:
        raise NoForecast("no DataLoader __next__ in the replayed steps")
    multi = any("_MultiProcessing" in str(n) for n in tl.name[loaders])
    settings = _loader_settings(x)
    out: dict = {}
    if multi:
        w0 = settings.get("num_workers") or 0
        if w0 <= 0:
            w0 = 1
            out["workers_before"] = "1 (assumed: the worker count was not recorded)"
    else:
        w0 = 0
    cpu_frac, share = loading_cpu_fraction(m, multi, w0)
    target, why = suggested_workers(m.cores, m.others_cores, w0)
    asked = x.params.get("workers")
    if asked:
        target, why = int(asked), "as asked"
    _no_room_for_threads(m, int(asked) if asked else w0 + 1)
    out["workers"] = f"num_workers={target} (was {w0}): {why}"
    out.update(m.assumptions)
    if m.others_cores is not None:
        out["others"] = (f"other processes kept {m.others_cores:.2f} of the {m.cores:g} cores busy while recorded: "
                         f"this run's threads share the {m.free_cores:.2f} left")
    prefetch = int(settings.get("prefetch_factor") or 2)
    tensors = _tensors_per_batch(x, loaders) if not multi else DEFAULT_TENSORS
    s0 = m.recording_speed
    span = tl.e[loaders] - tl.t[loaders]
    gaps = tl.gap[loaders]
    if not multi:  # the loading as the fixes replayed before this one left it (the cached decoding gone)
        span = np.minimum(span, np.maximum(p.a[loaders] - gaps, 0.0))
    if multi:
        produce0 = w0 * float(np.median(np.diff(tl.steps["end"].to_numpy(np.float64), prepend=tl.steps["start"].iloc[0])))
        v0 = m.speed(1 + w0)
        cpu_core = cpu_frac * produce0 * v0  # core ns per batch, overheads included
        wait = produce0 * (1 - cpu_frac)
        out["batch"] = (f"{produce0 / 1e6:.2f} ms per batch per worker (workers x step), "
                        f"{cpu_frac:.0%} of it CPU" + (" (measured)" if share is not None else " (assumed)"))
    else:
        load = float(np.median(span))
        cpu_core = cpu_frac * load * s0
        wait = load * (1 - cpu_frac)
        out["batch"] = (f"{load / 1e6:.2f} ms in __next__ per batch, {cpu_frac:.0%} of it CPU"
                        + (" (measured)" if share is not None else " (assumed: all CPU work)"))
    pool = m.pool_per_main or 0.0
    if m.pool_per_main is not None:
        out["pool"] = (f"the training process's other threads (torch's intra-op pool, spinning or working) "
                       f"used {pool:.2f} CPU seconds per second of its main thread (measured): they compete "
                       f"with the workers for the cores as the main thread works")
    tl_steps = len(tl.steps)
    entry = p.fingerprint()
    before, _ = step_ns(p)

    def replay(target: int, k: float) -> tuple:
        """The step with `target` workers at handoff scale k (the busy threads' fixed point)."""
        main_core = k * (HANDOFF_MAIN_BATCH_NS + HANDOFF_MAIN_NS * tensors)
        worker_core, wait_k = cpu_core, wait
        if not multi:  # a multi-process loader's measured batch time holds the worker's side
            handoff = k * (HANDOFF_WORKER_BATCH_NS + HANDOFF_WORKER_NS * tensors)
            worker_core = cpu_core * WORKER_SLOWDOWN + handoff
            wait_k += k * HANDOFF_WAIT_NS
        n = 1.0 + pool + target
        for _ in range(ROUNDS):
            v = m.speed(n)
            p.a[:] = base_a
            p.a[loaders] = gaps + main_core / s0  # host work is stored at the recording speed
            p.host_speed = v / s0
            p.workers = Workers(count=target, produce_ns=wait_k + worker_core / v,
                                handoff_ns=main_core / v, prefetch=prefetch)
            step, _ = step_ns(p)
            window = step * tl_steps
            main_busy = (main_work + main_core * n_batches) / v
            busy_main = min(1.0, main_busy / window) if window > 0 else 1.0
            workers_busy = worker_core / v * n_batches
            busy_workers = min(float(target), workers_busy / window) if window > 0 else target
            n = 0.5 * n + 0.5 * max(1.0, busy_main * (1.0 + pool) + busy_workers)
        return step, n, v

    worker_ms = (HANDOFF_WORKER_BATCH_NS + HANDOFF_WORKER_NS * tensors) / 1e6
    main_ms = (HANDOFF_MAIN_BATCH_NS + HANDOFF_MAIN_NS * tensors) / 1e6
    worker_side = ("the workers' side is in the measured batch time; " if multi
                   else f"{worker_ms:g} ms of worker CPU and ")
    in_worker = ("" if multi else f"; the Dataset's work runs {WORKER_SLOWDOWN:g}x slower in a worker, and "
                 f"{HANDOFF_WAIT_NS / 1e6:g} ms of each worker's time waiting on the queues")
    out["handoff"] = (f"{tensors} tensor(s) per batch: {worker_side}{main_ms:g} ms of main-process CPU per batch"
                      f"{in_worker} (measured constants)")
    act_host(p, loaders, span)  # what the workers take over: the time in __next__
    base_a = p.a.copy()
    base_a[loaders] = gaps
    main_work = float(base_a.sum()) * s0  # core ns of host work over the window (excluding the old loading)
    n_batches = loaders.size
    if not asked and m.cores:
        counts = forecast_counts(m.cores, w0, target)
        curve = x.cached(("dataloader-workers curve", entry, tuple(counts)),
                         lambda: {c: before / replay(c, 1.0)[0] for c in counts})
        target, out["workers"] = advised_workers(curve, target, w0, why)
    k = {"low": 2.0, "central": 1.0, "high": 0.5}[variant]
    step, n, v = replay(target, k)
    out["cpu"] = (f"{n:.1f} busy threads of this run: {v:.2f} of a core each "
                  f"(the main thread had {s0:.2f} while recorded)")
    return out


# replayed after the other fixes (forecaster.py)
LOADER_MODELS = ("dataloader-workers", "dataloader-sample-work")


@model("dataloader-sample-work")
def dataloader_sample_work(x: Inputs, p: Plan, variant: str) -> dict:
    """`dataloader-slow`'s fix: with worker processes, more of them and deeper prefetching (the
    workers model); with the loader in the training process (issue 37), its Dataset's work made
    cheaper by its cause (loader_work.py)."""
    loaders = np.flatnonzero(x.tl.kind == LOADER)
    if loaders.size and not any("_MultiProcessing" in str(n) for n in x.tl.name[loaders]):
        return in_process_work(x, p, variant)
    return dataloader_workers(x, p, variant)
