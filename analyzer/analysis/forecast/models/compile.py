"""Forecasts for torch.compile's fixes, from the recorded window's own numbers (docs/compile.md).

They are not replays: compilation falls where the steady state is not (analysis/phases.py sets compiling
steps apart), so the replay of steady steps has none to remove. Each model takes the compile facts
(facts/compile.py) and says what the steps would take without the time the fix removes, on the base
the facts count over:

- `no-recompilation`: the recorded window without its recompilations (`dynamic=True`, `mark_dynamic`,
  padding to a few lengths: one compilation at the start of the run, none in its steady state). Central
  and high: all of it goes; low: the rest of the step runs `DYNAMIC_COST` slower (a graph compiled for
  symbolic shapes may run slower than one specialised to each shape). Base: the mean complete step
  (`compile_window_step_us`).
- `no-compile-after-warmup`: the same for all compilation after the leading warm-up steps.
- `graph-break-free`: no forecast, and why (the reason is the finding's answer).
- `compiled-not-eager`: the steady steps whose frame calls ran eager (the recompile limit, a failed
  compile) take the time of the steady steps that ran compiled: central the median difference, low and
  high from the quartiles. Only when the window has both; the shapes differ between them (the
  compiled steps ran the shapes compiled before), which the assumptions say. Base: the steady step.

Each returns the forecast object of docs/schema.md, or "no forecast" with the reason.
"""

from __future__ import annotations

from typing import Optional

from ..withheld import MAX_RANGE, no_forecast, unreliable

DYNAMIC_COST = 0.10  # low: the step outside compilation runs this much slower on a graph for symbolic shapes


def _forecast(model: str, before_us: float, saving: float, low_after: float, high_saving: float,
              assumptions: dict) -> dict:
    """The forecast object (docs/schema.md) from the step before, the central saving, the pessimistic step
    after and the optimistic saving (µs)."""
    if before_us <= 0 or saving <= 0 or before_us - high_saving <= 0:
        return no_forecast(model, "the recorded steps leave nothing for this fix to remove")
    after = before_us - saving
    out = {"kind": "forecast", "speedup": round(before_us / after, 3), "saving_us": round(saving, 3),
           "low": round(before_us / max(low_after, 1e-9), 3), "high": round(before_us / (before_us - high_saving), 3),
           "model": model, "step_us": round(after, 3), "acts_on_us": round(high_saving, 3),
           "assumptions": assumptions, "reason": None}
    out["low"] = min(out["low"], out["speedup"])
    return unreliable(out) if out["high"] > MAX_RANGE * out["low"] else out


def _without(model: str, v: dict, fact: str, count: str, what: str) -> dict:
    n, base, saving = int(v.get("compile_window_steps") or 0), float(v.get("compile_window_step_us") or 0.0), \
        float(v.get(fact) or 0.0)
    compiles = int(v.get(count) or 0)
    rest = base - float(v.get("compile_us_per_step") or 0.0)  # the recorded step outside all compilation
    low_after = base - saving + DYNAMIC_COST * max(rest, 0.0)
    return _forecast(model, base, saving, low_after, saving, {
        "base": f"the mean of the {n} complete recorded steps ({base / 1000:.2f} ms), warm-up and compiling steps "
                f"included: compilation falls outside the steady steps",
        "removed": f"{what}: {saving / 1000:.2f} ms per recorded step ({compiles} compilation(s)); the fix compiles "
                   f"once, at the start of the run",
        "low": f"the rest of the step ({rest / 1000:.2f} ms) runs {DYNAMIC_COST:.0%} slower on a graph compiled for "
               f"symbolic shapes",
        "rate": "the window's compile rate goes on; a run whose shapes stop changing (or that reaches the recompile "
                "limit) pays it only until then"})


def no_recompilation(values: dict, tables: dict) -> dict:
    """not a replay: the recorded steps (compiling ones included) without their recompilations"""
    return _without("no-recompilation", values, "recompile_us_per_step", "recompiles", "the recompilations")


def no_compile_after_warmup(values: dict, tables: dict) -> dict:
    """not a replay: the recorded steps (compiling ones included) without the compilation after the warm-up"""
    return _without("no-compile-after-warmup", values, "compile_after_warmup_us_per_step", "compiles_after_warmup",
                    "the compilation after the warm-up steps")


def compiled_not_eager(values: dict, tables: dict) -> dict:
    """not a replay: the steady steps that ran a frame eager take the time of the ones that ran compiled"""
    import numpy as np  # here: `perfsleuth rules` reads this module's docstrings without numpy

    model = "compiled-not-eager"
    rows = [r for r in tables.get("compile_step_times") or [] if isinstance(r, dict)]
    eager = np.array([r["us"] for r in rows if r.get("eager")], dtype=np.float64)
    compiled = np.array([r["us"] for r in rows if not r.get("eager")], dtype=np.float64)
    if not eager.size:
        return no_forecast(model, "no steady step ran a frame eager")
    if not compiled.size:
        return no_forecast(model, "every steady step ran a frame eager: the trace holds no compiled run to compare "
                                  "with (what compiling them buys is what `perfsleuth run --verify` can measure)")
    share = eager.size / (eager.size + compiled.size)
    step = float(values.get("step_us") or 0.0)
    central = (np.median(eager) - np.median(compiled)) * share
    low = (np.percentile(eager, 25) - np.percentile(compiled, 75)) * share
    high = (np.percentile(eager, 75) - np.percentile(compiled, 25)) * share
    if central <= 0:
        return no_forecast(model, f"the steady steps that ran eager ({np.median(eager) / 1000:.2f} ms, median) are no "
                                  f"slower than the ones that ran compiled ({np.median(compiled) / 1000:.2f} ms)")
    return _forecast(model, step, central, step - max(low, 0.0), max(high, central), {
        "base": f"the mean steady step ({step / 1000:.2f} ms)",
        "removed": f"{eager.size} of {eager.size + compiled.size} steady steps ran a frame eager: they take the median "
                   f"compiled step ({np.median(compiled) / 1000:.2f} ms) instead of {np.median(eager) / 1000:.2f} ms",
        "shapes": "the compiled steps ran shapes compiled earlier; the eager ones ran others, so part of the "
                  "difference may be the shapes' own"})


def graph_break_free(values: dict, tables: dict) -> dict:
    """none, and the finding says why: a graph the trace never shows cannot be replayed"""
    return no_forecast("graph-break-free", "what the code between the graphs costs once it is compiled with them depends "
                                           "on what broke the graph (a value read into Python, print, an unsupported "
                                           "call); a graph the trace never shows cannot be replayed. The ceiling is the "
                                           "time between the graphs")


WINDOW_MODELS = {"no-recompilation": no_recompilation, "no-compile-after-warmup": no_compile_after_warmup,
                 "compiled-not-eager": compiled_not_eager, "graph-break-free": graph_break_free}


def window_forecast(model: str, values: Optional[dict], tables: Optional[dict]) -> dict:
    """The forecast of a window model on the facts (`values`, `tables`)."""
    if values is None:
        return no_forecast(model, "evaluated without the compile facts")
    return WINDOW_MODELS[model](values, tables or {})
