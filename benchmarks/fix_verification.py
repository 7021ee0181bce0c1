"""Do forecasts come true? Every fix that runs on a CPU, measured on this machine, and the GPU-only
fixes on the trace simulator's before/after pairs.

    python benchmarks/fix_verification.py [--write docs/accuracy.md] [--record] [--pairs 3] [--cases NAME ...]
    python benchmarks/fix_verification.py --rejudge [--record | --recorded DIR]

Per CPU case (benchmarks/accuracy_cases.py):
1. `perfsleuth run --no-stack` of the "before" program: the forecast is that of the finding for the
   case's rule when it fires, else perfsleuth's model of the fix on the same trace (rules of other
   issues may name the model later; the report says which).
2. Before and after run unprofiled, interleaved A/B/A/B (`--pairs`), each run's mean iteration time
   (`--print-step-times`, 10 % trimmed) after the first 5; measured speed-up = median of the per-pair
   ratios. Each
   pair has its own profiled run just before it (the load changes from minute to minute); the
   forecast is the median of the pairs' forecasts.
3. ratio = forecast / measured; right when 0.67 <= ratio <= 1.5, and a fix that did not help (measured
   below 1.1x) must be forecast at 1.2x or less.
The load average is recorded before and after: the machine may be shared, and that is the point.
`--record` keeps the "before" traces and the measurements in fixtures/accuracy/ (tests/e2e/test_accuracy.py
recomputes the forecasts from them). Also runs the bottleneck zoo (fixtures/cases.toml).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tomllib

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy_cases import CPU_CASES, RECORDED, ROOT, SCRIPTS, CpuCase, gpu_pair, judge  # noqa: E402
from unseen_report import kept_section  # noqa: E402

sys.path.insert(0, str(ROOT))

WARMUP = 5  # iterations skipped in each A/B run (worker start-up, first allocations)


def load() -> list:
    return [round(x, 2) for x in os.getloadavg()]


def profile_before(case: CpuCase, out: Path) -> tuple[Path, dict]:
    cmd = [sys.executable, "-m", "perfsleuth.cli.main", "run", "--no-stack", "--force", "--active",
           str(case.active), *([] if case.shapes else ["--no-shapes"]), "-o", str(out), str(SCRIPTS / case.script),
           "--steps", str(case.steps), *case.before]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return out / "trace.pt.trace.json.gz", json.loads((out / "report.json").read_text())


def forecast_of(case: CpuCase, trace: Path, report: dict) -> tuple[dict, str]:
    from perfsleuth.api import forecast_fix

    finding = next((f for f in report["findings"] if f["rule"] == case.rule), None)
    if finding is not None and not case.params:
        return finding["forecast"], f"finding `{case.rule}`"
    source = f"finding `{case.rule}`" if finding is not None else f"model (rule `{case.rule}` did not fire)"
    return forecast_fix(trace, case.model, case.params or None), source


def trimmed_mean(values: list, cut: float = 0.1) -> float:
    """Mean of the values without the lowest and highest `cut` of them."""
    v = sorted(values)
    k = int(len(v) * cut)
    return statistics.fmean(v[k: len(v) - k] if len(v) > 2 * k else v)


def step_ms(case: CpuCase, args: tuple) -> float:
    """The mean iteration time (10 % trimmed) after the first WARMUP: a throughput. (Not the median:
    with workers the iterations alternate between waiting and not -- 4, 30, 4, 30 ms -- and their
    median is one or the other, or anything in between.)"""
    cmd = [sys.executable, str(SCRIPTS / case.script), "--steps", str(case.steps), "--print-step-times", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith('{"step_times_ms"'))
    return trimmed_mean(json.loads(line)["step_times_ms"][WARMUP:])


def cpu_case(case: CpuCase, pairs: int, tmp: Path) -> dict:
    """Per pair: a profiled run of "before" (its forecast), then before and after unprofiled. The
    machine's load moves from minute to minute, so each forecast is judged against the measurement
    made next to it: the case's result is the pair with the median forecast/measured ratio (its trace
    is the one kept for tests/e2e/test_accuracy.py); all pairs are reported."""
    load0 = load()
    runs = []
    for i in range(pairs):
        trace, report = profile_before(case, tmp / f"{case.name}-{i}")
        forecast, source = forecast_of(case, trace, report)
        before, after = step_ms(case, case.before), step_ms(case, case.after)
        measured = before / after
        runs.append(((forecast.get("speedup") or 0.0) / measured, forecast, source, trace, before, after))
    runs.sort(key=lambda r: r[0])
    _, forecast, source, trace, before, after = runs[len(runs) // 2]
    measured = before / after
    return {"name": case.name, "script": case.script, "before": list(case.before), "after": list(case.after),
            "rule": case.rule, "model": case.model, "params": case.params, "fix": case.fix, "source": source,
            "forecast": forecast, "measured": round(measured, 3), "pair_ms": [round(before, 3), round(after, 3)],
            "pairs": [{"forecast": r[1].get("speedup"), "before_ms": round(r[4], 3), "after_ms": round(r[5], 3),
                       "measured": round(r[4] / r[5], 3)} for r in runs],
            "load": [load0, load()], "ok": judge(forecast.get("speedup"), measured), "trace": str(trace)}


def zoo() -> list:
    from perfsleuth.api import analyze_path

    rows = []
    for case in tomllib.loads((ROOT / "fixtures" / "cases.toml").read_text())["case"]:
        rep = analyze_path(ROOT / case["trace"]).to_dict()
        fired = [f["rule"] for f in rep["findings"]]
        ok = (rep["verdict"] == case["expected_verdict"] and all(r in fired for r in case["must_fire"])
              and not any(r in fired for r in case["must_not_fire"]))
        rows.append((case["name"], case["expected_verdict"], rep["verdict"], fired, ok))
    return rows


def rejudge(recorded: Path = RECORDED) -> list:
    """The recorded cases again, their forecasts recomputed from the recorded traces with the code as it
    is now (the measurements stay: they were made next to those traces)."""
    from perfsleuth.api import forecast_fix

    rows = []
    for c in json.loads((recorded / "measured.json").read_text())["cases"]:
        fc = forecast_fix(recorded / c["trace"], c["model"], c["params"] or None)
        rows.append({**c, "forecast": fc, "ok": judge(fc.get("speedup"), c["measured"]),
                     "trace": str(recorded / c["trace"])})
    return rows


def record(rows: list) -> None:
    """The before traces and the measurements, for tests/e2e/test_accuracy.py."""
    RECORDED.mkdir(parents=True, exist_ok=True)
    cases = []
    for r in rows:
        dest = RECORDED / f"{r['name']}.pt.trace.json.gz"
        if Path(r["trace"]).resolve() != dest.resolve():
            shutil.copyfile(r["trace"], dest)
        cases.append({k: v for k, v in r.items() if k not in ("trace", "ok")} | {"trace": dest.name})
    misses = {r["name"]: f"forecast {_x(r['forecast'].get('speedup'))} against {r['measured']:.2f}x measured "
                         f"(load {r['load'][0][0]} -> {r['load'][1][0]})" for r in rows if not r["ok"]}
    doc = {"machine": machine(), "recorded": time.strftime("%Y-%m-%d %H:%M"), "cases": cases, "known_misses": misses}
    (RECORDED / "measured.json").write_text(json.dumps(doc, indent=1) + "\n")


def machine() -> dict:
    import torch

    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {"cpus": os.cpu_count(), "affinity": affinity, "python": platform.python_version(),
            "torch": torch.__version__, "system": f"{platform.system()} {platform.release()}"}


def _x(v) -> str:
    return "—" if v is None else f"{v:.2f}x"


def _forecast(fc: dict) -> str:
    if fc.get("speedup") is None:
        return f"no forecast ({fc.get('reason')})"
    return f"{fc['speedup']:.2f}x ({fc['low']:.2f}–{fc['high']:.2f}x)"


def render(cpu: list, gpu: list, rows: list, info: dict, pairs: int) -> str:
    out = ["# Accuracy", "",
           "Generated by `python benchmarks/fix_verification.py --write docs/accuracy.md` (add `--record` to keep "
           "the \"before\" traces and measurements in `fixtures/accuracy/`, which `tests/e2e/test_accuracy.py` "
           "recomputes the forecasts from on every test run).", "",
           "## Do forecasts come true?", "",
           "A forecast is right when it lies within **0.67x–1.5x** of the measured speed-up, and a fix that does "
           "not help (measured below 1.1x) must be forecast at **1.2x or less**. Forecasts come from perfsleuth's "
           "analysis of a profiled `perfsleuth run --no-stack` of the \"before\" program; measurements from "
           f"unprofiled runs of before and after, interleaved A/B ({pairs} pairs, each run's mean iteration time "
           f"after the first {WARMUP}, 10 % trimmed). Each pair has its own profiled run of \"before\" right before "
           "it (the load moves from minute to minute): a forecast and the measurement made next to it. The row "
           "shows the pair with the median forecast/measured ratio, its forecast recomputed from its recorded trace by "
           "the code of this commit; [all pairs: forecast / measured, as recorded] keeps the forecasts made at "
           "recording time (`--rejudge` recomputes only the kept trace's).", "",
           "### CPU fixes, measured on this machine", "",
           "| case | fix | forecast (range) | forecast from | measured | ratio | right | [all pairs] | load before → after |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in cpu:
        fc = r["forecast"]
        ratio = fc["speedup"] / r["measured"] if fc.get("speedup") else None
        pairs = ", ".join(f"{_x(p['forecast'])} / {p['measured']:.2f}x" for p in r["pairs"])
        out.append(f"| `{r['name']}` | {r['fix']} | {_forecast(fc)} | {r['source']} | **{r['measured']:.2f}x** | "
                   f"{'—' if ratio is None else f'{ratio:.2f}'} | {'yes' if r['ok'] else 'NO'} | [{pairs}] | "
                   f"{r['load'][0][0]} → {r['load'][1][0]} |")
    good = sum(r["ok"] for r in cpu)
    misses = [r["name"] for r in cpu if not r["ok"]]
    out += ["", f"{good}/{len(cpu)} CPU forecasts right" + (f" (missed: {', '.join(f'`{m}`' for m in misses)}; "
            "docs/forecast.md, Limits, says why a model can miss)" if misses else "") + f". Machine: {info['cpus']} cores (affinity {info['affinity']}), "
            f"Python {info['python']}, torch {info['torch']}, {info['system']}; load average (1 min) as shown.", "",
            "### GPU-only fixes, on the trace simulator's before/after pairs (`fixtures/synth/after.py`)", "",
            "| pair | rule (fired) | forecast (range) | measured | ratio | right |", "|---|---|---|---|---|---|"]
    for g in gpu:
        fc = g["forecast"]
        ratio = fc["speedup"] / g["measured"] if fc.get("speedup") else None
        out.append(f"| `{g['before']}` → `{g['name']}` | `{g['rule']}` ({'yes' if g['fired'] else 'no'}) | "
                   f"{_forecast(fc)} | **{g['measured']:.2f}x** | {'—' if ratio is None else f'{ratio:.2f}'} | "
                   f"{'yes' if g['ok'] else 'NO'} |")
    out += ["", f"{sum(g['ok'] for g in gpu)}/{len(gpu)} GPU forecasts right.", "",
            "## The bottleneck zoo (fixtures/cases.toml)", "",
            "| case | expected | perfsleuth says | findings | right |", "|---|---|---|---|---|"]
    for name, expected, got, fired, ok in rows:
        out.append(f"| {name} | {expected} | {got} | {', '.join(fired) or '-'} | {'yes' if ok else 'NO'} |")
    out += ["", f"{sum(r[4] for r in rows)}/{len(rows)} cases fully right (verdict, rules that must fire, rules that "
            "must not).", ""]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", type=Path, help="write the Markdown result to this file")
    ap.add_argument("--record", action="store_true", help="keep the before traces and measurements in fixtures/accuracy/")
    ap.add_argument("--pairs", type=int, default=3, help="A/B pairs per CPU case")
    ap.add_argument("--cases", nargs="*", help="only these CPU cases (default: all)")
    ap.add_argument("--rejudge", action="store_true",
                    help="measure nothing: recompute the forecasts of the recorded cases (fixtures/accuracy/) with "
                         "the current code, and render (with --record: update measured.json)")
    ap.add_argument("--recorded", type=Path, default=RECORDED,
                    help="with --rejudge: another recording, e.g. an older commit's fixtures/accuracy "
                         "(git archive COMMIT fixtures/accuracy | tar -x -C DIR)")
    args = ap.parse_args()
    if args.recorded.resolve() != RECORDED.resolve() and (args.record or not args.rejudge):
        ap.error("--recorded goes with --rejudge alone (--record writes fixtures/accuracy/)")
    cases = [c for c in CPU_CASES if not args.cases or c.name in args.cases]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cpu = rejudge(args.recorded) if args.rejudge else []
        for case in ([] if args.rejudge else cases):
            cpu.append(cpu_case(case, args.pairs, tmp))
            r = cpu[-1]
            print(f"{r['name']:<24} forecast {_x(r['forecast'].get('speedup'))} measured {r['measured']:.2f}x "
                  f"{[(p['forecast'], p['measured']) for p in r['pairs']]} {'ok' if r['ok'] else 'WRONG'} "
                  f"load {r['load']}", file=sys.stderr)
        if args.record:
            record(cpu)
        from fixtures.synth.after import PAIRS

        gpu = [gpu_pair(name, tmp) for name in PAIRS]
    text = render(cpu, gpu, zoo(), machine(), args.pairs)
    print(text)
    if args.write:  # the section benchmarks/unseen.py writes into the same file stays as it is
        kept = kept_section(args.write)
        args.write.write_text(text + (f"\n{kept}" if kept else ""))
    sys.exit(0 if all(r["ok"] for r in cpu + gpu) else 1)


if __name__ == "__main__":
    main()
