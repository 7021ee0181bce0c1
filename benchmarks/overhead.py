"""What profiling costs `perfsleuth run`, measured by `perfsleuth run` itself (docs/run.md#what-profiling-costs).

Every run times its steps with the step clock: the `wait` steps without the profiler, the recorded
steps with it; the report's `measurement.overhead` is profiled / unprofiled median, within one run. This
script runs each CPU fixture script under each profiler setting, interleaved (A/B/C, A/B/C, ... so a
busy machine slows all settings alike), and prints per script and setting the median over repeats of
the overhead, the unprofiled and the profiled median step time, and the verdict.

    python benchmarks/overhead.py [--repeats 3] [--scripts python_dataset tiny_ops ...]

Settings (all with the default schedule: wait 5, warmup 2, active 5):
  old default  Python stacks and input shapes in the analysed window (before issue 14)
  shapes       no stacks, but input shapes in the analysed window
  default      neither in the analysed window; stacks and shapes in 2 steps apart (the stacks window)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "fixtures" / "scripts" / "cpu"
SETTINGS = {"old default": dict(with_stack=True, record_shapes=True, stack_steps=0),
            "shapes": dict(record_shapes=True), "default": {}}
# script -> arguments (enough steps for the 15 of the default window; each prints "done" at its end)
CASES = {
    "python_dataset": ["--steps", "30"],
    "dataloader_starved": ["--steps", "30"],
    "few_workers": ["--steps", "30"],
    "compute_mlp": ["--steps", "30"],
    "item_every_step": ["--steps", "30"],
    "eval_loop": ["--steps", "30"],
    "tiny_ops": ["--steps", "30"],
    "module_loop": ["--steps", "30"],
    "many_params": ["--steps", "30"],
}


def child(script: str, setting: str, args: list) -> None:
    """One run in this process: the report's measurement and verdict as a JSON line."""
    from perfsleuth.record.runner import run_script
    from perfsleuth.record.session import RunConfig
    from perfsleuth.record.target import resolve_target

    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_script(resolve_target(str(SCRIPTS / f"{script}.py"), args, False),
                             RunConfig(**SETTINGS[setting]), Path(tmp) / "out")
        rep = outcome.report.to_dict()
    m = rep["measurement"]
    print(json.dumps({"overhead": m["overhead"], "unprofiled": m["unprofiled_step_us"]["median"],
                      "profiled": m["profiled_step_us"]["median"], "verdict": rep["verdict"]}))


def run_one(script: str, setting: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", script, setting], capture_output=True, text=True,
                          timeout=600)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{script} / {setting} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--scripts", nargs="*", default=list(CASES))
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child[0], a.child[1], CASES[a.child[0]])
        return
    print(f"{a.repeats} interleaved repeats per script; overhead = profiled / unprofiled median step, per run\n")
    print("| script | setting | unprofiled step | profiled step | overhead (median, range) | verdicts |")
    print("|---|---|---|---|---|---|")
    for script in a.scripts:
        runs = {s: [] for s in SETTINGS}
        for _ in range(a.repeats):
            for s in SETTINGS:
                runs[s].append(run_one(script, s))
        for s, rs in runs.items():
            ov = [r["overhead"] for r in rs]
            un = statistics.median(r["unprofiled"] for r in rs) / 1e3
            pr = statistics.median(r["profiled"] for r in rs) / 1e3
            verdicts = ", ".join(sorted({r["verdict"] for r in rs}))
            print(f"| {script} | {s} | {un:.2f} ms | {pr:.2f} ms | {statistics.median(ov):.2f}x "
                  f"({min(ov):.2f}-{max(ov):.2f}) | {verdicts} |", flush=True)


if __name__ == "__main__":
    main()
