"""The batched-ops model's two sides against the program and its rewrite recorded back to back (issue 39).

The model's forecast is its step before the rewrite over its step after it (`profiler_cost`: both without the
profiler). An A/B a minute later compares against a machine that may run the same step 2x slower or faster
(benchmarks/baseline_steps.py), so this measures each side where it can be checked at the same moment: each
pattern of benchmarks/batched_loops.py and its rewrite run under `perfsleuth run --record-shapes` one right
after the other, --reps times; the model's step before is divided by the loop's unprofiled median step, its
step after by the rewrite's unprofiled median step (perfsleuth run's clock, the same steps of each run).

    python benchmarks/batched_sides.py [--patterns cat_loop heads] [--threads 1 2] [--reps 2] [--out r.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = Path(__file__).resolve().parent / "batched_loops.py"
SIDES = re.compile(r"before \(([\d.]+) ms without it\), \d+ after \(([\d.]+) ms\)")


def record(pattern: str, threads: int, batched: bool, out: Path) -> float:
    """The run's unprofiled median step, ms."""
    cmd = [sys.executable, "-m", "perfsleuth", "run", "--force", "-o", str(out), "--record-shapes", str(PROGRAM),
           "--pattern", pattern, "--threads", str(threads), "--steps", "200"] + (["--batched"] if batched else [])
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    clock = json.loads(gzip.open(out / "trace.pt.trace.json.gz").read())["perfsleuth_final"]["clock"]
    return statistics.median(t / 1000 for t in clock["unprofiled_us"] + clock["after_us"])


def main() -> None:
    from perfsleuth.api import forecast_fix

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--patterns", nargs="+", default=["grouped_mlp", "cat_loop", "heads", "moe_dispatch"])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="batched_sides_") as tmp:
        for k in range(args.reps):
            for pattern in args.patterns:
                for threads in args.threads:
                    loop = record(pattern, threads, False, Path(tmp) / "loop")
                    rewrite = record(pattern, threads, True, Path(tmp) / "rewrite")
                    fc = forecast_fix(Path(tmp) / "loop" / "trace.pt.trace.json.gz", "batched-ops")
                    got = SIDES.search((fc.get("assumptions") or {}).get("profiler_cost") or "")
                    if not got or not fc.get("speedup"):
                        print(pattern, threads, "no forecast:", fc.get("reason"), flush=True)
                        continue
                    b, a = float(got.group(1)), float(got.group(2))
                    r = {"pattern": pattern, "threads": threads, "loop_ms": round(loop, 3),
                         "rewrite_ms": round(rewrite, 3), "model_before_ms": b, "model_after_ms": a,
                         "before": round(b / loop, 3), "after": round(a / rewrite, 3),
                         "forecast": fc["speedup"], "recorded": round(loop / rewrite, 3),
                         "ratio": round(fc["speedup"] / (loop / rewrite), 3)}
                    rows.append(r)
                    print(json.dumps(r), flush=True)
                    if args.out:
                        args.out.write_text(json.dumps(rows, indent=1))
    print("| pattern | threads | before: model / loop (ms) | after: model / rewrite (ms) | forecast / recorded |\n"
          "|---|--:|---|---|---|")
    for pattern in args.patterns:
        for threads in args.threads:
            rs = [r for r in rows if r["pattern"] == pattern and r["threads"] == threads]
            if rs:
                print(f"| `{pattern}` | {threads} | " + " · ".join(f"{r['before']:.2f}" for r in rs) + " | "
                      + " · ".join(f"{r['after']:.2f}" for r in rs) + " | "
                      + " · ".join(f"{r['forecast']:.1f} / {r['recorded']:.1f} ({r['ratio']:.2f})" for r in rs) + " |")


if __name__ == "__main__":
    main()
