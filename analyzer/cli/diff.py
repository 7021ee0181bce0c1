"""Compare two analyses (base and head) for a pull request: `perfsleuth/diff@1` (docs/ci.md).

Computation only: two report@1 dicts in, one diff@1 dict out. `load_side` turns a command-line
argument (a trace, a directory holding one trace, or a report.json) into a report@1 dict.

The step time compared is the one measured without the profiler when both sides have it (reports of
`perfsleuth run` / `profile()`, `measurement.unprofiled_step_us`), else the profiled steady steps.

Noise model (docs/ci.md#noise): the step time of each side is summarised by its median and its
median absolute deviation (MAD) over steps. A median change is outside noise only when it exceeds
`noise_k` times the pooled robust spread, sqrt(sigma_base^2 + sigma_head^2) with sigma = 1.4826 * MAD,
and also `noise_floor` of the base median. Anything smaller is "within noise".
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Union

import numpy as np

from ..config import CATEGORIES, Config
from ..errors import TraceError, UsageError
from ..report import numbers
from ..render.efficiency_text import efficiency_change
from ..render.diff_view import differences_sentence
from ..render.memory_diff import memory_change
from ..report.model import SET_SCHEMA
from ..report.schema import checked, schema_of
from ..trace.files import open_regular
from ..version import __version__

DIFF_SCHEMA = "perfsleuth/diff@1"
REGRESSION, IMPROVEMENT, WITHIN_NOISE = "regression", "improvement", "within noise"
UNPROFILED, PROFILED = "unprofiled", "profiled"  # what `step_time` compares
MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution times this is its standard deviation


@dataclass(frozen=True)
class DiffConfig:
    noise_k: float = 2.0  # a change must exceed this many pooled sigmas of step-to-step spread
    noise_floor: float = 0.01  # ... and this fraction of the base median (covers steps with no spread)
    min_spread_steps: int = 3  # fewer steps than this on a side: its spread is unknown, not zero
    # A base median step shorter than this (µs: a nanosecond, the resolution of report@1's times) gives no
    # percentage: a change against 0 µs, or a denormal, is not a ratio anyone can read (the gate says so).
    min_base_us: float = 0.001
    top_changes: int = 10  # rows in each of the slower / faster kernel and op lists
    # One side compares this many times the other's steps or more: the runs differ (a step or two set
    # apart as warm-up on one side is the usual jitter, not a different experiment).
    steps_ratio: float = 1.5
    # Analysing a trace for a diff lists every kernel and op, so a name missing on one side really
    # is absent there (a report.json lists only its top Config.top_n).
    analysis_top_n: int = 1_000_000


# ---------------------------------------------------------------- inputs


def load_side(path: Union[str, os.PathLike], config: Optional[DiffConfig] = None,
              analysis: Optional[Config] = None) -> tuple[dict, bool]:
    """(report@1 dict, whether its kernel/op lists are complete) from a trace file, a directory
    holding one trace, or a report.json. A trace is analysed here with `analysis` (rule paths and
    thresholds, as `analyze` would), listing every kernel and op."""
    config = config or DiffConfig()
    p = Path(path)
    report = _read_report_json(p)
    if report is not None:
        return report, False
    from ..api import analyze_path

    result = analyze_path(p, replace(analysis or Config(), top_n=config.analysis_top_n)).to_dict()
    if result.get("schema") == SET_SCHEMA:
        raise UsageError(f"{p}: holds {len(result['reports'])} traces; diff compares one trace with one trace "
                         "(give the trace file of one rank)")
    return result, True


def _read_report_json(p: Path) -> Optional[dict]:
    """The report when `p` is a perfsleuth JSON document (a regular file whose top-level "schema" is
    perfsleuth/..., wherever the key is), checked against report@1; None when it is something else
    (a trace, a directory)."""
    if _is_dir(p):
        return None
    with open_regular(p) as f:
        head = f.read(4096)
        if head[:2] == b"\x1f\x8b" or (b'"perfsleuth/' not in head and b'"traceEvents"' in head):
            return None  # gzip: a trace (reports are written plain); or a trace's top level
        try:
            raw = head + f.read()
        except OSError as exc:
            raise TraceError(p, f"cannot read ({exc.strerror or exc})") from None
    if b'"perfsleuth/' not in head and not str(schema_of(raw) or "").startswith("perfsleuth/"):
        return None
    return checked(raw, p)


def _is_dir(p: Path) -> bool:
    try:
        return stat.S_ISDIR(os.stat(p).st_mode)
    except OSError:
        return False  # open_regular says what is wrong


def validate_report(report: dict, where: object = "report") -> dict:
    """`report` checked against the typed report@1 schema (report/schema.py); the checked dict.
    Raises TraceError naming `where` and the first bad field."""
    return checked(report, where)


# ---------------------------------------------------------------- the diff


def diff_paths(base: Union[str, os.PathLike], head: Union[str, os.PathLike],
               config: Optional[DiffConfig] = None, analysis: Optional[Config] = None) -> dict:
    config = config or DiffConfig()
    (b, b_full), (h, h_full) = load_side(base, config, analysis), load_side(head, config, analysis)
    return diff_reports(b, h, config, full_lists=(b_full, h_full))


def diff_reports(base: dict, head: dict, config: Optional[DiffConfig] = None,
                 full_lists: tuple[bool, bool] = (False, False)) -> dict:
    """diff@1 of two report@1 dicts (see docs/ci.md#the-diff-json).

    `full_lists[i]`: side i lists every kernel and op (it was analysed for this diff). Otherwise a
    list is taken as complete only when it is shorter than Config.top_n.
    """
    config = config or DiffConfig()
    base, head = validate_report(base, "base report"), validate_report(head, "head report")
    profiled = step_change(_durations(base), _durations(head), config)
    b_un, h_un = _unprofiled(base), _unprofiled(head)
    step = dict(step_change(b_un, h_un, config), basis=UNPROFILED) if b_un.size and h_un.size else dict(
        profiled, basis=PROFILED)
    kernels = _named_changes(base, head, "top_kernels", config, full_lists)
    ops = _named_changes(base, head, "top_ops", config, full_lists)
    differ = differences(base, head, step, config)
    return {
        "schema": DIFF_SCHEMA,
        "tool": {"name": "perfsleuth", "version": __version__},
        "base": _side(base),
        "head": _side(head),
        "step_time": step,  # without the profiler when both sides measured it (perfsleuth run), else profiled
        **({"step_time_profiled": profiled} if step["basis"] == UNPROFILED else {}),
        "verdict": {"base": base["verdict"], "head": head["verdict"], "changed": base["verdict"] != head["verdict"]},
        "categories": _categories(base, head, step["base"]["median"], config),
        "findings": _findings(base, head),
        "kernels": kernels,
        "ops": ops,
        "memory": memory_change(base, head),  # peaks and growth per device (render/memory_diff.py)
        "differences": differ,  # device, program, steps compared: said first in every output
        "warnings": ([differences_sentence(differ)] if differ else [])
        + _warnings(base, head, step, kernels["unmatched"] + ops["unmatched"], config),
        # FLOPs/step and HFU, each side (render/efficiency_text.py)
        "efficiency": efficiency_change(base, head),
    }


def steady(report: dict) -> list:
    """The steady steps (`steps[].phase`, docs/schema.md): warm-up and partial steps are not compared. A report
    without phases is all steady; one whose steps are all set apart falls back to all of them."""
    kept = [s for s in report["steps"] if (s.get("phase") or "steady") == "steady"]
    return kept or list(report["steps"])


def _unprofiled(report: dict) -> np.ndarray:
    """The step times measured without the profiler (report@1 `measurement`), empty when there are none."""
    m = report.get("measurement")
    values = ((m.get("unprofiled_step_us") or {}).get("values") if isinstance(m, dict) else None) or []
    ok = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
          and v > 0] if isinstance(values, list) else []
    return np.array(ok, dtype=np.float64)


def _durations(report: dict) -> np.ndarray:
    return np.array([float(s["duration_us"]) for s in steady(report)], dtype=np.float64)


def _side(report: dict) -> dict:
    t = report.get("trace") if isinstance(report.get("trace"), dict) else {}
    return {"path": t.get("path"), "device": t.get("device"), "program": t.get("program"),
            "verdict": report["verdict"], "steps": len(steady(report)),
            "steps_source": report.get("steps_source")}


def _device(report: dict) -> str:
    """The device a report ran on, as a diff names it: the GPU's name, else its kind; "CPU only"
    without one."""
    t = report.get("trace") if isinstance(report.get("trace"), dict) else {}
    kind = t.get("device_type")
    return str(t.get("device") or ("CPU only" if kind in (None, "cpu") else kind))


def differences(base: dict, head: dict, step: dict, config: Optional[DiffConfig] = None) -> list:
    """What makes the two runs other than one program measured twice (issue 37: a CPU report
    against an H100 report of another program read "×11: REGRESSION" and nothing else): the
    device, the program (the script `perfsleuth run` recorded; unknown for other traces, and then
    not compared) and the number of steps the step time compares (`steps_ratio` apart or more).
    [{"what": "device" | "program" | "steps", "base": ..., "head": ...}], in that order."""
    out = []
    if _device(base) != _device(head):
        out.append({"what": "device", "base": _device(base), "head": _device(head)})
    programs = [(r.get("trace") or {}).get("program") if isinstance(r.get("trace"), dict) else None
                for r in (base, head)]
    if all(programs) and programs[0] != programs[1]:
        out.append({"what": "program", "base": programs[0], "head": programs[1]})
    n = sorted((step["base"]["n"], step["head"]["n"]))
    if n[1] >= (config or DiffConfig()).steps_ratio * n[0]:
        out.append({"what": "steps", "base": step["base"]["n"], "head": step["head"]["n"]})
    return out


def spread(values: np.ndarray) -> dict:
    """Median, MAD and quartiles of per-step values (µs)."""
    med = float(np.median(values))
    mad = float(np.median(np.abs(values - med)))
    return {"n": int(values.size), "median": _r(med), "mad": _r(mad),
            "p25": _r(np.percentile(values, 25)), "p75": _r(np.percentile(values, 75)),
            "min": _r(values.min()), "max": _r(values.max())}


def noise_band(base: np.ndarray, head: np.ndarray, config: DiffConfig, floor_of: Optional[float] = None) -> float:
    """The largest median change (µs) that the step-to-step spread explains: noise_k pooled robust
    sigmas, at least noise_floor of `floor_of` (default: the base median)."""
    sigmas = [MAD_TO_SIGMA * float(np.median(np.abs(v - np.median(v))))
              for v in (base, head) if v.size >= config.min_spread_steps]
    spread_band = config.noise_k * math.sqrt(sum(s * s for s in sigmas))
    return max(spread_band, config.noise_floor * (float(np.median(base)) if floor_of is None else floor_of))


def classify(change_us: float, band_us: float) -> str:
    if abs(change_us) <= band_us:
        return WITHIN_NOISE
    return REGRESSION if change_us > 0 else IMPROVEMENT


def step_change(base: np.ndarray, head: np.ndarray, config: DiffConfig) -> dict:
    b, h = spread(base), spread(head)
    change = float(np.median(head) - np.median(base))
    band = noise_band(base, head, config)
    ref = float(np.median(base))
    return {"base": b, "head": h, "change_us": _r(change),
            "change": round(change / ref, 4) if ref >= config.min_base_us else None,
            "noise_us": _r(band), "call": classify(change, band),
            "spread_known": bool(base.size >= config.min_spread_steps and head.size >= config.min_spread_steps)}


def _category_values(report: dict, c: str) -> np.ndarray:
    return np.array([float((s.get("time_us") or {}).get(c) or 0.0) for s in steady(report)], dtype=np.float64)


def _share(report: dict, c: str) -> float:
    share = ((report.get("summary") or {}).get("time_share") or {}).get(c)
    if isinstance(share, (int, float)) and not isinstance(share, bool) and math.isfinite(share):
        return float(share)
    total = sum(float(s["duration_us"]) for s in steady(report))
    return round(float(_category_values(report, c).sum()) / total, 4) if total else 0.0


def _categories(base: dict, head: dict, base_median: float, config: DiffConfig) -> list:
    """Per category: share base -> head, median µs per step, and the same noise call as the step time
    (the floor is `noise_floor` of the base median *step* time, so a 1 µs category can't be a regression)."""
    out = []
    for c in CATEGORIES:
        b, h = _category_values(base, c), _category_values(head, c)
        change = float(np.median(h) - np.median(b))
        band = noise_band(b, h, config, floor_of=base_median)
        bs, hs = _share(base, c), _share(head, c)
        out.append({"category": c, "base_share": bs, "head_share": hs, "share_change": round(hs - bs, 4),
                    "base_us_per_step": _r(np.median(b)), "head_us_per_step": _r(np.median(h)),
                    "change_us_per_step": _r(change), "noise_us": _r(band), "call": classify(change, band)})
    return out


def _finding_entry(f: dict) -> dict:
    """A finding as diff@1 lists it: its one number (`number`: measured, else forecast: report/numbers.py),
    the forecast and the measurement behind it, and the ceiling (from `estimated_*` in older reports)."""
    ceiling = f.get("ceiling") if isinstance(f.get("ceiling"), dict) else None
    if ceiling is None and f.get("estimated_saving_us") is not None:  # a report written before issue 24
        ceiling = {"saving_us": f.get("estimated_saving_us"), "speedup": f.get("estimated_speedup"), "basis": None}
    entry = {"rule": f["rule"], "title": f.get("title"), "severity": f.get("severity"),
             "number": numbers.headline(f), "forecast": f.get("forecast"), "ceiling": ceiling}
    if isinstance(f.get("verified"), dict):
        entry["verified"] = f["verified"]
    return entry


def _findings(base: dict, head: dict) -> dict:
    def by_rule(report: dict) -> dict:
        found = {}
        for f in report.get("findings") or []:
            if isinstance(f, dict) and isinstance(f.get("rule"), str) and f["rule"] not in found:
                found[f["rule"]] = _finding_entry(f)
        return found

    b, h = by_rule(base), by_rule(head)
    return {"appeared": [h[r] for r in h if r not in b], "gone": [b[r] for r in b if r not in h],
            "kept": [{**h[r], "base_number": b[r]["number"]} for r in h if r in b]}


def _named_changes(base: dict, head: dict, key: str, config: DiffConfig, full_lists: tuple[bool, bool]) -> dict:
    """Kernels (or ops) matched by name, per-step totals (total_us / steps) base -> head.

    A name missing on one side counts as zero there when that side's list is complete (shorter than
    Config.top_n, or analysed by diff itself); otherwise it may just be below that side's cut-off and
    is left out of the comparison (counted in `unmatched`).
    """
    sides = []
    for rep, full in zip((base, head), full_lists):
        rows = [r for r in rep.get(key) or [] if isinstance(r, dict) and isinstance(r.get("name"), str)]
        n = len(steady(rep))
        table = {}
        for r in rows:
            if r["name"] not in table:
                table[r["name"]] = (float(r.get("total_us") or 0.0) / n, float(r.get("count") or 0) / n)
        sides.append((table, full or len(rows) < Config().top_n))
    (bt, b_complete), (ht, h_complete) = sides
    rows, unmatched = [], 0
    for name in list(bt) + [n for n in ht if n not in bt]:
        if (name not in bt and not b_complete) or (name not in ht and not h_complete):
            unmatched += 1
            continue
        (bu, bc), (hu, hc) = bt.get(name, (0.0, 0.0)), ht.get(name, (0.0, 0.0))
        status = "new" if name not in bt else "gone" if name not in ht else "changed"
        rows.append({"name": name, "status": status, "base_us_per_step": _r(bu), "head_us_per_step": _r(hu),
                     "change_us_per_step": _r(hu - bu), "change": round((hu - bu) / bu, 4) if bu > 0 else None,
                     "base_count_per_step": round(bc, 2), "head_count_per_step": round(hc, 2)})
    slower = sorted((r for r in rows if r["change_us_per_step"] > 0), key=lambda r: (-r["change_us_per_step"], r["name"]))
    faster = sorted((r for r in rows if r["change_us_per_step"] < 0), key=lambda r: (r["change_us_per_step"], r["name"]))
    return {"compared": len(rows), "unmatched": unmatched, "slower_count": len(slower), "faster_count": len(faster),
            "slower": slower[: config.top_changes], "faster": faster[: config.top_changes]}


def _warnings(base: dict, head: dict, step: dict, unmatched: int, config: DiffConfig) -> list:
    out = []
    if step.get("basis") == PROFILED and any(isinstance(r.get("measurement"), dict) for r in (base, head)):
        out.append("only one side has step times measured without the profiler: the step time is compared on "
                   "profiled steps, which the profiler slows")
    if not step["spread_known"]:
        out.append(f"fewer than {config.min_spread_steps} steps on a side: the step-to-step spread is unknown "
                   f"there, so the noise band may be as small as the {config.noise_floor:.0%} floor")
    for label, rep in (("base", base), ("head", head)):
        if rep.get("steps_source") == "whole-trace":
            out.append(f"{label}: no step annotations; the whole trace is one step")
        apart = len(rep["steps"]) - len(steady(rep))
        if apart:
            out.append(f"{label}: {apart} warm-up or partial step{'s' if apart != 1 else ''} left out of the comparison")
    if unmatched:
        out.append(f"{unmatched} kernel/op names are in only one side's top list (a report.json lists its top "
                   f"{Config().top_n}) and were not compared; diff the traces to compare every name")
    return out


def _r(x) -> float:
    return round(float(x), 3)
