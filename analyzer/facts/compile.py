"""Facts about torch.compile: compilation, recompilation, eager fallback and graph breaks (docs/compile.md).

Two populations of steps, said in each fact's meaning:

- the **recorded window** (every complete step, warm-up and compile steps included): compilation happens
  where the steady state is not, so its facts (`compile_*`, `recompile*`) count all of them, per recorded
  step (`compile_window_steps` of them, `compile_window_step_us` long on average);
- the **steady steps** (as every other fact): frame calls that ran eager, compiled regions, graph breaks.

From the trace alone (analysis/compiling.py) for any trace recorded with torch >= 2.5; what a trace cannot
show (why dynamo recompiled, why graphs broke, the recompile limit, which unprofiled steps compiled) comes
from the `compile` section `perfsleuth run` records (record/compile_facts.py), `compile_live` says whether
there is one.
"""

from __future__ import annotations

import re

import numpy as np

from ..analysis.compiling import compiling_of, per_step
from ..analysis.phases import PARTIAL, STEADY, WARMUP
from ..trace.names import COMPILE_PARTS
from .common import Context

COMPILE_FACTS = {
    "compile_seen": ("bool", "the trace shows torch.compile at work: compilation, compiled frames called, cache look-ups"),
    "compile_window_steps": ("count", "complete steps recorded (steady, warm-up and compile steps): what compile facts count over"),
    "compile_window_step_us": ("us", "mean duration of the complete steps recorded"),
    "compile_steps": ("count", "complete steps in which torch.compile compiled (a compile id starts, or compile events "
                      "take 5% of the step)"),
    "compile_steps_after_warmup": ("count", "of those, the ones after the leading warm-up steps"),
    "compile_us_per_step": ("us/step", "compile time per recorded step (all complete steps; the union of the compile events)"),
    "compile_after_warmup_us_per_step": ("us/step", "compile time after the leading warm-up steps, per recorded step"),
    "compile_window_share": ("share", "compile time / the complete steps' summed time"),
    "compiles": ("count", "compilations that start in the complete steps (distinct compile ids F/C)"),
    "recompiles": ("count", "of those, recompilations: compile ids F/C with C >= 1 (a frame compiled again)"),
    "compiles_after_warmup": ("count", "compilations that start in the complete steps after the leading warm-up steps"),
    "recompile_us_per_step": ("us/step", "time of the recompilations (their forward and backward), per recorded step"),
    "recompiled_frames": ("count", "frames with a recompilation in the complete steps"),
    "compile_max_per_frame": ("count", "the most compilations any frame reached in the trace (C + 1 of its last id)"),
    "compile_gave_up": ("count", "compilations in the complete steps that no compiled region of the same id followed "
                        "(the recompile limit, or a failure): the frame ran eager"),
    "compile_frame_calls_per_step": ("count/step", "calls of frames dynamo watches (`TorchDynamo Cache Lookup`), per steady step"),
    "compile_eager_calls_per_step": ("count/step", "of those, calls that ran eager (no compiled region followed), per steady step"),
    "compile_eager_steps": ("count", "steady steps with at least one frame call that ran eager"),
    "compile_eager_share": ("share", "share of the steady frame calls that ran eager (0 without any)"),
    "compiled_calls_per_step": ("count/step", "outermost compiled regions run per steady step"),
    "graph_breaks_per_step": ("count/step", "graph breaks per steady step: compiled regions inside an outermost one "
                              "(the resume functions of a broken frame)"),
    "graph_break_calls_per_step": ("count/step", "outermost compiled calls with a graph break, per steady step"),
    "graph_break_us_per_step": ("us/step", "time inside broken compiled calls outside their compiled graphs and compilation: "
                                "the eager code between the graphs and the re-entry costs, per steady step"),
    "graph_break_share": ("share", "graph_break_us_per_step's share of the steady step"),
    "cudagraph_records": ("count", "CUDA graph trees recording (`CUDAGraphNode.record`) in the complete steps"),
    "cudagraph_records_after_warmup": ("count", "of those, after the leading warm-up steps: re-records"),
    "cudagraph_launches_per_step": ("count/step", "CUDA graph launches per steady step"),
    "compile_live": ("bool", "the run recorded torch.compile's own account (`perfsleuth run`, `profile()`)"),
    "compile_limit_hit": ("bool", "the recompile limit was hit (recorded by the run), or a compilation in the trace gave up"),
    "compile_recompile_limit": ("count", "torch._dynamo.config.recompile_limit during the run (0 when not recorded)"),
    "compile_live_recompiles": ("count", "recompilations the run recorded (all steps, unprofiled ones included), "
                                "without the ones perfsleuth's own step hooks caused"),
    "compile_own_recompiles": ("count", "recompilations perfsleuth's step hooks caused: `run` removes its global module "
                               "hooks once it knows where steps come from, and a model compiled while they were "
                               "installed fails that guard once"),
    "compile_live_graph_breaks": ("count", "graph breaks dynamo counted during the run"),
    "compile_unprofiled_steps": ("count", "unprofiled (timed, not recorded) steps in which torch.compile compiled"),
    "recompile_reason": ("text", "the most frequent recompile reason the run recorded, its numbers generalised ('' when none)"),
    "graph_break_reason": ("text", "the most frequent graph-break reason dynamo gave ('' when none recorded)"),
}
for _p in (*COMPILE_PARTS, "other"):
    COMPILE_FACTS[f"compile_{_p}_us_per_step"] = ("us/step", {
        "guards": "compile time building guards (`build_guards`), per recorded step",
        "inductor": "compile time in inductor (or the backend's own compiler: `inductor_compile`, C++/Triton builds), per recorded step",
        "aot": "compile time in AOT autograd (`create_aot_dispatcher_function`, outside inductor), per recorded step",
        "backend": "other compile time in the backend call (`backend_compile`, the lazy backward compile), per recorded step",
        "dynamo": "compile time tracing Python bytecode (`bytecode_tracing`), per recorded step",
        "other": "the rest of the compile time (dynamo's bookkeeping, gc, a compile that gave up), per recorded step"}[_p])

_NUMBERS = re.compile(r"\b\d+\b")


def compile_facts(ctx: Context) -> tuple[dict, dict]:
    comp = compiling_of(ctx.trace)
    frame = ctx.steps.frame
    phase = frame["phase"].to_numpy() if "phase" in frame else np.full(len(frame), STEADY, dtype=object)
    whole = phase != PARTIAL
    start, end = frame["start"].to_numpy(np.int64), frame["end"].to_numpy(np.int64)
    cs = per_step(comp, start, end)
    win = cs[whole]
    n_win = int(whole.sum())
    win_ns = float((end - start)[whole].sum())
    after = win[phase[whole] != WARMUP]
    steady = cs[phase == STEADY]
    compiled = (win["compiles"] > 0) | (win["compile_ns"] >= 0.05 * (end - start)[whole])
    ids = comp.compiles
    in_win = _in_windows(ids["ts"].to_numpy(np.int64), start[whole], end[whole])
    live = _live(ctx)
    lookups = float(steady["lookups"].sum())

    def per_win(ns) -> float:
        return round(float(ns) / 1000.0 / n_win, 3) if n_win else 0.0

    v = {
        "compile_seen": comp.seen,
        "compile_window_steps": n_win,
        "compile_window_step_us": round(win_ns / 1000.0 / n_win, 3) if n_win else 0.0,
        "compile_steps": int(compiled.sum()),
        "compile_steps_after_warmup": int(compiled[phase[whole] != WARMUP].sum()),
        "compile_us_per_step": per_win(win["compile_ns"].sum()),
        "compile_after_warmup_us_per_step": per_win(after["compile_ns"].sum()),
        "compile_window_share": round(float(win["compile_ns"].sum()) / win_ns, 4) if win_ns else 0.0,
        "compiles": int(win["compiles"].sum()),
        "recompiles": int(win["recompiles"].sum()),
        "compiles_after_warmup": int(after["compiles"].sum()),
        "recompile_us_per_step": per_win(win["recompile_ns"].sum()),
        "recompiled_frames": int(ids[in_win & (ids["count"].to_numpy() >= 1)]["frame"].nunique()),
        "compile_max_per_frame": int(ids["count"].max() + 1) if len(ids) else 0,
        "compile_gave_up": int(win["failed"].sum()),
        "compile_frame_calls_per_step": ctx.per_step(lookups),
        "compile_eager_calls_per_step": ctx.per_step(steady["eager"].sum()),
        "compile_eager_steps": int((steady["eager"] > 0).sum()),
        "compile_eager_share": round(float(steady["eager"].sum()) / lookups, 4) if lookups else 0.0,
        "compiled_calls_per_step": ctx.per_step(steady["regions"].sum()),
        "graph_breaks_per_step": ctx.per_step(steady["breaks"].sum()),
        "graph_break_calls_per_step": ctx.per_step(steady["broken"].sum()),
        "graph_break_us_per_step": ctx.per_step_us(steady["break_ns"].sum()),
        "graph_break_share": ctx.share(steady["break_ns"].sum()),
        "cudagraph_records": int(win["cudagraph_records"].sum()),
        "cudagraph_records_after_warmup": int(after["cudagraph_records"].sum()),
        "cudagraph_launches_per_step": ctx.per_step(steady["cudagraph_launches"].sum()),
        **live,
    }
    v["compile_limit_hit"] = bool(live["compile_limit_hit"] or v["compile_gave_up"])
    for p in (*COMPILE_PARTS, "other"):
        v[f"compile_{p}_us_per_step"] = per_win(win[f"part_{p}"].sum())
    return v, {**_tables(ctx), "compile_step_times": _step_times(frame, phase, cs) if v["compile_eager_steps"] else []}


def _step_times(frame, phase, cs) -> list:
    """Steady steps: duration (µs) and whether a frame call in it ran eager (for `compiled-not-eager`)."""
    steady = phase == STEADY
    us = (frame["end"].to_numpy(np.int64) - frame["start"].to_numpy(np.int64))[steady] / 1000.0
    return [{"us": float(u), "eager": bool(e)} for u, e in zip(us.tolist(), (cs["eager"].to_numpy()[steady] > 0).tolist())]


def _in_windows(ts, start, end) -> np.ndarray:
    i = np.searchsorted(start, ts, side="right") - 1
    return (i >= 0) & (ts < end[np.clip(i, 0, None)])


def _meta(ctx: Context) -> dict:
    meta = ctx.trace.run_metadata if isinstance(ctx.trace.run_metadata, dict) else {}
    section = meta.get("compile")
    return section if isinstance(section, dict) else {}


def _int(v) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else 0


def generalised(reason: str) -> str:
    """"0/2: tensor 'args[0]' size mismatch at index 0. expected 5, actual 6" -> "tensor 'args[0]' size mismatch
    at index N. expected N, actual N": the same cause with other numbers is one reason."""
    text = re.sub(r"^\s*\S+/\d+:\s*", "", str(reason)).split("  #")[0]  # a guard's source line follows "  #"
    return _NUMBERS.sub("N", text).strip()


def _live(ctx: Context) -> dict:
    m = _meta(ctx)
    compiles = [c for c in m.get("compiles") or [] if isinstance(c, dict)]
    counters = m.get("counters") if isinstance(m.get("counters"), dict) else {}
    config = m.get("config") if isinstance(m.get("config"), dict) else {}
    steps = m.get("steps") if isinstance(m.get("steps"), dict) else {}
    reasons = _reason_rows(ctx)
    breaks = [b for b in m.get("graph_breaks") or [] if isinstance(b, dict)]
    limit_hit = _int(counters.get("recompile_limit_hits")) > 0 or any(
        "recompile limit" in str(c.get("failed") or "").lower() for c in compiles)
    return {
        "compile_live": bool(m),
        "compile_limit_hit": limit_hit,
        "compile_recompile_limit": _int(config.get("recompile_limit")),
        "compile_live_recompiles": sum(1 for c in compiles if str(c.get("reason") or "") and not c.get("own")),
        "compile_own_recompiles": sum(1 for c in compiles if c.get("own")),
        "compile_live_graph_breaks": _int(counters.get("graph_breaks")),
        "compile_unprofiled_steps": sum(1 for us in steps.get("wait") or [] if _int(us) > 0),
        "recompile_reason": reasons[0]["reason"] if reasons else "",
        "graph_break_reason": str(breaks[0].get("reason") or "") if breaks else "",
    }


def _reason_rows(ctx: Context) -> list:
    """Recompile reasons the run recorded, generalised and counted, most frequent first (with an example)."""
    rows: dict = {}
    for c in _meta(ctx).get("compiles") or []:
        if not isinstance(c, dict) or not str(c.get("reason") or "") or c.get("own"):
            continue
        key = generalised(str(c["reason"]))
        row = rows.setdefault(key, {"reason": key, "count": 0, "example": str(c["reason"]), "frame": str(c.get("frame") or "")})
        row["count"] += 1
    return sorted(rows.values(), key=lambda r: -r["count"])


def _tables(ctx: Context) -> dict:
    breaks = [{"reason": str(b.get("reason") or ""), "count": _int(b.get("count"))}
              for b in _meta(ctx).get("graph_breaks") or [] if isinstance(b, dict)]
    return {"recompile_reasons": _reason_rows(ctx)[:10], "graph_break_reasons": breaks[:10]}
