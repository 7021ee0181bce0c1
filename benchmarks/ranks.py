"""Scale-out benchmark: a directory of N rank traces, each a ~50 MB trace, analysed with one worker,
two local worker processes, and a Dask LocalCluster of two workers.

    python benchmarks/ranks.py --ranks 1 2 4 8 --write docs/perf.md

The rank traces are copies of fixtures/traces/real/v100_df_index_resolver.json.gz (216k events, 53.7 MB
of JSON as Kineto wrote it), each with its own rank in distributedInfo (so every copy is a different
rank of one job to the cross-rank analysis: all collectives match, nobody waits). Each configuration runs
`perfsleuth analyze DIR` in a fresh interpreter (imports and, for Dask, the cluster's start-up
included), `--repeat` times, interleaved across configurations; the median is reported. A least-
squares line through the sizes tells whether time grows linearly in N. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import re

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "fixtures" / "traces" / "real" / "v100_df_index_resolver.json.gz"
CONFIGS = {"1 worker": ["-j", "1"], "2 workers": ["-j", "2"], "LocalCluster (2 workers)": ["-j", "2", "--scheduler", "local"]}
DIST = re.compile(rb'"distributedInfo": \{[^}]*\}')
BEGIN, END = "<!-- ranks-bench:begin (written by benchmarks/ranks.py --write) -->", "<!-- ranks-bench:end -->"


def make_ranks(folder: Path, n: int, raw: bytes) -> None:
    """N copies of the document as Kineto wrote it (its layout and size kept), each with its own rank."""
    folder.mkdir(parents=True, exist_ok=True)
    found = DIST.search(raw[:1_000_000]) or DIST.search(raw)
    if found is None:
        raise SystemExit(f"{SOURCE}: no distributedInfo to give each copy its rank")
    for r in range(n):
        info = b'"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d}' % (r, n)
        (folder / f"rank{r}.json").write_bytes(raw[:found.start()] + info + raw[found.end():])


def run_once(folder: Path, args: list) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "perfsleuth", "analyze", str(folder), *args],
                          capture_output=True, text=True, timeout=1800)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"perfsleuth analyze {folder} {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return elapsed


def fit(ns: list, ts: list) -> tuple[float, float, float]:
    """Least squares t = a + b n; the worst relative distance of a size from the line."""
    mn, mt = statistics.fmean(ns), statistics.fmean(ts)
    b = sum((n - mn) * (t - mt) for n, t in zip(ns, ts)) / sum((n - mn) ** 2 for n in ns)
    a = mt - b * mn
    worst = max(abs(t - (a + b * n)) / t for n, t in zip(ns, ts))
    return a, b, worst


def table(ranks: list, results: dict, file_mb: float, load: str, command: str) -> str:
    lines = [f"`{command}`, {time.strftime('%Y-%m-%d')}. Each rank: {file_mb:.1f} MB of JSON (216,092 entries); "
             "wall time of `perfsleuth analyze DIR` in a fresh process, median of the runs listed below.", "",
             "| ranks | total | " + " | ".join(CONFIGS) + " |", "|--:|--:|" + "--:|" * len(CONFIGS)]
    for n in ranks:
        lines.append(f"| {n} | {n * file_mb:.0f} MB | "
                     + " | ".join(f"{statistics.median(results[c][n]):.2f} s" for c in CONFIGS) + " |")
    lines += ["", "| configuration | least squares: start-up + per rank | worst size off the line |", "|:--|--:|--:|"]
    for c in CONFIGS:
        a, b, worst = fit(ranks, [statistics.median(results[c][n]) for n in ranks])
        lines.append(f"| {c} | {a:.2f} s + {b:.2f} s per rank | {worst:.0%} |")
    runs = "; ".join(f"{c}: " + ", ".join(f"N={n} " + "/".join(f"{t:.2f}" for t in results[c][n]) for n in ranks)
                     for c in CONFIGS)
    lines += ["", f"Runs, in seconds: {runs}", "",
              f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, load average before the "
              f"run {load}."]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "perfsleuth-ranks-bench")
    ap.add_argument("--write", type=Path, help="replace the section between the markers in this file")
    args = ap.parse_args()
    raw = gzip.decompress(SOURCE.read_bytes())
    for n in args.ranks:
        make_ranks(args.workdir / f"n{n}", n, raw)
    file_mb = (args.workdir / f"n{args.ranks[0]}" / "rank0.json").stat().st_size / 1e6
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    results: dict = {c: {n: [] for n in args.ranks} for c in CONFIGS}
    for _ in range(args.repeat):  # interleaved: every configuration and size once per round
        for n in args.ranks:
            for c, extra in CONFIGS.items():
                t = run_once(args.workdir / f"n{n}", extra)
                results[c][n].append(t)
                print(f"N={n} {c}: {t:.2f} s", flush=True)
    command = "python benchmarks/ranks.py " + " ".join(sys.argv[1:])
    text = table(args.ranks, results, file_mb, load, command)
    print(text)
    if args.write:
        page = args.write.read_text()
        if BEGIN in page:
            head, rest = page.split(BEGIN, 1)
            page = head + BEGIN + "\n" + text + "\n" + END + rest.split(END, 1)[1]
        else:
            page = page.rstrip("\n") + "\n\n## Many ranks\n\n" + BEGIN + "\n" + text + "\n" + END + "\n"
        args.write.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
