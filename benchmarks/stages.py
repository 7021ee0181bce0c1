"""Where the time of one `perfsleuth analyze` goes: the stages timed in one process.

    python benchmarks/stages.py FILE [--jobs N] [--repeat 3] [--detail]

Each run is a fresh interpreter (imports included, as for the CLI): imports, reading and decoding
(document.decode_events, in forked workers with --jobs > 1), assembling the event table, analysis,
the report (to_dict and the terminal text). With --detail the analysis is split into its stages,
each timed exclusive of the stages it calls (the replay inside a finding's forecast counts as
forecasts, not as rules), by wrapping the functions named in STAGES where this version has them;
the minimum over the runs of each stage is printed as a table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

# stage -> "module:attribute" (a function, or Class.method) timed as that stage, exclusive of nested ones
STAGES = {
    "steps (steps, steady state)": ["analysis.steps:find_steps", "analysis.phases:classify"],
    "attribution": ["analysis.attribution:attribute"],
    "tables (shares, top kernels/ops)": ["analysis.tables:time_share", "analysis.tables:top_kernels",
                                         "analysis.tables:top_ops"],
    "rule catalogue (load)": ["engine.catalog:load_catalog"],
    "facts": ["facts.core:compute_facts"],
    "stacks companion": ["facts.stacks:Companion.join_dtypes", "facts.stacks:Companion.join_lines"],
    "forecasts: timeline + first replays": ["analysis.forecast.forecaster:Forecaster.__init__"],
    "forecasts: findings' replays": ["analysis.forecast.forecaster:Forecaster.forecast"],
    "forecasts: combined": ["engine.forecast:report_forecast"],
    "rules (conditions, templates)": ["engine.evaluate:evaluate", "engine.evaluate:not_checked",
                                      "engine.evaluate:evaluate_rule"],
    "verdict check, host time": ["engine.reconsider:reconsider", "engine.explain:host_time"],
    "rank summary": ["analysis.ranks.summary:summarize_rank"],
    "report (to_dict, terminal text)": ["report.model:Report.to_dict", "render.terminal:render_terminal"],
}

_RUN = r"""
import sys, time, json, functools, importlib
t0 = time.perf_counter()
from pathlib import Path
from perfsleuth import api
from perfsleuth.trace import columns, document, kineto, model as T
from perfsleuth.trace.hugepages import without_huge_pages
t1 = time.perf_counter()
path, jobs, detail, stages = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", json.loads(sys.argv[4])
spent, stack, missing = {}, [], []

def timed(stage, fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        start = time.perf_counter()
        stack.append(0.0)
        try:
            return fn(*a, **k)
        finally:
            inner = stack.pop()
            took = time.perf_counter() - start
            spent[stage] = spent.get(stage, 0.0) + took - inner
            if stack:
                stack[-1] += took
    return wrapper

if detail:
    for stage, targets in stages.items():
        for target in targets:
            mod_name, attr = target.split(":")
            try:
                mod = importlib.import_module("perfsleuth." + mod_name)
            except ImportError:
                missing.append(target)
                continue
            owner, name = (getattr(mod, attr.split(".")[0], None), attr.split(".")[1]) if "." in attr else (mod, attr)
            fn = getattr(owner, name, None) if owner is not None else None
            if fn is None:
                missing.append(target)
                continue
            setattr(owner, name, timed(stage, fn))
            # names bound by `from x import f` in the modules that call it
            for other in list(sys.modules.values()):
                ours = getattr(other, "__name__", "").startswith("perfsleuth")
                if owner is mod and ours and getattr(other, name, None) is fn:
                    setattr(other, name, getattr(owner, name))
t1 = time.perf_counter()  # the wrapping imported modules the analysis would import: counted as imports
with without_huge_pages():
    buf = kineto.read_file(path)
    header, outs, entries = document.decode_events(path, buf, [], columns.chunk_columns, jobs)
    t2 = time.perf_counter()
    del buf
    trace = T.build_trace(path, header, outs, entries, [])
    t3 = time.perf_counter()
    report = api.analyze_trace(trace)
    t4 = time.perf_counter()
    from perfsleuth.render.terminal import render_terminal
    render_terminal(report.to_dict())
    t5 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "read+decode": t2 - t1, "assemble": t3 - t2, "analysis": t4 - t3,
                  "report": t5 - t4, "total": t5 - t0, "stages": spent, "missing": missing}))
"""


def run_once(path: str, jobs: int, detail: bool, python: str = sys.executable) -> dict:
    out = subprocess.run([python, "-c", _RUN, path, str(jobs), "1" if detail else "0", json.dumps(STAGES)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--detail", action="store_true", help="split the analysis into its stages (a table)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter (another version's venv)")
    args = ap.parse_args()
    runs = []
    for _ in range(args.repeat):
        r = run_once(args.file, args.jobs, args.detail, args.python)
        runs.append(r)
        print(", ".join(f"{k} {r[k]:.2f} s" for k in ("imports", "read+decode", "assemble", "analysis", "report",
                                                      "total")), flush=True)
    if args.detail:
        if runs[0]["missing"]:  # an older version (--python) may lack some: its stage then reads 0
            print("not in this version, not timed: " + ", ".join(runs[0]["missing"]))
        print("\n| stage | min | median |\n|---|--:|--:|")
        for stage in [*STAGES, "analysis (all)"]:
            vals = sorted(r["analysis"] if stage == "analysis (all)" else r["stages"].get(stage, 0.0) for r in runs)
            print(f"| {stage} | {vals[0]:.3f} s | {vals[len(vals) // 2]:.3f} s |")


if __name__ == "__main__":
    main()
