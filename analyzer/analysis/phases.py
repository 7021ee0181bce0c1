"""Which steps show the steady state: warm-up, steady and partial steps (docs/attribution.md#steady-state).

- **partial**: a step the run cut short (the script ended inside the profiled window). Only
  `perfsleuth run` / `profile()` know it; they name it in the trace's metadata (`partial_step`).
- **warm-up**: the leading steps that initialise, autotune or compile, or that last far longer than the
  steps after them. A step is warm-up when it is one of a run of such steps at the start of the trace;
  a slow step later on is an outlier of the steady state (periodic work, a hiccup), not warm-up, and
  stays in it (`step-outliers` reports it either way).
- **compile**: a step after the leading warm-up in which torch.compile compiled (a compile id starts in it,
  or compilation takes `evidence_share` of it), and any step that recompiles (docs/compile.md): compiling
  is not the steady state, whenever it happens. When every step after the warm-up compiles, the steady
  state is compiling: those steps stay steady, and a warning says so.
- **steady**: the rest. Shares, the verdict, the facts and the top tables use the steady steps only.

Evidence of warm-up, per step (all vectorised over events; the loop runs over the leading steps):
the host time of initialisation runtime calls (memory allocation, device and stream setup, module
loading), of synchronize calls inside convolutions (cuDNN/MIOpen autotuning) and of first compilations
(torch.compile's compile events whose ids are first compiles, Inductor/Triton autotuning; a
recompilation is not initialisation: its step is a compile step, and the walk passes over it). It makes a step warm-up when it
takes `evidence_share` of the step. "Far longer": more than `rel` above the median of the later steps
and more than `k_mad` robust standard deviations (1.4826 × MAD) above it, judged only when at least
two later steps exist (against one, neither step can be called the outlier).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..trace.model import ANNOTATION, CPU_OP, PYTHON, RUNTIME, Trace
from ..trace.names import SYNC_CALLS, is_compile_event, name_mask
from ..trace.selection import kind_mask, of_kind
from . import intervals as iv
from .compiling import Compiling, compiling_of, ids_in, per_step

WARMUP, STEADY, PARTIAL, COMPILE = "warmup", "steady", "partial", "compile"
PHASES = (WARMUP, STEADY, PARTIAL, COMPILE)

_ALLOC = re.compile(r"^(cuda|hip)(Malloc|MallocHost|HostAlloc|HostRegister|Free|FreeHost|HostMalloc|HostFree|"
                    r"ExtMallocWithFlags)$|^cuMem(Alloc|Free|HostAlloc)(_v2)?$")
_SETUP = re.compile(r"^(cuda|hip)(GetDeviceProperties\w*|GetDeviceCount|StreamCreate\w*|GetSymbolAddress|"
                    r"DeviceGetPCIBusId|SetDeviceFlags)$|^cu(Init|DevicePrimaryCtxRetain|CtxCreate\w*)$")
_MODULE = re.compile(r"^cu(Module|Library)(Load\w*|GetFunction|GetKernel)$|^hipModuleLoad\w*$|"
                     r"^cudaGetDriverEntryPoint\w*$|^__cudaRegisterFatBinary")
# Compilation outside torch.compile's named events (older traces, Triton autotuning, stacks into the compiler).
_COMPILE = re.compile(r"inductor_do_bench|benchmark_all_configs|autotune|compile_fx|convert_frame\.py|"
                      r"_inductor/compile", re.IGNORECASE)
_CONV = re.compile(r"conv|cudnn|miopen", re.IGNORECASE)
EVIDENCE = (("memory allocation call", "memory allocation calls"), ("device/stream setup call", "device/stream setup calls"),
            ("module load", "module loads"), ("synchronize inside a convolution (autotuning)",
                                               "synchronizes inside convolutions (autotuning)"),
            ("compilation event", "compilation events"))


@dataclass(frozen=True)
class SteadyRule:
    """The thresholds of the warm-up test (defined once; docs/attribution.md#steady-state)."""

    rel: float = 0.25  # a leading step this much slower than the median of the later steps ...
    k_mad: float = 5.0  # ... and this many robust sigmas above it is warm-up
    evidence_share: float = 0.05  # initialisation/autotune/compile host time from this share of the step
    min_steady: int = 3  # fewer steady steps than this: the report says so


def classify(trace: Trace, frame: pd.DataFrame, source: str, rule: SteadyRule = SteadyRule()) -> tuple:
    """(phase per row, reason per row, warnings) for the steps in `frame` (start, end, name)."""
    n = len(frame)
    phase = np.full(n, STEADY, dtype=object)
    reason = np.full(n, "", dtype=object)
    partial = str(trace.run_metadata.get("partial_step") or "") if isinstance(trace.run_metadata, dict) else ""
    if partial and n > 1:
        hit = (frame["name"].to_numpy() == partial)
        phase[hit] = PARTIAL
        reason[hit] = "the run ended inside this step: it is cut short"
    complete = np.flatnonzero(phase != PARTIAL)
    notes: list = []
    if len(complete) >= 2 and source != "whole-trace":
        start, end = frame["start"].to_numpy(np.int64)[complete], frame["end"].to_numpy(np.int64)[complete]
        comp = compiling_of(trace)
        cs = per_step(comp, start, end)
        counts, ev_ns, init_ns = _evidence(trace, start, end, comp)
        dur = (end - start).astype(np.float64)
        compile_ns = cs["compile_ns"].to_numpy(np.float64)
        compiled = (cs["compiles"].to_numpy() > 0) | (compile_ns >= rule.evidence_share * dur)
        recompiled = cs["recompiles"].to_numpy() > 0
        walk = np.flatnonzero(~recompiled)  # a recompilation is not initialisation: the walk passes over it
        lead = walk[:leading_warmup(dur[walk], ev_ns[walk], rule)]
        warm = np.zeros(len(complete), dtype=bool)
        warm[lead] = True
        later = compiled & ~warm
        if later.any() and not (~warm & ~later).any():  # every step after the warm-up compiles: that is the steady state
            notes.append(f"every step after the warm-up compiled ({int(later.sum())} steps; torch.compile): the steady "
                         f"state includes compilation")
            later[:] = False
        median = float(np.median(dur[~warm & ~later])) if (~warm & ~later).any() else 0.0
        for i in np.flatnonzero(warm | later):  # the set-apart steps only: a handful
            phase[complete[i]] = WARMUP if warm[i] else COMPILE
            ids = ids_in(comp, int(start[i]), int(end[i]))
            reason[complete[i]] = _reason(dur[i], median, counts[i], init_ns[i], compile_ns[i], ids, recompiled[i])
    return phase, reason, notes + _warnings(phase, source, rule)


def leading_warmup(dur: np.ndarray, ev_ns: np.ndarray, rule: SteadyRule) -> int:
    """How many leading steps are warm-up (at least one step stays steady)."""
    p = 0
    while p < len(dur) - 1:
        rest = dur[p + 1:]
        med = float(np.median(rest))
        sigma = 1.4826 * float(np.median(np.abs(rest - med)))
        far = len(rest) >= 2 and dur[p] > med + max(rule.k_mad * sigma, rule.rel * med)  # one step: no "rest"
        if not (far or ev_ns[p] >= rule.evidence_share * dur[p]):
            break
        p += 1
    return p


def _evidence(trace: Trace, start: np.ndarray, end: np.ndarray, comp: Compiling) -> tuple:
    """Per step: event counts per EVIDENCE kind (n × 5); the host time they and the first compilations
    (compile time outside recompilations) cover (ns, merged); the host time they alone cover."""
    ev = trace.events
    rt = of_kind(ev, RUNTIME)
    ops = of_kind(ev, CPU_OP)
    syncs = rt[rt["name"].isin(SYNC_CALLS)]
    in_conv = iv.covers(_span(ops[name_mask(ops["name"], lambda s: bool(_CONV.search(s)))]),
                        syncs["ts"].to_numpy(np.int64))
    kinds = [rt[name_mask(rt["name"], lambda s: bool(_ALLOC.match(s)))],
             rt[name_mask(rt["name"], lambda s: bool(_SETUP.match(s)))],
             rt[name_mask(rt["name"], lambda s: bool(_MODULE.match(s)))],
             syncs[in_conv],
             ev[kind_mask(ev, (ANNOTATION, CPU_OP, PYTHON))
                & name_mask(ev["name"], lambda s: bool(_COMPILE.search(s)) and not is_compile_event(s))]]
    counts = np.zeros((len(start), len(kinds)), dtype=np.int64)
    for j, df in enumerate(kinds):
        ts = df["ts"].to_numpy(np.int64)
        i = np.searchsorted(start, ts, side="right") - 1
        ok = (i >= 0) & (ts < end[np.clip(i, 0, None)])
        counts[:, j] = np.bincount(i[ok], minlength=len(start))
    init = _span(pd.concat([df[["ts", "end"]] for df in kinds]))
    covered = iv.union(init, iv.subtract(comp.spans, comp.recompile_spans))
    return counts, _within(covered, start, end), _within(init, start, end)


def _within(spans: iv.Intervals, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    return iv.covered_before(spans, end) - iv.covered_before(spans, start)


def _span(df: pd.DataFrame) -> iv.Intervals:
    return iv.merge(df["ts"].to_numpy(np.int64), df["end"].to_numpy(np.int64))


def _ms(ns) -> str:
    ms = float(ns) / 1e6
    return f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.1f} ms" if ms >= 1 else f"{ms * 1000:.0f} µs"


def _reason(dur: float, steady_median: float, counts: np.ndarray, init_ns: float, compile_ns: float, ids: list,
            recompiled: bool) -> str:
    """'3.85 s, 590.2x the median steady step; 3.83 s compiling (torch.compile 0/0, 1/0); 2 ms of
    initialisation: 3 memory allocation calls'."""
    bits = [f"{_ms(dur)}, {dur / steady_median:.1f}x the median steady step" if steady_median > 0 else _ms(dur)]
    if compile_ns > 0 or ids:
        what = "recompiling" if recompiled else "compiling"
        bits.append(f"{_ms(compile_ns)} {what}" + (f" (torch.compile {', '.join(ids[:6])}"
                                                   f"{f' and {len(ids) - 6} more' if len(ids) > 6 else ''})" if ids else ""))
    found = [f"{int(c)} {one if c == 1 else many}" for (one, many), c in zip(EVIDENCE, counts) if c]
    if found and init_ns > 0:
        bits.append(f"{_ms(init_ns)} of initialisation: {', '.join(found)}")
    elif found:
        bits.append(f"initialisation: {', '.join(found)}")
    return "; ".join(bits)


def _warnings(phase: np.ndarray, source: str, rule: SteadyRule) -> list:
    """Too few steady steps is said (the warm-up and partial steps themselves are listed in the report)."""
    n_steady = int((phase == STEADY).sum())
    if n_steady >= rule.min_steady or source == "whole-trace":
        return []
    apart = ", ".join(f"{k} {label}" for label, k in (("warm-up", int((phase == WARMUP).sum())),
                                                       ("compiling", int((phase == COMPILE).sum())),
                                                       ("partial", int((phase == PARTIAL).sum()))) if k)
    return [f"only {n_steady} steady step{'s' if n_steady != 1 else ''}" + (f" ({apart} set apart)" if apart else "")
            + f": shares and the verdict rest on fewer than {rule.min_steady}; record more steps "
              f"(perfsleuth run --active N)"]
