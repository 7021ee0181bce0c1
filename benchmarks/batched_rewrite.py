"""The batched-ops forecast against the measured rewrite (issue 39), per loop pattern and thread count.

For each pattern of benchmarks/batched_loops.py and each thread count:
(a) `perfsleuth run --record-shapes` on the loop version, fresh (its own output folder), and the `tiny-ops`
    finding's forecast read from report.json (speed-up, range, assumptions);
(b) the loop (A) and its rewrite (B) timed without the profiler, interleaved A B A B ..., each a fresh
    process that reports its median step after its warm-up steps; a pair's ratio is A's median over B's,
    the measured speed-up the median of the pair ratios. The 1-minute load average is read before each pair.
The forecast is right when it lies within 0.67-1.5x of the measured speed-up (/work/shared/FORECAST.md).

    python benchmarks/batched_rewrite.py [--patterns grouped_mlp moe] [--threads 1 2] [--pairs 4]
        [--measure N] [--out results.json] [--runs DIR] [--table]
    python benchmarks/batched_rewrite.py --rejudge results.json   # the model again on the kept traces
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = Path(__file__).resolve().parent / "batched_loops.py"
PATTERNS = ("grouped_mlp", "cat_loop", "heads", "moe", "moe_dispatch")
# the four ways (comprehension + stack, for + append + cat, per-head attention, per-expert MoE with the
# rewrite that keeps the loop's arithmetic); `moe` (the dense rewrite, 8x the arithmetic) on request
DEFAULT = ("grouped_mlp", "cat_loop", "heads", "moe_dispatch")
# the patterns the model was changed while reading (docs/accuracy.md): since issue 39's third round, all four;
# a program written elsewhere is validated apart (its own section there)
FITTED = ("grouped_mlp", "cat_loop", "heads", "moe_dispatch")


def load() -> float:
    return os.getloadavg()[0]


def forecast(pattern: str, threads: int, workdir: Path, no_shapes: bool = False, measure: int | None = None,
             suffix: str = "") -> dict:
    """The tiny-ops finding's forecast of a fresh `perfsleuth run` of the loop version, recorded with input shapes
    (the batched-ops model derives what the rewrite adds from them; `no_shapes`: its fitted cost instead)."""
    out = workdir / f"{pattern}-t{threads}{suffix}"
    cmd = [sys.executable, "-m", "perfsleuth", "run", "-o", str(out), "--force"] + (
        ["--measure", str(measure)] if measure else []) + (
        [] if no_shapes else ["--record-shapes"]) + [str(PROGRAM), "--pattern", pattern, "--threads", str(threads),
                                                    "--steps", "200"]
    before = load()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if not (out / "report.json").exists():
        return {"error": done.stderr[-2000:], "cmd": " ".join(cmd)}
    report = json.loads((out / "report.json").read_text())
    found = [f for f in report.get("findings", []) if f.get("rule") == "tiny-ops"]
    m = report.get("measurement") or {}
    return {"cmd": " ".join(cmd[2:]), "load": [before, load()], "finding": bool(found),
            "forecast": found[0].get("forecast") if found else None, "model": model_forecast(out),
            "trace_dir": str(out), "busy": m.get("busy_reason"), "overhead": m.get("overhead")}


def model_forecast(out: Path) -> dict:
    """The batched-ops model on the run's trace, by the code of this checkout (also where the tiny-ops rule
    did not fire: on a busy machine its op-time thresholds can miss a loop the model still sees)."""
    from perfsleuth.api import forecast_fix

    fc = forecast_fix(out / "trace.pt.trace.json.gz", "batched-ops")
    return {k: fc.get(k) for k in ("speedup", "low", "high", "kind", "reason", "assumptions")}


def rejudge(path: Path) -> None:
    """Recompute the model's forecasts of a results file from its kept traces (--runs), and print the table."""
    rows = json.loads(path.read_text())
    for row in rows:
        if row.get("run", {}).get("trace_dir"):
            row["run"]["model"] = model_forecast(Path(row["run"]["trace_dir"]))
        fc = (row.get("run") or {}).get("model") or {}
        mea = row["measured"]
        ratio = fc.get("speedup") and round(fc["speedup"] / mea["speedup"], 2)
        print(f"{row['pattern']} t{row['threads']}: model {fc.get('speedup')} ({fc.get('low')}-{fc.get('high')}, "
              f"{fc.get('kind')}), rule fired {row['run'].get('finding')}; measured {mea['speedup']}x "
              f"({mea['min']}-{mea['max']}x, {len(mea['pairs'])} pairs, load "
              f"{min(r['load'][0] for r in mea['pairs'])}-{max(r['load'][1] for r in mea['pairs'])}); "
              f"ratio {ratio}", flush=True)
    path.write_text(json.dumps(rows, indent=1))
    print(table(rows, model=True), flush=True)
    print(sides(rows, model=True), flush=True)


def table(rows: list, model: bool = False) -> str:
    """The results as the Markdown table of docs/accuracy.md (issue 39): fitted patterns first; the tiny-ops
    finding's forecast where it fired, else (and with `model`: always) the batched-ops model's."""
    out = [("| pattern | threads | run (UTC), load | fired | forecast (range) | measured (pairs) | pairs' load | "
            "forecast / measured | right |"), "|---|--:|---|---|---|---|---|--:|---|"]
    for fitted in (True, False):
        for r in (r for r in rows if (r["pattern"] in FITTED) == fitted):
            run, mea = r.get("run") or {}, r["measured"]
            fc = (run.get("model") if model else None) or run.get("forecast") or run.get("model") or {}
            ratio = round(fc["speedup"] / mea["speedup"], 3) if fc.get("speedup") else None
            got = (f"{fc['speedup']:.2f}x ({fc['low']:.2f}–{fc['high']:.2f}x)" if fc.get("speedup")
                   else f"none: {fc.get('reason')}")
            load = run.get("load") or [float("nan")] * 2
            pl = [x for p in mea["pairs"] for x in p["load"]]
            out.append(f"| `{r['pattern']}` ({'fitted' if fitted else 'unseen'}) | {r['threads']} | "
                       f"{r['date'][11:16]}, {load[0]:.2f} → {load[1]:.2f} | {'yes' if run.get('finding') else 'no'} | "
                       f"{got} | **{mea['speedup']:.2f}x** ({mea['min']:.2f}–{mea['max']:.2f}x, {len(mea['pairs'])}) | "
                       f"{min(pl):.2f}–{max(pl):.2f} | {ratio if ratio is not None else '—'} | "
                       f"{'yes' if ratio and 0.67 <= ratio <= 1.5 else 'no'} |")
    return "\n".join(out) + "\n"


SIDES = re.compile(r"before \(([\d.]+) ms without it\), \d+ after \(([\d.]+) ms\)")


def sides(rows: list, model: bool = False) -> str:
    """Which side of the ratio errs (issue 39, fourth round): the model's loop step without the profiler (the
    recording's, from its profiler_cost assumption) against the A/B's loop step, and its step after the rewrite
    against the A/B's rewrite step (medians of the pairs); the ratio of the two is forecast / measured."""
    out = ["| pattern | threads | loop step: model / A/B, ms (ratio) | after the rewrite: model / A/B, ms (ratio) |",
           "|---|--:|---|---|"]
    for r in rows:
        run, mea = r.get("run") or {}, r["measured"]
        fc = (run.get("model") if model else None) or run.get("forecast") or run.get("model") or {}
        got = SIDES.search(((fc.get("assumptions") or {}).get("profiler_cost")) or "")
        if not got:
            continue
        b, a = float(got.group(1)), float(got.group(2))
        loop = statistics.median(p["loop_ms"] for p in mea["pairs"])
        rw = statistics.median(p["batched_ms"] for p in mea["pairs"])
        out.append(f"| `{r['pattern']}` | {r['threads']} | {b:.2f} / {loop:.2f} ({b / loop:.2f}) | "
                   f"{a:.2f} / {rw:.2f} ({a / rw:.2f}) |")
    return "\n".join(out) + "\n"


def medians(rows: list) -> str:
    """--forecasts: each case's fresh runs' model forecasts, their median, and it over the measured speed-up."""
    out = ["| pattern | threads | the runs' forecasts | median | measured | median / measured | in the band |",
           "|---|--:|---|--:|--:|--:|---|"]
    for r in rows:
        if r.get("forecasts"):
            m = statistics.median(r["forecasts"])
            ratio = m / r["measured"]["speedup"]
            out.append(f"| `{r['pattern']}` | {r['threads']} | {', '.join(f'{x:.2f}' for x in r['forecasts'])} | "
                       f"{m:.2f}x | {r['measured']['speedup']:.2f}x | {ratio:.2f} | "
                       f"{'yes' if 0.67 <= ratio <= 1.5 else 'no'} |")
    return "\n".join(out) + "\n"


def step_ms(pattern: str, threads: int, batched: bool, steps: int, warmup: int) -> float:
    cmd = [sys.executable, str(PROGRAM), "--pattern", pattern, "--threads", str(threads), "--times",
           "--steps", str(steps), "--warmup", str(warmup)] + (["--batched"] if batched else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["median_ms"]


def measure(pattern: str, threads: int, pairs: int, steps: int, warmup: int, between=None, every: int = 0) -> dict:
    """`pairs` interleaved A/B pairs; with `every`, `between()` runs after each `every` pairs but the last."""
    rows = []
    for k in range(pairs):
        if every and k and k % every == 0 and between is not None:
            between()
        before = load()
        a = step_ms(pattern, threads, False, steps, warmup)
        b = step_ms(pattern, threads, True, steps, warmup)
        rows.append({"loop_ms": round(a, 3), "batched_ms": round(b, 3), "ratio": round(a / b, 3),
                     "load": [round(before, 2), round(load(), 2)]})
        print(f"  {pattern} t{threads} pair {k + 1}: loop {a:.2f} ms, rewrite {b:.2f} ms, {a / b:.2f}x, "
              f"load {before:.2f} -> {load():.2f}", flush=True)
    ratios = [r["ratio"] for r in rows]
    return {"speedup": round(statistics.median(ratios), 3), "min": min(ratios), "max": max(ratios), "pairs": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--patterns", nargs="+", default=list(DEFAULT), choices=PATTERNS)
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--steps", type=int, default=40, help="steps per timed process")
    p.add_argument("--warmup", type=int, default=10, help="of which left out of the median")
    p.add_argument("--no-forecast", action="store_true", help="only the A/B")
    p.add_argument("--no-shapes", action="store_true", help="record without input shapes (the model's fitted cost)")
    p.add_argument("--forecasts", type=int, default=1, help="fresh perfsleuth runs per case, between the pairs "
                   "(the first before them); each run's model forecast and their median are reported")
    p.add_argument("--measure", type=int, help="perfsleuth run --measure N: N unprofiled steps timed for the "
                   "baseline (default: run's own)")
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    p.add_argument("--table", type=Path, help="write the results as docs/accuracy.md's Markdown table here")
    p.add_argument("--runs", type=Path, help="keep the perfsleuth runs' folders here (default: a temporary folder)")
    p.add_argument("--rejudge", type=Path, help="recompute the model's forecasts in this results file, measure nothing")
    args = p.parse_args()
    if args.rejudge:
        rejudge(args.rejudge)
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="batched_rewrite_") as tmp:
        tmp = args.runs or tmp
        for pattern in args.patterns:
            for threads in args.threads:
                row = {"pattern": pattern, "threads": threads,
                       "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes")}
                if not args.no_forecast:
                    row["run"] = forecast(pattern, threads, Path(tmp), args.no_shapes, args.measure)
                    fc = row["run"].get("forecast") or row["run"].get("model") or {}
                    print(f"{pattern} t{threads}: forecast {fc.get('speedup')} ({fc.get('low')}-{fc.get('high')}) "
                          f"rule fired: {row['run'].get('finding')} {fc.get('reason') or ''} "
                          f"{row['run'].get('error') or ''}", flush=True)
                more = []  # --forecasts: more fresh runs, between the pairs

                def again(more=more, pattern=pattern, threads=threads):
                    more.append(forecast(pattern, threads, Path(tmp), args.no_shapes, args.measure,
                                         suffix=f"-{len(more) + 2}"))
                every = -(-args.pairs // args.forecasts) if args.forecasts > 1 and not args.no_forecast else 0
                row["measured"] = measure(pattern, threads, args.pairs, args.steps, args.warmup, again, every)
                fc = (row.get("run") or {}).get("forecast") or (row.get("run") or {}).get("model") or {}
                if fc.get("speedup"):
                    row["ratio"] = round(fc["speedup"] / row["measured"]["speedup"], 3)
                    row["right"] = 0.67 <= row["ratio"] <= 1.5
                if more:
                    row["more_runs"] = more
                    got = [(r.get("model") or {}).get("speedup") for r in [row["run"]] + more]
                    got = [g for g in got if g]
                    if got:
                        row["forecasts"] = got
                        row["median_ratio"] = round(statistics.median(got) / row["measured"]["speedup"], 3)
                        print(f"{pattern} t{threads}: the model's forecasts of {len(got)} fresh runs {got}, median / "
                              f"measured {row['median_ratio']}", flush=True)
                print(f"{pattern} t{threads}: measured {row['measured']['speedup']}x "
                      f"({row['measured']['min']}-{row['measured']['max']}x), forecast/measured "
                      f"{row.get('ratio')}", flush=True)
                results.append(row)
                if args.out:
                    args.out.write_text(json.dumps(results, indent=1))
                if args.table:
                    args.table.write_text(table(results) + "\n" + sides(results) + "\n" + medians(results))
    print(table(results), flush=True)
    print(sides(results), flush=True)
    if any(r.get("forecasts") for r in results):
        print(medians(results), flush=True)


if __name__ == "__main__":
    main()
