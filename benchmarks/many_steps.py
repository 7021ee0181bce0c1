"""A trace with very many short steps (issue 18: 300,000 steps took 60 s and 1.3 GB, 48 s of it in
Report.to_dict, called twice), and the timing of `perfsleuth analyze` on it in fresh processes.

    python benchmarks/many_steps.py OUT.json --steps 300000          # write the trace
    python benchmarks/many_steps.py OUT.json --measure 3 [--before PYTHONPATH]   # A/B pairs: s, peak RSS

Each step is a CPU-only `ProfilerStep#N` holding one aten op (~200 bytes a step, as in the issue's 55 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def write(path: Path, steps: int) -> None:
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "deviceProperties": [], "traceEvents": [\n')
        for i in range(steps):
            t = i * 100
            events = [
                {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t, "dur": 95},
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 12, "dur": 50},
            ]
            f.write(",\n".join(json.dumps(e) for e in events))
            f.write(",\n" if i + 1 < steps else "\n")
        f.write("]}\n")


def _run_once(path: Path, pythonpath: str) -> tuple:
    """(wall s, peak RSS MiB) of `perfsleuth analyze PATH --json` in a fresh process (GNU time)."""
    env = {**os.environ, "PYTHONPATH": pythonpath} if pythonpath else dict(os.environ)
    out = subprocess.run(["/usr/bin/time", "-f", "%e %M", sys.executable, "-m", "perfsleuth", "analyze", str(path),
                          "--json", "/tmp/many_steps.report.json", "--force"],
                         check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    seconds, kib = out.stderr.strip().splitlines()[-1].split()
    return float(seconds), round(int(kib) / 1024)


def measure(path: Path, runs: int, before: str = "") -> None:
    """Interleaved A/B: `before` (a PYTHONPATH holding another perfsleuth) and this checkout, `runs` pairs."""
    pairs = []
    for _ in range(runs):
        a = _run_once(path, before) if before else None
        b = _run_once(path, "")
        pairs.append((a, b))
        print("before", a, "after", b, flush=True)
    after = [b for _, b in pairs]
    print("after: median s", statistics.median(x[0] for x in after), "median peak MiB",
          statistics.median(x[1] for x in after))
    if before:
        print("before: median s", statistics.median(a[0] for a, _ in pairs), "median peak MiB",
              statistics.median(a[1] for a, _ in pairs))
        print("per-pair time ratio after/before: median",
              round(statistics.median(b[0] / a[0] for a, b in pairs), 3))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("path", type=Path)
    ap.add_argument("--steps", type=int, help="write a trace of this many steps to PATH")
    ap.add_argument("--measure", type=int, help="analyze PATH this many times (pairs with --before)")
    ap.add_argument("--before", default="", help="PYTHONPATH of the perfsleuth to compare with")
    args = ap.parse_args()
    if args.steps:
        write(args.path, args.steps)
    if args.measure:
        measure(args.path, args.measure, args.before)
