"""The fixes `perfsleuth run --verify` can apply without editing the user's code: one entry per fix, saying
which rules it verifies, how the child process applies it (verify/child.py, verify/apply.py) and
whether that needs a fresh process per window. `plan` turns a report's findings into experiments.

An entry's `variants` names a function of the run's `Context` that gives the settings to try (a list of
parameter dicts) or why there is nothing to try (a string). The child reads `kind` and the parameters;
nothing here imports torch.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from ..analysis.forecast.models.loader import MAX_WORKERS, UNKNOWN_CORES_WORKERS, whole_free_cores

FRESH, TOGGLE = "fresh process per window", "toggled in one process"
CODE_CHANGE = "needs a code change: not tried"
SWEEP_ALL_UP_TO = 4  # cores: up to this many, --verify tries every worker count, 1 to cores + 1


@dataclass(frozen=True)
class Fix:
    key: str  # the fix's name in the report
    rules: tuple  # the rules whose fix it is
    kind: str  # what the child does (verify/apply.py): loader, env, threads, optimizer, fused, zero-grad, ...
    how: str  # FRESH or TOGGLE
    label: str  # the variant in words; formatted with the parameters
    variants: str  # the function in VARIANTS that gives the parameters to try
    gpu_only: bool = False  # never tried, nor mentioned, on a CPU run
    tier: int = 1  # 2: tried after every tier-1 experiment, when the budget allows
    flag: Optional[str] = None  # tried only with this option (--verify-compile)
    peak: bool = False  # it frees memory: each window's peak is measured too (verify/peaks.py)


FIXES = (
    Fix("num_workers", ("num-workers", "dataloader-slow"), "loader", FRESH, "num_workers={num_workers}", "workers"),
    Fix("persistent_workers", ("dataloader-slow",), "loader", FRESH, "persistent_workers=True", "persistent"),
    Fix("prefetch_factor", ("dataloader-slow",), "loader", FRESH, "prefetch_factor={prefetch_factor}", "prefetch"),
    Fix("pin_memory", ("pin-memory",), "loader", FRESH, "pin_memory=True", "pin", gpu_only=True),
    Fix("set_num_threads", ("cpu-threads",), "threads", TOGGLE, "torch.set_num_threads({threads})", "threads"),
    Fix("omp_threads", ("cpu-threads",), "env", FRESH, "OMP_NUM_THREADS={OMP_NUM_THREADS} at start", "omp", tier=2),
    Fix("foreach", ("fused-optimizer",), "optimizer", TOGGLE, "optimizer foreach=True", "foreach"),
    Fix("fused", ("fused-optimizer",), "fused", FRESH, "optimizer fused=True", "nothing", gpu_only=True),
    Fix("zero_grad", ("zero-grad",), "zero-grad", TOGGLE, "zero_grad(set_to_none=True)", "nothing",
        peak=True),
    Fix("expandable_segments", ("allocator-fragmentation",), "env", FRESH,
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "expandable", gpu_only=True, peak=True),
    Fix("cudnn_benchmark", ("cudnn-benchmark",), "cudnn", TOGGLE, "torch.backends.cudnn.benchmark=True", "nothing",
        gpu_only=True),
    Fix("tf32", ("amp",), "tf32", TOGGLE, 'torch.set_float32_matmul_precision("high")', "nothing", gpu_only=True),
    Fix("autocast", ("amp",), "autocast", TOGGLE, "autocast around the top module's forward", "nothing",
        gpu_only=True),
    Fix("compile", ("tiny-ops", "cuda-graphs"), "compile", TOGGLE, "torch.compile(top module)", "nothing",
        tier=2, flag="--verify-compile"),
)


@dataclass
class Context:
    """What the plan needs to know about the run (from the report and what `run` recorded)."""

    gpu: bool = False
    loaders: list = field(default_factory=list)  # run_facts.loader_facts of each DataLoader seen
    cores: Optional[float] = None
    free_cores: Optional[float] = None  # cores less what other processes kept busy (analysis/machine.py)
    torch_threads: Optional[int] = None
    compile: bool = False  # --verify-compile
    finding: dict = field(default_factory=dict)  # the finding being planned for


def _workers_now(c: Context) -> int:
    return max([int(ld.get("num_workers") or 0) for ld in c.loaders] or [0])


def _free_whole(c: Context) -> Optional[int]:
    """The free cores as a whole number (models/loader.whole_free_cores: rounded, not truncated)."""
    if c.cores is None and c.free_cores is None:
        return None
    cores = c.cores if c.cores is not None else c.free_cores
    others = cores - c.free_cores if c.free_cores is not None else None
    return whole_free_cores(cores, others)[0]


def forecast_workers(finding: dict) -> Optional[int]:
    """The worker count the finding's forecast assumed (its `workers` assumption names it)."""
    said = ((finding.get("forecast") or {}).get("assumptions") or {}).get("workers")
    m = re.search(r"num_workers=(\d+)", str(said or ""))
    return int(m.group(1)) if m else None


def worker_counts(c: Context) -> list:
    """The counts a person tuning the loader tries (issue 40): 1 up to the cores and one above
    (on more than SWEEP_ALL_UP_TO cores: the powers of two up to MAX_WORKERS, the free cores and
    one above), the forecast's count first -- the budget may end the sweep before the last."""
    cores = int(round(c.cores)) if c.cores else None
    first = forecast_workers(c.finding)
    if cores is None:
        sweep = [UNKNOWN_CORES_WORKERS]
    elif cores <= SWEEP_ALL_UP_TO:
        sweep = list(range(1, cores + 2))
    else:
        free = _free_whole(c) or cores
        top = min(cores, MAX_WORKERS)
        fit = min(free, top)
        sweep = sorted({2 ** k for k in range(8) if 2 ** k <= top} | {fit, fit + 1})
    counts = ([first] if first else []) + sweep
    return [n for i, n in enumerate(counts) if n not in counts[:i]]


SAMPLE_WORK = ("the loader runs in the training process and what is slow in its Dataset is "
               "{cause}: the fix {does}, a code change (num-workers' experiment tries worker "
               "processes)")
SAMPLE_FIX = {"decoding": "caches the decoded samples", "I/O": "caches the samples' bytes",
              "Python": "precomputes or vectorises that work"}  # else: batches that work


def _workers(c: Context) -> Union[list, str]:
    now = _workers_now(c)
    if now == 0 and c.finding.get("rule") == "dataloader-slow":  # its single-process branch
        cause = (c.finding.get("evidence") or {}).get("loader_cause") or "per-sample tensor ops"
        return SAMPLE_WORK.format(cause=cause, does=SAMPLE_FIX.get(cause, "batches that work"))
    counts = [n for n in worker_counts(c) if n != now]
    return [{"num_workers": n} for n in counts] or f"num_workers={now} is already the count that fits the cores"


def _with_workers(c: Context) -> list:
    return [ld for ld in c.loaders if int(ld.get("num_workers") or 0) > 0]


def _persistent(c: Context) -> Union[list, str]:
    if not _with_workers(c):
        return "no DataLoader with worker processes"
    if all(ld.get("persistent_workers") for ld in _with_workers(c)):
        return "persistent_workers=True already"
    return [{"persistent_workers": True}]


def _prefetch(c: Context) -> Union[list, str]:
    if not _with_workers(c):
        return "no DataLoader with worker processes"
    now = max(int(ld.get("prefetch_factor") or 2) for ld in _with_workers(c))
    return [{"prefetch_factor": max(4, 2 * now)}]


def _pin(c: Context) -> Union[list, str]:
    return "pin_memory=True already" if c.loaders and all(ld.get("pin_memory") for ld in c.loaders) else [
        {"pin_memory": True}]


def _thread_counts(c: Context) -> Union[list, str]:
    now = c.torch_threads
    if not now or now <= 1:
        return "torch already runs one intra-op thread"
    free = _free_whole(c)
    fit = max(1, free - _workers_now(c)) if free is not None else 1
    counts = sorted({n for n in (fit, fit - 1) if 1 <= n < now}, reverse=True)  # fits, one below
    return counts or f"{now} threads already fit the cores"


def _threads(c: Context) -> Union[list, str]:
    counts = _thread_counts(c)
    return counts if isinstance(counts, str) else [{"threads": n} for n in counts]


def _omp(c: Context) -> Union[list, str]:
    counts = _thread_counts(c)
    return counts if isinstance(counts, str) else [{"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n} for n in counts[:1]]


def _foreach(c: Context) -> Union[list, str]:
    return [{"key": "foreach", "value": True}]


def _expandable(c: Context) -> Union[list, str]:
    now = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    if "expandable_segments:true" in now.replace(" ", "").lower():
        return "PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True already"
    setting = ",".join(x for x in (now, "expandable_segments:True") if x)
    return [{"PYTORCH_CUDA_ALLOC_CONF": setting}]


def _nothing(c: Context) -> list:
    return [{}]


VARIANTS: dict = {"workers": _workers, "persistent": _persistent, "prefetch": _prefetch, "pin": _pin,
                  "threads": _threads, "omp": _omp, "foreach": _foreach, "nothing": _nothing,
                  "expandable": _expandable}


def label(fix: Fix, params: dict) -> str:
    return fix.label.format(**params)


def plan(findings: list, ctx: Context) -> tuple:
    """(experiments, not_tried). An experiment: {"fix", "kind", "how", "params", "variant", "rules", "tier",
    "forecast"}; one per distinct (fix, parameters), for every rule it verifies. not_tried: {"rule", "fix",
    "reason"} for each finding (or fix) without an experiment. Tier 1 first, then in the findings' order."""
    experiments: dict = {}
    not_tried = []
    for f in findings:
        rule = f.get("rule")
        fixes = [x for x in FIXES if rule in x.rules and (ctx.gpu or not x.gpu_only)]
        if not fixes:
            not_tried.append({"rule": rule, "fix": None, "reason": CODE_CHANGE})
            continue
        for fix in fixes:
            if fix.flag == "--verify-compile" and not ctx.compile:
                not_tried.append({"rule": rule, "fix": fix.key,
                                  "reason": f"{CODE_CHANGE} ({fix.flag} tries {label(fix, {})})"})
                continue
            ctx.finding = f
            got: Callable = VARIANTS[fix.variants]
            variants = got(ctx)
            if isinstance(variants, str):
                not_tried.append({"rule": rule, "fix": fix.key, "reason": f"{fix.key}: {variants}"})
                continue
            for params in variants:
                key = (fix.key, tuple(sorted(params.items())))
                exp = experiments.setdefault(key, {
                    "fix": fix.key, "kind": fix.kind, "how": fix.how, "params": dict(params),
                    "variant": label(fix, params), "rules": [], "tier": fix.tier, "forecast": {},
                    "peak": fix.peak})
                exp["rules"].append(rule)
                exp["forecast"][rule] = (f.get("forecast") or {}).get("speedup")
    ordered = sorted(experiments.values(), key=lambda e: e["tier"])  # stable: the findings' order within a tier
    return ordered, not_tried
