"""Large-trace benchmark: perfsleuth vs HTA vs a bare JSON decode, in one run on one machine.

    python benchmarks/bench.py [--source fixtures/traces/real/v100_df_index_resolver.json.gz]
                               [--times 1 2 5 10 20] [--workdir /tmp/perfsleuth-bench] [--write docs/perf.md]
    python benchmarks/bench.py --check [--against docs/perf.md] [--tolerance 0.2]
    python benchmarks/bench.py --from-rows LOG [--write docs/perf.md]   # render an earlier run's rows

For each replication factor it builds the trace (benchmarks/make_large.py), then runs, each in a
fresh interpreter: (a) `perfsleuth analyze` end to end, (b) HTA's TraceAnalysis load +
get_temporal_breakdown, (c) msgspec.json.decode of the same file (the floor), and (a) again on the
.json.gz with (d) its bare gunzip. Wall time is measured around the child process (interpreter
start and imports included); memory is the child's own peak RSS (VmHWM), and for perfsleuth the larger
of that and the sampled peak PSS of its process tree (it decodes large files in forked workers).
x1 is the source's own 216k events (re-encoded): the mid-size case. The children run with bytecode
caching on (PYTHONDONTWRITEBYTECODE removed; one warm-up run first), as an installed package does.

--check reruns the cases recorded in docs/perf.md (the figures line --write leaves between the bench
markers) and compares, case by case, perfsleuth's time and memory as ratios to HTA and to the bare
msgspec decode measured in the same run -- ratios, because the shared machine's speed changes from
hour to hour. A ratio worse than recorded by more than --tolerance is a regression: exit code 1. It
is a benchmark (minutes: HTA alone takes a minute on x10), not a timed test; run it before a change
to trace/, analysis/ or facts/ is merged.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_large import load, replicate  # noqa: E402

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as installed: .pyc files


def measure(mode: str, path: Path, python: str = sys.executable, repeat: int = 1) -> dict:
    """Median wall time of `repeat` runs. perfsleuth is timed without memory sampling (sampling smaps
    slows the process it reads) and sampled for memory in one more run."""
    runs = [_run(mode, path, python, sample=False) for _ in range(repeat)]
    walls = sorted(r["wall_s"] for r in runs)
    out = {**runs[0], "wall_s": statistics.median(walls), "walls": walls}
    if mode == "perfsleuth":
        sampled = _run(mode, path, python, sample=True)
        out.update(rss_mb=sampled["rss_mb"], main_rss_mb=sampled["main_rss_mb"], sampled_wall_s=sampled["wall_s"])
    return out


def _run(mode: str, path: Path, python: str, sample: bool) -> dict:
    """Wall time and peak memory: the child's own peak RSS (VmHWM) and, with `sample`, the larger of
    that and the peak PSS of its process tree (perfsleuth decodes large files in forked workers),
    sampled every 200 ms (reading smaps walks page tables and takes locks the measured process needs)."""
    t = time.perf_counter()
    proc = subprocess.Popen([python, str(HERE / "_measure.py"), mode, str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)
    peaks = [0]

    def poll_memory() -> None:
        while proc.poll() is None:
            peaks.append(tree_pss_kb(proc.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=poll_memory, daemon=True)
    if sample:
        sampler.start()
    out, err = proc.communicate()  # wall time ends exactly when the child does
    wall = time.perf_counter() - t
    if sampler.is_alive():
        sampler.join()
    peak = max(peaks)
    if proc.returncode:
        raise SystemExit(f"{mode} {path} failed:\n{err[-2000:]}")
    rss = json.loads(out.strip().splitlines()[-1])["rss_mb"]
    return {"wall_s": round(wall, 2), "rss_mb": round(max(rss, peak / 1024), 1), "main_rss_mb": round(rss, 1)}


def tree_pss_kb(root: int) -> int:
    """PSS of a process and its descendants (found through /proc/PID/task/TID/children: cheap, so
    the sampling does not steal CPU from the workers it measures)."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                total += next((int(line.split()[1]) for line in fh if line.startswith("Pss:")), 0)
        except (OSError, ValueError):
            pass
    return total


def build(source: Path, times: int, workdir: Path) -> tuple[Path, Path, int]:
    import msgspec

    path = workdir / f"{source.name.split('.')[0]}.x{times}.json"
    gz = path.with_suffix(".json.gz")
    if not path.exists() or not gz.exists():
        data = msgspec.json.encode(replicate(load(source), times))
        path.write_bytes(data)
        gz.write_bytes(gzip.compress(data, compresslevel=6))
    n = len(msgspec.json.decode(path.read_bytes(), type=dict)["traceEvents"])
    return path, gz, n


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    versions = []
    for mod in ("perfsleuth", "hta", "msgspec", "pandas", "numpy"):
        try:
            m = __import__(mod)
            versions.append(f"{mod} {getattr(m, '__version__', '?')}")
        except ImportError:
            versions.append(f"{mod} missing")
    from importlib.metadata import version

    versions.append(f"traceinsight {version('traceinsight')}")
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}; " + ", ".join(versions))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path,
                    default=HERE.parent / "fixtures" / "traces" / "real" / "v100_df_index_resolver.json.gz")
    ap.add_argument("--times", type=int, nargs="+", default=[1, 2, 5, 10, 20])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/perfsleuth-bench"))
    ap.add_argument("--write", type=Path, help="put the results between the bench markers of this Markdown file")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each fast measurement; the median is "
                    "reported (HTA runs once)")
    ap.add_argument("--no-hta", action="store_true", help="skip HTA (slow) -- ratios a/b are then absent")
    ap.add_argument("--hta-python", action="append", default=[], metavar="PYTHON",
                    help="also time HTA with this interpreter (a venv with another HTA release, e.g. "
                         "holistictraceanalysis 0.5.0); repeatable")
    ap.add_argument("--check", action="store_true", help="rerun the cases recorded in --against and compare the "
                    "ratios to HTA and to the msgspec decode with the recorded ones (exit 1 on a regression)")
    ap.add_argument("--against", type=Path, default=HERE.parent / "docs" / "perf.md")
    ap.add_argument("--tolerance", type=float, default=0.2, help="with --check: a ratio may be this much "
                    "(relative) worse than recorded before it counts as a regression [0.2]")
    ap.add_argument("--from-rows", type=Path, metavar="LOG", help="measure nothing: render (and --write) the rows an "
                    "earlier run printed (its standard output, one JSON row per case: a --check run's too)")
    args = ap.parse_args()
    if args.from_rows:
        rows = [json.loads(line) for line in args.from_rows.read_text().splitlines() if line.startswith("{")]
        table = render(rows, machine(), args.hta_python, "python benchmarks/bench.py --check, rendered with "
                       f"--from-rows ({len(rows)} cases)")
        print(table)
        if args.write:
            write_section(args.write, table)
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    recorded = read_figures(args.against) if args.check else {}
    times = sorted(int(k[1:]) for k in recorded) if args.check else args.times
    rows = run_cases(args, times, hta=not args.no_hta)
    command = "python benchmarks/bench.py " + portable(sys.argv[1:])
    if args.check:
        text, regressions = check(recorded, figures(rows), args.tolerance)
        print(text)
        sys.exit(1 if regressions else 0)
    table = render(rows, machine(), args.hta_python, command)
    print(table)
    if args.write:
        write_section(args.write, table)


def run_cases(args, times: list, hta: bool = True) -> list:
    rows = []
    for k in times:
        path, gz, n = build(args.source, k, args.workdir)
        if not rows:
            _run("perfsleuth", path, sys.executable, sample=False)  # warm-up: writes the bytecode caches
        row = {"times": k, "events": n, "mb": round(path.stat().st_size / 1e6, 1),
               "gz_mb": round(gz.stat().st_size / 1e6, 1), "load": round(os.getloadavg()[0], 2)}
        row["a"] = measure("perfsleuth", path, repeat=args.repeat)
        row["c"] = measure("decode", path, repeat=args.repeat)
        row["a_gz"] = measure("perfsleuth", gz, repeat=args.repeat)
        row["d"] = measure("gunzip", gz, repeat=args.repeat)
        row["b"] = measure("hta", path) if hta else None
        row["b_other"] = [dict(measure("hta", path, py), python=py) for py in args.hta_python]
        row["load_after"] = round(os.getloadavg()[0], 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


# --- the recorded figures, and --check -------------------------------------------------------------
FIGURES = "<!-- bench:figures "
RATIOS = {"a/b": "time / HTA's", "a/c": "time / msgspec decode's", "rss a/b": "memory / HTA's",
          "rss a/c": "memory / msgspec decode's"}


def figures(rows: list) -> dict:
    """Per case (x1, x2, ...): perfsleuth's time and memory as ratios to HTA's and to the bare decode's
    of the same run, with the absolute figures and the load they were measured under."""
    out = {}
    for r in rows:
        a, b, c = r["a"], r["b"], r["c"]
        f = {"events": r["events"], "a_s": a["wall_s"], "a_mb": a["rss_mb"], "c_s": c["wall_s"], "c_mb": c["rss_mb"],
             "a/c": round(a["wall_s"] / c["wall_s"], 4), "rss a/c": round(a["rss_mb"] / c["rss_mb"], 4),
             "load": r.get("load")}
        if b:
            f.update({"b_s": b["wall_s"], "b_mb": b["rss_mb"], "a/b": round(a["wall_s"] / b["wall_s"], 4),
                      "rss a/b": round(a["rss_mb"] / b["rss_mb"], 4)})
        out[f"x{r['times']}"] = f
    return out


def read_figures(path: Path) -> dict:
    """The figures line --write left in `path` (a JSON object after FIGURES)."""
    text = path.read_text() if path.exists() else ""
    line = next((ln for ln in text.splitlines() if ln.startswith(FIGURES)), None)
    if line is None:
        raise SystemExit(f"{path} has no recorded figures ({FIGURES}...): run bench.py --write {path} first")
    return json.loads(line[len(FIGURES):].rsplit("-->", 1)[0])


def check(recorded: dict, now: dict, tolerance: float) -> tuple[str, list]:
    """The comparison table, and the regressions: a ratio now above recorded x (1 + tolerance)."""
    lines = ["| case | ratio | recorded | now | change | |", "|---|---|--:|--:|--:|---|"]
    regressions = []
    for case in sorted(recorded, key=lambda c: int(c[1:])):
        old, new = recorded[case], now.get(case, {})
        for key, what in RATIOS.items():
            if key not in old or key not in new:
                continue
            change = new[key] / old[key] - 1 if old[key] else 0.0
            worse = change > tolerance
            if worse:
                regressions.append((case, key))
            lines.append(f"| {case} | {what} | {old[key]:.3f} | {new[key]:.3f} | {change:+.0%} | "
                         f"{'**regression**' if worse else 'ok'} |")
    loads = ", ".join(f"{c} {now[c].get('load')}" for c in sorted(now, key=lambda c: int(c[1:])))
    lines += ["", f"Load average (1 min) before each case: {loads} (recorded: "
              + ", ".join(f"{c} {recorded[c].get('load')}" for c in sorted(recorded, key=lambda c: int(c[1:]))) + ")",
              f"{len(regressions)} regression(s) beyond {tolerance:.0%}"]
    return "\n".join(lines), regressions


BEGIN, END = "<!-- bench:begin (written by benchmarks/bench.py --write) -->", "<!-- bench:end -->"


def write_section(path: Path, text: str) -> None:
    """Replace what lies between the bench markers; the prose around them is the reader's."""
    old = path.read_text() if path.exists() else f"{BEGIN}\n{END}\n"
    if BEGIN not in old or END not in old:
        raise SystemExit(f"{path} has no bench markers ({BEGIN} ... {END}): nothing written")
    head, rest = old.split(BEGIN, 1)
    path.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")


def portable(argv: list) -> str:
    """The command as docs/perf.md prints it: the folders of this machine as placeholders, never
    its paths (tests/unit/test_docs_paths.py)."""
    names = {"--hta-python": "HTA/bin/python", "--workdir": "WORKDIR"}
    out = []
    for i, a in enumerate(argv):
        out.append(names[argv[i - 1]] if i and argv[i - 1] in names else a)
    return " ".join(out)


def render(rows: list, machine_line: str, other_htas: list = (), command: str = "") -> str:
    lines = [
        f"`{command}`, {time.strftime('%Y-%m-%d')}. Times are medians of the runs listed under the table;",
        "HTA runs once per file. Memory: the peak PSS of perfsleuth's process tree (sampled every 200 ms)",
        "or the main process's own peak RSS, whichever is larger; HTA's and the decode's own peak RSS.",
        "",
        "| trace | events | file | (a) perfsleuth | (b) HTA | (c) msgspec decode | a/b | a/c | RSS a / file | RSS a / RSS b | (a) on .json.gz | gunzip | a.gz - a | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        a, b, c, agz, d = r["a"], r["b"], r["c"], r["a_gz"], r["d"]
        bt = f"{b['wall_s']:.1f} s, {b['rss_mb']:.0f} MB" if b else "-"
        ab = f"{a['wall_s'] / b['wall_s']:.3f}" if b else "-"
        rr = f"{a['rss_mb'] / b['rss_mb']:.2f}" if b else "-"
        lines.append(
            f"| x{r['times']} | {r['events']:,} | {r['mb']} MB ({r['gz_mb']} MB gz) | {a['wall_s']:.1f} s, "
            f"{a['rss_mb']:.0f} MB | {bt} | {c['wall_s']:.1f} s, {c['rss_mb']:.0f} MB | {ab} | "
            f"{a['wall_s'] / c['wall_s']:.2f} | {a['rss_mb'] / r['mb']:.2f} | {rr} | {agz['wall_s']:.1f} s | "
            f"{d['wall_s']:.1f} s | {agz['wall_s'] - a['wall_s']:+.1f} s | {_load(r)} |")
    for i, py in enumerate(other_htas):
        lines += ["", f"HTA run with `{py}` ({hta_version(py)}), same files, same run:", "",
                  "| trace | (b') HTA | a/b' | RSS a / RSS b' |", "|---|---|---|---|"]
        for r in rows:
            b2 = r["b_other"][i]
            lines.append(f"| x{r['times']} | {b2['wall_s']:.1f} s, {b2['rss_mb']:.0f} MB | "
                         f"{r['a']['wall_s'] / b2['wall_s']:.3f} | {r['a']['rss_mb'] / b2['rss_mb']:.2f} |")
    lines += ["", "Runs of (a), in seconds: " + "; ".join(
        f"x{r['times']} {' / '.join(f'{w:.2f}' for w in r['a']['walls'])} "
        f"(.json.gz {' / '.join(f'{w:.2f}' for w in r['a_gz']['walls'])})" for r in rows)]
    lines += ["", f"Machine: {machine_line}. Load: the 1-minute load average before and after each case."]
    lines += targets(rows, other_htas)
    lines += ["", FIGURES + json.dumps(figures(rows), sort_keys=True) + " -->"]
    return "\n".join(lines) + "\n"


def _load(r: dict) -> str:
    return f"{r['load']:.1f}–{r['load_after']:.1f}" if r.get("load") is not None and "load_after" in r else "-"


LINEAR_TOLERANCE = 0.15  # a size may sit this far (relative) off the fitted line: noise on a shared machine


def linear_fit(xs: list, ys: list) -> tuple[float, float, float]:
    """(intercept, slope, largest |residual| / value) of the least-squares line through the points."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0
    icpt = my - slope * mx
    return icpt, slope, max(abs(y - (icpt + slope * x)) / y for x, y in zip(xs, ys))


def targets(rows: list, other_htas: list) -> list:
    """The issues' targets (30: time and memory against HTA, the mid-size trace), judged on the x10 and
    x1 rows."""
    row = next((r for r in rows if r["times"] == 10), None)
    if row is None or row["b"] is None:
        return []
    mid = next((r for r in rows if r["times"] == 1), None)
    a, b, c, agz, d = row["a"], row["b"], row["c"], row["a_gz"], row["d"]
    htas = [("traceinsight", b)] + [(hta_version(py), r) for py, r in zip(other_htas, row["b_other"])]
    wall_fit = linear_fit([r["events"] / 1e6 for r in rows], [r["a"]["wall_s"] for r in rows])
    mem_fit = linear_fit([r["events"] / 1e6 for r in rows], [r["a"]["rss_mb"] for r in rows])

    def yes(ok: bool) -> str:
        return "yes" if ok else "**no**"

    ab = [a["wall_s"] / h["wall_s"] for _, h in htas]
    rb = [a["rss_mb"] / h["rss_mb"] for _, h in htas]
    return [
        "", f"Against the targets on x10 ({row['mb']} MB, {row['events']:,} events):", "",
        "| target | result | met |", "|---|---|---|",
        "| a/b ≤ 0.05 | " + ", ".join(f"{x:.3f} vs {n}" for x, (n, _) in zip(ab, htas))
        + f" | {yes(max(ab) <= 0.05)} |",
        f"| a/c ≤ 2 | {a['wall_s'] / c['wall_s']:.2f} | {yes(a['wall_s'] / c['wall_s'] <= 2)} |",
        "| peak memory ≤ ¼ HTA's | " + ", ".join(f"{x:.2f} of {n}'s" for x, (n, _) in zip(rb, htas))
        + f" | {yes(max(rb) <= 0.25)} |",
        f"| peak memory ≤ 2.5x the file | {a['rss_mb'] / row['mb']:.2f}x | {yes(a['rss_mb'] / row['mb'] <= 2.5)} |",
        f"| .json.gz costs at most its decompression on top | +{agz['wall_s'] - a['wall_s']:.2f} s vs gunzip "
        f"{d['wall_s']:.2f} s | {yes(agz['wall_s'] - a['wall_s'] <= d['wall_s'])} |",
        f"| linear in events | least squares over the sizes: {wall_fit[0]:.2f} s + {wall_fit[1]:.2f} s per million "
        f"events, worst size {wall_fit[2]:.0%} off the line; {mem_fit[0]:.0f} MB + {mem_fit[1]:.0f} MB per million, "
        f"worst {mem_fit[2]:.0%} off | {yes(max(wall_fit[2], mem_fit[2]) <= LINEAR_TOLERANCE)} |",
    ] + ([f"| mid-size trace (x1, {mid['events']:,} events) ≤ 1 s end to end | {mid['a']['wall_s']:.2f} s "
          f"(load {_load(mid)}) | {yes(mid['a']['wall_s'] <= 1.0)} |"] if mid else [])


def hta_version(python: str) -> str:
    code = ("from importlib.metadata import version as v\n"
            "for d in ('traceinsight', 'holistictraceanalysis'):\n"
            "    try: print(d, v(d)); break\n"
            "    except Exception: pass")
    return subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    main()
