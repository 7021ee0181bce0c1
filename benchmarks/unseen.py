"""Forecasts and `perfsleuth run --verify` on programs this project did not write, checked against an
independent A/B (docs/accuracy.md, "On programs the models were not fitted to"; kept apart from the
fitted fixtures of benchmarks/fix_verification.py).

    python benchmarks/unseen.py --examples DIR [--programs NAME ...] [--pairs 3] [--write docs/accuracy.md]
    python benchmarks/unseen.py --examples DIR --smoke            # 1 pair, few steps: does it run?
    python benchmarks/unseen.py --render fixtures/accuracy/unseen/results.json [--stat mean] [--write FILE]

Set-up (outside the project; the programs need torchvision, transformers, accelerate, lightning and
matplotlib, which the project's own environment does not have). On x86_64 with Python 3.11, torch and
torchvision come from this machine's disk (PyPI's torchvision does not import beside the torch 2.13.0
CPU file):

    VENV=venv-unseen EXAMPLES=pytorch-examples        # any two folders outside the project
    python3 -m venv "$VENV"                                      # not --system-site-packages
    "$VENV"/bin/pip install --upgrade pip
    "$VENV"/bin/pip install torch==2.14.1 torchvision==0.29.1
    "$VENV"/bin/pip install transformers accelerate lightning matplotlib
    "$VENV"/bin/pip install -e .                # perfsleuth, from this checkout
    git clone https://github.com/pytorch/examples "$EXAMPLES"     # outside the project
    (or, from a snapshot without train.txt: git --git-dir=SNAPSHOT archive HEAD -- imagenet dcgan
     word_language_model time_sequence_prediction regression mnist
     ':(exclude)word_language_model/data/wikitext-2/train.txt' | tar -x -C "$EXAMPLES";
     git --git-dir=SNAPSHOT rev-parse HEAD > "$EXAMPLES"/COMMIT)

and run this file with that venv's python (`"$VENV"/bin/python benchmarks/unseen.py`).

Per program (benchmarks/unseen_catalog.py), in a fresh copy of its folder in a temp dir:
1. `perfsleuth run --json` of the program (with `--verify --verify-pairs N` when the installed
   perfsleuth has it; otherwise the row says "not available"): verdict, findings, forecasts, and
   the `verified` measurement of each fix it tried.
2. The fix to check: the top finding whose fix this program can take (one `--verify` measured, if
   any), with the setting perfsleuth measured or forecast; if no such finding fired, the program's
   default fix. `--fix NAME=RULE[:VALUE]` forces one.
3. An independent A/B of that fix, not using perfsleuth: the fix applied through the program's own
   flags or as an edit of a copy of its source (unseen_patch.py), each run timed by
   unseen_programs/runner.py (runpy, an optimizer-step post-hook; warm-up steps skipped), runs
   alternating A B A B ... (`--pairs`, each a fresh process); per pair the load average before and
   after and the CPU that other processes used (from /proc/stat, less this benchmark's own), with the
   busiest of them by name. Speed-up = median of the pair ratios; the range is the lowest and highest.
Results: a JSON file (fixtures/accuracy/unseen/results.json) written after every program, and with
--write the section between unseen_report.py's markers.
"""

from __future__ import annotations

import argparse
import difflib
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from unseen_catalog import (  # noqa: E402
    BY_NAME,
    DEFAULT_SETTING,
    PROGRAMS,
    RULE_SETTINGS,
    RUNNER,
    NotApplicable,
    apply,
    program_args,
    setting_for,
    verified_for,
)
from unseen_machine import bounded, machine, machine_line, others, snapshot  # noqa: E402
from unseen_report import ab_summary, render, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "fixtures" / "accuracy" / "unseen" / "results.json"
TOP = 5  # findings kept per program in the JSON
METHOD = """\
Programs this project did not write, none of them fitted to: pytorch/examples trainers with synthetic data,
run from a checkout given by `--examples` (never copied into the project); a Hugging Face `Trainer`
fine-tune of a tiny random BERT; a Lightning module with a Python-heavy Dataset; and a user's loop around
the mnist example's model. The last three are small drivers of ours (`benchmarks/unseen_programs/`) that
only configure those public libraries. Separate from the fitted fixtures above.

For each program, `perfsleuth run --verify` gives the findings, their forecasts and the `--verify`
measurement of each fix it could apply. The fix checked is the top finding whose fix the program can take
(one that `--verify` measured first), at the setting perfsleuth measured or forecast; where none fired,
the program's default fix (the row says "none fired"). The independent A/B applies that fix without
perfsleuth: through the program's own flag (`--workers 2`), or as an edit of a copy of its source
(`torch.set_num_threads(1)` as its first statement, `foreach=True` in its optimizer's constructor, a
DataLoader keyword), and times fresh unprofiled runs alternating A B A B ... with a runner of its own
(`runpy`, an optimizer-step post-hook; warm-up steps skipped). A run's step time is the mean of its timed
steps (a throughput, as `--verify`'s windows measure it: with DataLoader workers, steps alternate between
waiting for a batch and not, and their median can be either); speed-up = median of the pair ratios;
range = the lowest and highest pair. Load: the 1-minute load average before and after each pair, and the
cores that other processes kept busy during it (from /proc/stat, less the benchmark's own CPU time); the
JSON names the busiest of them. Goal: `--verify` within 0.8–1.25x of the independent A/B on every program.

Set-up, outside the project (torch and torchvision from the machine's disk: PyPI's torchvision does not
import beside the torch 2.13.0 CPU file):

```
VENV=venv-unseen EXAMPLES=pytorch-examples    # any two folders outside the project
python3 -m venv "$VENV"
"$VENV"/bin/pip install --upgrade pip
"$VENV"/bin/pip install torch==2.14.1 torchvision==0.29.1
"$VENV"/bin/pip install transformers accelerate lightning matplotlib
"$VENV"/bin/pip install -e .
git clone https://github.com/pytorch/examples "$EXAMPLES"    # or, from a snapshot without train.txt:
#   git --git-dir=SNAPSHOT archive HEAD -- imagenet dcgan word_language_model time_sequence_prediction \\
#     regression mnist ':(exclude)word_language_model/data/wikitext-2/train.txt' | tar -x -C "$EXAMPLES"
#   git --git-dir=SNAPSHOT rev-parse HEAD > "$EXAMPLES"/COMMIT
"$VENV"/bin/python benchmarks/unseen.py --examples "$EXAMPLES" --write docs/accuracy.md
```

Adaptations, the same for every run of a program: word_language_model trains on `valid.txt` where
`train.txt` is absent; time_sequence_prediction's data is generated shrunk (L=100, N=20) and its
`torch.load` gets `weights_only=False` (torch >= 2.6); regression's copy starts with
`torch.manual_seed(0)` (its loop ends when the loss is small: 830 batches with that seed); the HF
driver sets `optim="adamw_torch"` (newer transformers default to the fused AdamW on torch >= 2.8).

Results: `fixtures/accuracy/unseen/results.json` (every run's step times, the load, the commands);
`--render` that file redraws the table without measuring (`--stat median`: from the runs' median steps)."""


# --- perfsleuth ---------------------------------------------------------------------------------------
def has_verify(perfsleuth: list) -> tuple:
    """(--verify, --verify-budget, --verify-pairs, --verify-steps): which of them this perfsleuth takes."""
    h = subprocess.run([*perfsleuth, "run", "--help"], capture_output=True, text=True).stdout
    return tuple(f"{o} " in h for o in ("--verify", "--verify-budget", "--verify-pairs", "--verify-steps"))


def _slim(f: dict) -> dict:
    fc = f.get("forecast") or {}
    keep = ("speedup", "low", "high", "saving_us", "kind", "model", "reason", "step_us")
    return {"rule": f.get("rule"), "severity": f.get("severity"), "severity_from": f.get("severity_from"),
            "forecast": {k: fc.get(k) for k in keep} | {"assumptions": {
                k: v for k, v in (fc.get("assumptions") or {}).items() if k in ("workers", "threads", "cores")}},
            "verified": f.get("verified"), "ceiling": f.get("ceiling") or f.get("bound")}


def _slim_experiment(e: dict) -> dict:
    v = e.get("verified") or {}
    return {k: e.get(k) for k in ("fix", "variant", "rules", "how", "status", "reason")} | {
        "verified": {k: v.get(k) for k in ("speedup", "low", "high", "pairs", "outcome", "steps_per_window")}
        if v else None}


def perfsleuth_run(p, script: Path, args: list, out: Path, ps: list, verify: tuple, opt) -> dict:
    opts, budget = [], opt.verify_budget
    if verify[0]:
        opts = ["--verify", *(["--verify-pairs", str(opt.pairs)] if verify[2] else []),
                *(["--verify-budget", str(budget)] if verify[1] and budget else []),
                *(["--verify-steps", str(p.smoke_steps[1])] if verify[3] and opt.smoke else [])]
    cmd = [*ps, "run", "-o", str(out), "--force", *opts, *p.perfsleuth, str(script), *args]
    t0 = time.monotonic()
    rc, tail = bounded(cmd, script.parent, p.perfsleuth_timeout_s + ((budget or 600) + 120 if verify[0] else 0))
    doc = {"cmd": shlex.join(cmd), "rc": rc, "wall_s": round(time.monotonic() - t0, 1), "stderr_tail": tail[-1500:]}
    rep = out / "report.json"
    if rep.exists():
        r = json.loads(rep.read_text())
        doc["report"] = {"verdict": r.get("verdict"), "verdict_text": r.get("verdict_text"),
                         "step_time_us": (r.get("summary") or {}).get("step_time_us"),
                         "steps_source": r.get("steps_source"),
                         "findings": [_slim(f) for f in r.get("findings", [])][:TOP],
                         "warnings": [str(w)[:300] for w in (r.get("warnings") or [])][:5],
                         "verify": [_slim_experiment(e) for e in (r.get("verify") or {}).get("experiments", [])],
                         "verify_warning": (r.get("verify") or {}).get("warning")}
        doc["findings_all"] = r.get("findings", [])
        doc["experiments_all"] = (r.get("verify") or {}).get("experiments", [])
    return doc


def _forced(rule: str, text: str, finding) -> tuple:
    """--fix NAME=RULE[:SETTING=VALUE | :VALUE]"""
    if not text:
        return setting_for(rule, finding)
    name, _, value = text.rpartition("=")
    name = name or RULE_SETTINGS[rule][0]
    return name, int(value) if value.isdigit() else True


def choose(p, findings: list, args: list, forced: str = None) -> tuple:
    """(rule, finding or None, setting, Variant, notes): the top finding whose fix this program can take, one
    that --verify measured first; else the program's default fix."""
    notes = []
    if forced:
        rule, _, text = forced.partition(":")
        f = next((f for f in findings if f.get("rule") == rule), None)
        setting = _forced(rule, text, f)
        return rule, f, setting, p.fixes[rule](setting, args), notes
    # dataloader-slow's fix is the workers' only with worker processes already (its forecast is then the
    # workers model's, with a `workers` assumption); in the training process it is a code change (cache, batch: issue 37 item 2)
    usable = [f for f in findings if f.get("rule") in p.fixes
              and (f.get("rule") != "dataloader-slow"
                   or "workers" in ((f.get("forecast") or {}).get("assumptions") or {}))]
    usable.sort(key=lambda f: not isinstance(f.get("verified"), dict))  # stable: perfsleuth's order otherwise
    for f in usable:
        try:
            setting = setting_for(f["rule"], f)
            return f["rule"], f, setting, p.fixes[f["rule"]](setting, args), notes
        except NotApplicable as e:
            notes.append(f"{f['rule']}: {e}")
    rule = p.default_fix
    return rule, None, DEFAULT_SETTING[rule], p.fixes[rule](DEFAULT_SETTING[rule], args), notes


# --- the independent A/B --------------------------------------------------------------------------------
def timed_run(p, script: Path, args: list, env: dict, out: Path, smoke: bool) -> dict:
    w, s = p.smoke_steps if smoke else (p.warmup, p.steps)
    cmd = [sys.executable, str(RUNNER), "--out", str(out), "--warmup", str(w), "--steps", str(s), "--on", p.on,
           str(script), *args]
    t0 = time.monotonic()
    rc, tail = bounded(cmd, script.parent, p.timeout_s, env)
    tail = tail[-800:]
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc = {k: ([round(x, 6) for x in v] if isinstance(v, list) else v) for k, v in doc.items()}
    doc.update(rc=rc, wall_s=round(time.monotonic() - t0, 2))
    if rc != 0 or not doc.get("complete"):
        doc["error"] = tail or f"exit {rc}"
    return doc


def ab(p, a: tuple, b: tuple, pairs: int, smoke: bool, tmp: Path) -> list:
    out = []
    for i in range(pairs):
        s0 = snapshot()
        ra = timed_run(p, *a, tmp / f"a{i}.json", smoke)
        rb = timed_run(p, *b, tmp / f"b{i}.json", smoke)
        s1 = snapshot()
        cores, top = others(s0, s1)
        out.append({"a": ra, "b": rb, "errors": [r["error"] for r in (ra, rb) if "error" in r],
                    "load": [s0["load"], s1["load"]], "others_cores": cores, "others_top": top})
        print(f"  pair {i + 1}/{pairs}: A {ra.get('step_s', [])[:1]}.. B {rb.get('step_s', [])[:1]}.. "
              f"load {s0['load'][0]} -> {s1['load'][0]}, others {cores} cores {top}"
              + (f" ERRORS {out[-1]['errors']}" if out[-1]["errors"] else ""), file=sys.stderr)
    return out


def run_program(p, examples: Path, tmp: Path, opt, ps: list, verify: tuple) -> dict:
    work = tmp / p.name
    script = p.setup(examples, work / "A", opt.smoke)
    args = program_args(p, examples, opt.smoke)
    row = {"program": p.name, "title": p.title, "command": shlex.join([f"E/{p.folder}/{p.script}" if p.folder else
                                                                       f"benchmarks/unseen_programs/{p.script}", *args]
                                                                      ).replace(str(examples), "E"),
           "runner": f"{p.on} steps, {p.warmup} warm-up + {p.steps} timed per run" if not opt.smoke
           else f"{p.on} steps, {p.smoke_steps[0]} warm-up + {p.smoke_steps[1]} timed (smoke)"}
    print(f"{p.name}: perfsleuth run{' --verify' if verify[0] else ''} ...", file=sys.stderr)
    run = perfsleuth_run(p, script, args, work / "perfsleuth-out", ps, verify, opt)
    findings, experiments = run.pop("findings_all", []), run.pop("experiments_all", [])
    row["perfsleuth_run"] = run
    rule, f, setting, variant, notes = choose(p, findings, args, opt.fix.get(p.name))
    vv = verified_for(rule, setting, f, experiments)
    row.update(rule=rule, severity=(f or {}).get("severity"), setting=list(setting), variant=variant.label,
               env=variant.env, notes=notes,
               forecast=_slim(f)["forecast"] if f else None, verified=vv if isinstance(vv, dict) else None,
               verify_status=("not available" if not verify[0] else "measured" if isinstance(vv, dict)
                              else f"not measured by --verify at {setting[0]}={setting[1]}" if f
                              else "no finding to try"),
               verdict=(run.get("report") or {}).get("verdict"), findings=(run.get("report") or {}).get("findings"))
    b_script = script
    if variant.edits:
        b_script = p.setup(examples, work / "B", opt.smoke)
        apply(variant, b_script.parent)
        row["edit"] = "".join(line for file, _ in variant.edits for line in difflib.unified_diff(
            (script.parent / file).read_text().splitlines(True), (b_script.parent / file).read_text().splitlines(True),
            f"A/{file}", f"B/{file}", n=0))
    row["b_args"] = variant.args
    print(f"{p.name}: {rule} -> {variant.label}; A/B x{opt.pairs} ...", file=sys.stderr)
    row["pairs"] = ab(p, (script, args, {}), (b_script, variant.args, variant.env), opt.pairs, opt.smoke, work)
    ind = ab_summary(row["pairs"], opt.stat)
    row["independent"] = ind
    bad = [e for pr in row["pairs"] for e in pr["errors"]]
    if run["rc"] not in (0,) or bad:
        row["problem"] = "; ".join(([f"perfsleuth run exit {run['rc']}"] if run["rc"] != 0 else [])
                                   + [e.strip().splitlines()[-1][:200] for e in bad[:2] if e.strip()])
    print(f"{p.name}: independent {ind['speedup'] and round(ind['speedup'], 3)} {ind['pair_ratios']}", file=sys.stderr)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=Path, help="a checkout of pytorch/examples (outside the project)")
    ap.add_argument("--programs", nargs="*", choices=sorted(BY_NAME), help="only these (default: all)")
    ap.add_argument("--pairs", type=int, default=3, help="A/B pairs, and --verify-pairs (default 3)")
    ap.add_argument("--smoke", action="store_true",
                    help="1 pair and the smoke settings: proves it runs, measures nothing")
    ap.add_argument("--fix", action="append", default=[], metavar="NAME=RULE[:VALUE]", help="force the fix to check")
    ap.add_argument("--stat", choices=("mean", "median"), default="mean",
                    help="per run: the mean step time of its timed steps (a throughput, as --verify's windows "
                         "measure; default) or their median")
    ap.add_argument("--verify-budget", type=int, help="--verify-budget per program (default: perfsleuth's own)")
    ap.add_argument("--no-verify", action="store_true", help="run perfsleuth without --verify even if it has it")
    ap.add_argument("--perfsleuth", help="the perfsleuth command (default: this venv's perfsleuth), e.g. "
                    "'env PYTHONPATH=DIR VENV/bin/python -m perfsleuth'")
    ap.add_argument("--json", type=Path,
                    help=f"results file (default {RESULTS.relative_to(ROOT)}; smoke: the temp dir)")
    ap.add_argument("--keep", type=Path, help="work here (kept) instead of a temp dir")
    ap.add_argument("--render", type=Path, metavar="JSON", help="measure nothing: render this results file")
    ap.add_argument("--write", type=Path, help="put the section between its markers in this Markdown file")
    opt = ap.parse_args()
    if opt.render:
        doc = json.loads(opt.render.read_text())
    else:
        if not opt.examples or not (opt.examples / "imagenet" / "main.py").exists():
            ap.error("--examples DIR: a checkout of pytorch/examples (DIR/imagenet/main.py) is needed")
        opt.fix = dict(x.split("=", 1) for x in opt.fix if "=" in x)
        for name, fix in opt.fix.items():
            if name not in BY_NAME or fix.partition(":")[0] not in BY_NAME[name].fixes:
                ap.error(f"--fix {name}={fix}: the programs and their fixes are "
                         + "; ".join(f"{p.name}: {', '.join(sorted(p.fixes))}" for p in PROGRAMS))
        if opt.smoke:
            opt.pairs = 1
        tmp = Path(opt.keep or tempfile.mkdtemp(prefix="unseen-"))
        out = opt.json or (tmp / "smoke.json" if opt.smoke else RESULTS)
        ps = shlex.split(opt.perfsleuth) if opt.perfsleuth else [str(Path(sys.executable).parent / "perfsleuth")]
        verify = (False,) * 4 if opt.no_verify else has_verify(ps)
        m = machine(opt.examples.resolve(), ps, own=not opt.perfsleuth)
        doc = {"recorded": time.strftime("%Y-%m-%d %H:%M"), "smoke": opt.smoke, "machine": m, "method": METHOD,
               "machine_line": machine_line(m, verify), "pairs": opt.pairs, "verify_available": verify[0],
               "command": "python benchmarks/unseen.py " + portable(sys.argv[1:]),
               "rows": []}
        for p in (BY_NAME[n] for n in opt.programs) if opt.programs else PROGRAMS:
            t0 = time.monotonic()
            row = run_program(p, opt.examples.resolve(), tmp, opt, ps, verify)
            row["wall_s"] = round(time.monotonic() - t0, 1)
            doc["rows"].append(row)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(doc, indent=1) + "\n")
            print(f"{p.name}: done in {row['wall_s']} s -> {out}", file=sys.stderr)
    text = render(doc, opt.stat)
    print(text)
    if opt.write:
        write_section(opt.write, text)


def portable(argv: list) -> str:
    """The command as docs/accuracy.md prints it: the folders of this machine as placeholders
    (DIR, WORK, FILE, PERFSLEUTH), never a path of the machine it ran on
    (tests/unit/test_docs_paths.py)."""
    names = {"--examples": "DIR", "--keep": "WORK", "--json": "FILE", "--perfsleuth": "PERFSLEUTH"}
    out, args = [], iter(argv)
    for a in args:
        flag, eq, value = a.partition("=")
        if flag in names:
            out += [f"{flag}={names[flag]}"] if eq else [a, names[flag]]
            if not eq:
                next(args, None)
        else:
            out.append(a)
    return shlex.join(out)


if __name__ == "__main__":
    main()
