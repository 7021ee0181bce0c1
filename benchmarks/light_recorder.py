"""What the light recorder (docs/run.md, "No repeated step") costs for torch work done before the first step.

    python benchmarks/light_recorder.py [--samples 20000] [--repeats 5]

A script's set-up normalises SAMPLES tensors one at a time (13 torch ops each) before any step boundary,
the worst case for the light recorder, which records every op until the first boundary and then
throws the recording away. Each measurement is a fresh interpreter: `off` runs the set-up plainly,
`light` under the light recorder (torch.profiler, CPU activity, no stacks, no shapes), stopped and
discarded afterwards as at a first step boundary. Runs alternate off/light; the table gives medians,
the ratio per pair, and each process's peak RSS growth during the set-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time, torch
from torch.profiler import profile, ProfilerActivity
torch.set_num_threads(1)
mode, n = sys.argv[1], int(sys.argv[2])
torch.randn(4) + 1  # torch's own lazy initialisation, outside the measurement
if mode == "light":  # started (and kineto initialised) before the set-up, as the session does
    p = profile(activities=[ProfilerActivity.CPU]); p.start()
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
x = torch.stack([(torch.randn(16) - 0.5) / 2 for _ in range(n)])
t1 = time.perf_counter()
if mode == "light":
    p.stop(); del p
t2 = time.perf_counter()
print(json.dumps({"setup_s": t1 - t0, "discard_s": t2 - t1, "total_s": t2 - t0,
                  "peak_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - r0) / 1024}))
"""


def once(mode: str, samples: int) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, mode, str(samples)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    runs: dict = {"off": [], "light": []}
    for _ in range(args.repeats):
        for mode in runs:
            runs[mode].append(once(mode, args.samples))
    med = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in runs.items()}
    ratios = [b["total_s"] / a["total_s"] for a, b in zip(runs["off"], runs["light"])]
    ops = args.samples * 13
    print(f"{args.samples} samples, about {ops:,} torch ops before the first step, median of {args.repeats} pairs")
    print(f"| | set-up | discard at the first step | total | peak RSS growth |")
    print(f"|---|---|---|---|---|")
    for m, v in med.items():
        print(f"| {m} | {v['setup_s']:.2f} s | {v['discard_s']:.2f} s | {v['total_s']:.2f} s | {v['peak_mb']:.0f} MB |")
    extra = med["light"]["total_s"] - med["off"]["total_s"]
    print(f"ratio light/off per pair: {', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f}); "
          f"{extra / ops * 1e6:.1f} us and {(med['light']['peak_mb'] - med['off']['peak_mb']) * 1024 * 1024 / ops:.0f} "
          f"bytes per op")


if __name__ == "__main__":
    main()
