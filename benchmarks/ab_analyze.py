"""Two installs of perfsleuth, one trace: `perfsleuth analyze` timed in interleaved pairs (A, B, A, B, ...).

    python benchmarks/ab_analyze.py --a BEFORE/.venv/bin/perfsleuth --b AFTER/.venv/bin/perfsleuth \\
        --trace WORKDIR/v100_df_index_resolver.x10.json [--pairs 4] [--out-dir DIR] [-- EXTRA ARGS]

Each run is a fresh `A analyze TRACE --json OUT --force` (plus EXTRA ARGS, e.g. `-j 2`; with
--terminal-only `A analyze TRACE`, the command benchmarks/bench.py times), its terminal output thrown
away. Per run: CPU time of the command and everything it started (its decoding workers: user +
sys from getrusage(RUSAGE_CHILDREN) before and after), wall time, and the 1-minute load average from
/proc/loadavg just before it. The order inside a pair alternates (A B, then B A, ...) so neither
install always runs first. Printed: one line per run, then the medians of A and B and each pair's
ratio B / A, for CPU and wall. The two report.json files of the last pair are compared, fields that
time the analysis itself left out: "reports: identical" or the first keys that differ (exit 1).
Issue 35 item 5 measures `--a` at dbb31fa against `--b` at the current code (docs/perf.md), and what
the allocator's events alone cost: `--a "python benchmarks/without_memory.py" --b perfsleuth`
(--a and --b are command lines, split as a shell would).
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_equality import clean


def run_once(exe: str, trace: str, out: Path, extra: list, json_out: bool = True) -> dict:
    load = float(Path("/proc/loadavg").read_text().split()[0])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    files = ["--json", str(out), "--force"] if json_out else []
    proc = subprocess.run([*shlex.split(exe), "analyze", trace, *files, *extra],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # 1: a --fail-on gate, still a full analysis; but an uncaught exception exits with 1 too
    if proc.returncode not in (0, 1) or "Traceback (most recent call last)" in proc.stderr:
        sys.exit(f"{exe} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu": cpu, "wall": wall, "load": load}


def first_differences(a, b, where: str = "", limit: int = 5) -> list:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list = []
        for k in sorted(set(a) | set(b), key=str):
            out += first_differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{where}.{k}", limit)
            if len(out) >= limit:
                break
        return out[:limit]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += first_differences(x, y, f"{where}[{i}]", limit)
            if len(out) >= limit:
                break
        return out[:limit]
    return [] if a == b else [where or "."]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="perfsleuth executable of the baseline install")
    ap.add_argument("--b", required=True, help="perfsleuth executable of the install measured against it")
    ap.add_argument("--trace", required=True)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--out-dir", help="where the two report.json files go [default: a new temporary folder]")
    ap.add_argument("--compare-reports", action=argparse.BooleanOptionalAction, default=True,
                    help="compare the two report.json files (off when A and B are versions whose reports "
                         "are expected to differ, e.g. before and after a new section)")
    ap.add_argument("--terminal-only", action="store_true",
                    help="no --json: the terminal report alone, as benchmarks/bench.py times it (no reports "
                         "to compare)")
    ap.add_argument("extra", nargs="*", help="extra arguments for `analyze` (after --)")
    args = ap.parse_args()
    out = Path(args.out_dir or tempfile.mkdtemp(prefix="perfsleuth_ab_"))
    out.mkdir(parents=True, exist_ok=True)
    exe = {"A": args.a, "B": args.b}
    runs: dict = {"A": [], "B": []}
    for i in range(args.pairs):
        for which in ("A", "B") if i % 2 == 0 else ("B", "A"):
            r = run_once(exe[which], args.trace, out / f"{which}.json", args.extra, not args.terminal_only)
            runs[which].append(r)
            print(f"pair {i + 1} {which}: cpu {r['cpu']:.2f} s  wall {r['wall']:.2f} s  load {r['load']:.2f}",
                  flush=True)
    for key in ("cpu", "wall"):
        a = [r[key] for r in runs["A"]]
        b = [r[key] for r in runs["B"]]
        ratios = [y / x for x, y in zip(a, b)]
        print(f"{key}: median A {statistics.median(a):.2f} s, B {statistics.median(b):.2f} s, "
              f"B/A {statistics.median(b) / statistics.median(a):.3f}; pair ratios B/A "
              + ", ".join(f"{x:.3f}" for x in ratios))
    loads = [r["load"] for w in runs.values() for r in w]
    print(f"load average (1 min) before the runs: {min(loads):.2f}-{max(loads):.2f}")
    if not args.compare_reports or args.terminal_only:
        return 0
    diffs = first_differences(clean(json.loads((out / "A.json").read_text())),
                              clean(json.loads((out / "B.json").read_text())))
    print("reports: identical" if not diffs else "reports differ at: " + ", ".join(diffs))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
