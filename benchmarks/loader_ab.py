"""An independent interleaved A/B of DataLoader worker counts, without the profiler (issue 40; the method
of /work/shared/CLIENTS.md "Measuring a fix independently"): the program runs A (its own num_workers) and
B (--workers N) alternately, A B A B ..., each a fresh process that times its own steps after the first
--skip (benchmarks/python_loader.py --times: the mean step, a throughput); a pair's ratio is A's step over
B's, the speed-up the median of the pair ratios. The 1-minute load average is printed beside each pair.

    python benchmarks/loader_ab.py --workers 2 [--pairs 5] [-- ARGS for python_loader.py]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

PROGRAM = Path(__file__).resolve().parent / "python_loader.py"


def step_ms(workers: int, extra: list) -> dict:
    out = subprocess.run([sys.executable, str(PROGRAM), "--times", "--workers", str(workers), *extra],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, nargs="+", default=[2], help="B's worker counts (one A/B series each)")
    p.add_argument("--baseline", type=int, default=0)
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("extra", nargs="*", help="arguments for python_loader.py (after --)")
    args = p.parse_args()
    result = {}
    for n in args.workers:
        ratios = []
        for k in range(args.pairs):
            before = os.getloadavg()[0]
            a, b = step_ms(args.baseline, args.extra), step_ms(n, args.extra)
            ratios.append(a["step_ms"] / b["step_ms"])
            print(f"workers {args.baseline} vs {n}: pair {k + 1}: A {a['step_ms']:.2f} ms, B {b['step_ms']:.2f} ms, "
                  f"{ratios[-1]:.2f}x, load {before:.2f} -> {b['load'][0]:.2f}", flush=True)
        result[n] = (statistics.median(ratios), min(ratios), max(ratios))
        print(f"workers {args.baseline} -> {n}: {result[n][0]:.2f}x ({result[n][1]:.2f}-{result[n][2]:.2f}x, "
              f"{len(ratios)} pairs)", flush=True)


if __name__ == "__main__":
    main()
