"""Which statistic of `perfsleuth run`'s few unprofiled steps is the program's steady step (issue 39, fifth round).

`perfsleuth run` times a handful of steps without recording: `wait` steps at the start of the script, the torch
profiler's `warmup` steps (it runs, records no op) and `after` steps right after the recorded window. Forecasts
that state a speed-up against the step without the profiler (the batched-ops model) take their step from these.
The steady step is what an A/B measures: the median of a process's later steps. Here each pattern of
benchmarks/batched_loops.py runs under `perfsleuth run --full` for --steps steps; the script itself prints the
median of its steps after --steady-from (its own clock, long after perfsleuth's windows), and each candidate
statistic of the timed steps is divided by it.

    python benchmarks/baseline_steps.py [--patterns grouped_mlp heads] [--threads 1 2] [--runs 2] [--out r.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

PROGRAM = Path(__file__).resolve().parent / "batched_loops.py"
STATS = {
    "median of wait+after": lambda s: float(np.median(s["wait"] + s["after"])),
    "median of wait+warmup+after": lambda s: float(np.median(s["all"])),
    "lower quartile of wait+warmup+after": lambda s: float(np.quantile(s["all"], 0.25)),
    "min of wait+warmup+after": lambda s: float(min(s["all"])),
}


def one(pattern: str, threads: int, steps: int, steady_from: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "perfsleuth", "run", "--full", "--force", "-o", str(out), "--record-shapes",
           str(PROGRAM), "--pattern", pattern, "--threads", str(threads), "--steps", str(steps),
           "--warmup", str(steady_from), "--times"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    steady = json.loads([x for x in done.stdout.splitlines() if "median_ms" in x][-1])["median_ms"]
    clock = json.loads(gzip.open(out / "trace.pt.trace.json.gz").read())["perfsleuth_final"]["clock"]
    ms = {k: [t / 1000 for t in clock[f"{k}_us"]] for k in ("unprofiled", "warmup", "after", "profiled")}
    s = {"wait": ms["unprofiled"], "after": ms["after"], "all": ms["unprofiled"] + ms["warmup"] + ms["after"]}
    return {"pattern": pattern, "threads": threads, "steady_ms": round(steady, 3),
            "steps_ms": {k: [round(t, 2) for t in v] for k, v in ms.items()},
            "ratio": {name: round(f(s) / steady, 3) for name, f in STATS.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--patterns", nargs="+", default=["grouped_mlp", "cat_loop", "heads", "moe_dispatch"])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--steady-from", type=int, default=40)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="baseline_steps_") as tmp:
        for k in range(args.runs):
            for pattern in args.patterns:
                for threads in args.threads:
                    r = one(pattern, threads, args.steps, args.steady_from, Path(tmp) / f"{pattern}-{threads}-{k}")
                    rows.append(r)
                    print(pattern, threads, r["steady_ms"], r["ratio"], flush=True)
                    if args.out:
                        args.out.write_text(json.dumps(rows, indent=1))
    print("| statistic of the timed steps | / steady median: median (range) | median abs(log) |\n|---|---|--:|")
    for name in STATS:
        v = [r["ratio"][name] for r in rows]
        print(f"| {name} | {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f}) | "
              f"{statistics.median(abs(math.log(x)) for x in v):.3f} |")


if __name__ == "__main__":
    main()
