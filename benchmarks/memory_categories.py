"""What fills memory at the peak, by `perfsleuth run`, checked on programs this project did not
write against torch's own tools run independently on the same program (docs/accuracy.md, "Issue 35,
unseen").

    python benchmarks/memory_categories.py --examples DIR [--programs NAME ...] [--out FILE.json]
                                           [--write docs/accuracy.md]
    python benchmarks/memory_categories.py --render FILE.json [--write docs/accuracy.md]

DIR is a checkout (or `git archive`) of the public repository pytorch/examples, outside the project;
word_language_model's data/wikitext-2/train.txt may be absent (the copy trains on valid.txt then).
The Hugging Face and Lightning programs are benchmarks/unseen_programs/ (they only configure the
public libraries; transformers, accelerate and lightning must be installed).

Per program, each run in a fresh process on a fresh copy of its folder in a temp dir:
1. `perfsleuth run -o OUT --no-stack SCHEDULE SCRIPT ARGS`: the memory window's `memory` facts from
   the main trace's `perfsleuth_final` (peak, categories at the peak, the optimizers' exact bytes).
2. benchmarks/memory_oracle.py --tool profiler: torch.profiler's `export_memory_timeline` on the
   same steps (the same count of steps skipped first), torch's labels as they are.
3. benchmarks/memory_oracle.py --tool memtracker: torch.distributed._tools.mem_tracker.MemTracker on
   those steps.
Both oracles also count the optimizers' parameter, gradient and state bytes themselves.
Results: a JSON file written after every program; with --write, the section between this file's
markers in docs/accuracy.md.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
ORACLE = HERE / "memory_oracle.py"
PROGRAMS_DIR = HERE / "unseen_programs"
# perfsleuth's schedule: the memory window starts after wait + warmup + active + after steps
SCHEDULE = ["--wait", "3", "--warmup", "1", "--active", "2", "--after", "1"]
SKIP = 3 + 1 + 2 + 1
STEPS = 3  # RunConfig.memory_steps
BEGIN = "<!-- BEGIN GENERATED: benchmarks/memory_categories.py -->"
END = "<!-- END GENERATED: benchmarks/memory_categories.py -->"
KEYS = ("parameter", "gradient", "optimizer_state", "activation", "input", "temporary", "other")
WLM = ["--emsize", "32", "--nhid", "32", "--epochs", "1", "--use-optimizer", "--lr", "0.001"]

# name: (what, folder in pytorch/examples or None, script, args)
PROGRAMS = {
    "wlm-lstm": ("pytorch/examples word_language_model: LSTM, AdamW", "word_language_model",
                 "main.py", [*WLM, "--nlayers", "1"]),
    "wlm-transformer": ("pytorch/examples word_language_model: Transformer, AdamW",
                        "word_language_model", "main.py",
                        [*WLM, "--model", "Transformer", "--nlayers", "2", "--nhead", "2"]),
    "hf-bert": ("Hugging Face Trainer: random BertConfig (2 layers, hidden 64), AdamW", None,
                "hf_bert.py", ["--steps", "40", "--batch-size", "16"]),
    "lightning": ("Lightning module (Adam), synthetic Dataset, Trainer on CPU", None,
                  "lightning_dataset.py", ["--steps", "40", "--batch-size", "32", "--work", "1"]),
}


def prepare(name: str, examples: Path, work: Path) -> Path:
    """A fresh copy of the program's folder; the script's path in it."""
    what, folder, script, _ = PROGRAMS[name]
    if folder is None:
        shutil.copy(PROGRAMS_DIR / script, work / script)
        return work / script
    shutil.copytree(examples / folder, work, dirs_exist_ok=True)
    data = work / "data" / "wikitext-2"
    if data.is_dir() and not (data / "train.txt").exists():
        shutil.copy(data / "valid.txt", data / "train.txt")
    return work / script


def ours(script: Path, args: list, work: Path, timeout: int) -> dict:
    out = work / "perfsleuth-out"
    cmd = [sys.executable, "-m", "perfsleuth", "run", "-o", str(out), "--no-stack", *SCHEDULE,
           str(script), *args]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=script.parent, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    trace = out / "trace.pt.trace.json.gz"
    if not trace.exists():
        return {"error": f"exit {p.returncode}: {p.stderr.strip()[-400:]}", "wall_s": wall}
    with gzip.open(trace) as f:
        final = json.load(f).get("perfsleuth_final") or {}
    return {"memory": final.get("memory"), "exit": p.returncode, "wall_s": round(wall, 1)}


def oracle(tool: str, script: Path, args: list, work: Path, timeout: int) -> dict:
    out = work / f"oracle-{tool}.json"
    cmd = [sys.executable, str(ORACLE), "--out", str(out), "--tool", tool, "--skip", str(SKIP),
           "--steps", str(STEPS), str(script), *args]
    p = subprocess.run(cmd, cwd=script.parent, capture_output=True, text=True, timeout=timeout)
    if not out.exists():
        return {"error": f"exit {p.returncode}: {p.stderr.strip()[-400:]}"}
    return json.loads(out.read_text())


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def measure(name: str, examples: Path, timeout: int, parts=("ours", "profiler", "memtracker"),
            row: Optional[dict] = None) -> dict:
    what, folder, script_name, args = PROGRAMS[name]
    row = row or {}
    row.update({"program": name, "what": what, "load_before": loadavg(),
           "command": f"perfsleuth run --no-stack {' '.join(SCHEDULE)} "
                      f"{(folder + '/') if folder else 'benchmarks/unseen_programs/'}{script_name} "
                      f"{shlex.join(args)}"})
    for part in parts:
        with tempfile.TemporaryDirectory(prefix=f"memcat-{name}-") as d:
            work = Path(d)
            script = prepare(name, examples, work)
            row[part] = (ours(script, args, work, timeout) if part == "ours"
                         else oracle(part, script, args, work, timeout))
    row["load_after"] = loadavg()
    return row


# --- the table ----------------------------------------------------------------------------------
def num(v) -> str:
    return "–" if v is None else f"{int(v):,}"


def signed(v) -> str:
    return "–" if v is None else f"{int(v):+,}"


def timeline_as_ours(cats: dict) -> dict:
    """export_memory_timeline's columns in perfsleuth's categories (AUTOGRAD_DETAIL is temporary,
    unknown is other), as memory_categories.py maps them before its corrections."""
    out = {k: int(cats.get(k, 0)) for k in KEYS if k in cats}
    out["temporary"] = int(cats.get("temporary", 0)) + int(cats.get("autograd_detail", 0))
    out["other"] = int(cats.get("unknown", 0))
    return {k: out.get(k, 0) for k in KEYS}


def memtracker_as_ours(cats: dict) -> dict:
    out = {k: int(cats.get(k, 0)) for k in KEYS}
    out["other"] = int(cats.get("other", 0)) + int(cats.get("buffer", 0))
    return out


def render(rows: list, meta: dict) -> str:
    lines = [BEGIN, "", f"Measured {meta['date']} with `{meta['command']}` (pytorch/examples at "
             f"{meta['examples_commit']}; torch {meta['torch']}, "
             f"transformers {meta['transformers']}, lightning {meta['lightning']}); one run of "
             "each tool per program, in this order, on "
             "the shared 2-core machine (load average before and after each program below). "
             "Bytes. *timeline*: torch.profiler's `export_memory_timeline` on the "
             "same steps, torch's labels as they are (AUTOGRAD_DETAIL counted as temporary); "
             "*MemTracker*: torch.distributed._tools.mem_tracker.MemTracker (Buffer counted as "
             "other); *exact*: the optimizers' tensors, counted by the oracle at the last step "
             "boundary. Δ = ours − timeline."
             + (f" Then {meta['again']} (`--again ...`), the other tools' rows kept."
                if meta.get("again") else ""), ""]
    for r in rows:
        mem = (r.get("ours") or {}).get("memory") or {}
        prof, mt = r.get("profiler") or {}, r.get("memtracker") or {}
        lines += [f"**{r['program']}** — {r['what']}. `{r['command']}`; load "
                  f"{r['load_before']} → {r['load_after']}.", ""]
        if not mem or mem.get("categories_at_peak") is None:
            why = (r.get("ours") or {}).get("error") or mem.get("unavailable")
            lines += [f"perfsleuth gave no categories: {why}", ""]
            continue
        cats = mem["categories_at_peak"]
        tl = timeline_as_ours(prof.get("categories") or {}) if prof.get("categories") else None
        mtc = memtracker_as_ours(mt.get("categories") or {}) if mt.get("categories") else None
        exact = prof.get("known") or mt.get("known") or {}
        ex = {"parameter": exact.get("parameter_bytes"), "gradient": exact.get("gradient_bytes"),
              "optimizer_state": exact.get("optimizer_state_bytes")}
        lines += ["| bytes | perfsleuth | timeline | Δ | MemTracker | exact |",
                  "|---|---:|---:|---:|---:|---:|"]
        for k in KEYS:
            d = None if tl is None else cats[k] - tl[k]
            lines.append(f"| {k} | {num(cats[k])} | {num(tl and tl[k])} | {signed(d)} | "
                         f"{num(mtc and mtc[k])} | {num(ex.get(k))} |")
        peak, theirs = mem.get("peak_bytes"), prof.get("peak_bytes")
        lines.append(f"| **peak** | {num(peak)} | {num(theirs)} | "
                     f"{signed(None if theirs is None or peak is None else peak - theirs)} | "
                     f"{num(mt.get('peak_bytes'))} | |")
        errors = [f"{k}: {v['error']}" for k, v in (("timeline", prof), ("MemTracker", mt))
                  if v.get("error")]
        lines += [""] + ([f"Not measured — {'; '.join(errors)}", ""] if errors else [])
    lines.append(END)
    return "\n".join(lines)


def write_section(path: Path, text: str) -> None:
    doc = path.read_text()
    if BEGIN in doc and END in doc:
        doc = doc[:doc.index(BEGIN)] + text + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip("\n") + "\n\n" + text + "\n"
    path.write_text(doc)


def versions() -> dict:
    from importlib import metadata

    out = {}
    for pkg in ("torch", "transformers", "lightning"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=Path)
    ap.add_argument("--programs", nargs="*", default=list(PROGRAMS))
    ap.add_argument("--out", type=Path, default=Path("memory_categories.json"))
    ap.add_argument("--render", type=Path)
    ap.add_argument("--write", type=Path)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--again", nargs="*", choices=("ours", "profiler", "memtracker"),
                    help="measure only these parts again, into the rows of --out")
    a = ap.parse_args(argv)
    if a.render:
        doc = json.loads(a.render.read_text())
    else:
        if a.examples is None:
            ap.error("--examples DIR (a copy of pytorch/examples) or --render FILE")
        commit = a.examples / "COMMIT"
        doc = {"meta": {"date": datetime.date.today().isoformat(),
                        "command": "python benchmarks/memory_categories.py --examples DIR "
                                   + " ".join(["--programs", *a.programs]),
                        "examples_commit": commit.read_text().strip()[:12] if commit.exists()
                        else "unknown", **versions()}, "rows": []}
        if a.again:
            old = json.loads(a.out.read_text())
            again = (f"{' '.join(a.again)} of {' '.join(a.programs)} measured again on "
                     f"{doc['meta']['date']}")
            doc = {"meta": {**old["meta"], "again": again}, "rows": old["rows"]}
        for name in a.programs:
            if a.again:
                row = next(r for r in doc["rows"] if r["program"] == name)
                measure(name, a.examples, a.timeout, a.again, row)
                a.out.write_text(json.dumps(doc, indent=1))
                continue
            doc["rows"].append(measure(name, a.examples, a.timeout))
            a.out.write_text(json.dumps(doc, indent=1))
            print(f"{name}: done, load {loadavg()}", file=sys.stderr)
    text = render(doc["rows"], doc["meta"])
    print(text)
    if a.write:
        write_section(a.write, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
