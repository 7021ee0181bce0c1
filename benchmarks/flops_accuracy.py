"""FLOPs per step on programs written elsewhere (issue 36, unseen): pytorch/examples programs under
`perfsleuth run --record-shapes`, perfsleuth's FLOPs per step (from the trace's shapes) against torch's
`FlopCounterMode` counting one step of the same run (the report's `model_flops_per_step`,
record/model_flops.py). Writes one JSON row per program; docs/accuracy.md ("Issue 36, unseen") holds the
table, written by hand from it.

    python benchmarks/flops_accuracy.py --examples DIR [--pythonpath DIR] [--only NAME] [--out FILE]

DIR is a checkout of pytorch/examples (its imagenet/, dcgan/ and word_language_model/ folders); nothing
of it is copied here. imagenet and dcgan import torchvision: `--pythonpath` adds a folder holding a
torchvision that imports against this torch (the CPU build of the version that matches torch). The CPU
peak is injected (PERFSLEUTH_CPU_PEAK), never measured: the numbers compared are FLOPs, not rates.

Columns: `ours` is the efficiency section's `flops_per_step` (every modelled op: matmul, convolution,
attention, elementwise, normalisation, ...); `ours_matrix` only its matmul, convolution and attention
families, which is what FlopCounterMode counts; `flop_counter` is the run's FlopCounterMode count of one
step; `ratio` = ours_matrix / flop_counter; `by_op` its split by op, to explain a difference; `ours_in_it`
the part of it from perfsleuth's own formulas for ops FlopCounterMode's registry lacks
(record/model_flops.py: `aten::mkldnn_rnn_layer`), and `registry_only` = flop_counter - ours_in_it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MATRIX = ("matmul", "convolution", "attention")
RNN_OPS = ("mkldnn_rnn_layer", "mkldnn_rnn_layer_backward")  # analysis/efficiency/rnn.py
SCHEDULE = ["--wait", "2", "--warmup", "1", "--active", "3", "--after", "1"]


def programs(examples: Path, work: Path) -> dict:
    """name -> (script, its arguments): the flags that run on a 2-core CPU (shared/CLIENTS.md)."""
    data = work / "wikitext-2"  # train.txt is absent from a partial copy: the validation text stands in
    if not data.exists():
        src = examples / "word_language_model" / "data" / "wikitext-2"
        data.mkdir(parents=True)
        for name in ("valid.txt", "test.txt"):
            shutil.copy(src / name, data / name)
        shutil.copy(src / "valid.txt", data / "train.txt")
    lm = ["--data", str(data), "--emsize", "32", "--nhid", "32", "--nlayers", "1", "--epochs", "1",
          "--save", str(work / "model.pt")]
    return {
        "imagenet resnet18": (examples / "imagenet" / "main.py",
                              ["-a", "resnet18", "--dummy", "-b", "4", "--workers", "0", "--epochs", "1",
                               "--print-freq", "1000"]),
        "dcgan": (examples / "dcgan" / "main.py",
                  ["--dataset", "fake", "--batchSize", "16", "--ngf", "16", "--ndf", "16", "--niter", "1",
                   "--workers", "0", "--outf", str(work / "dcgan")]),
        "word_language_model LSTM": (examples / "word_language_model" / "main.py", lm),
        "word_language_model Transformer": (examples / "word_language_model" / "main.py",
                                            lm + ["--model", "Transformer", "--nhead", "2"]),
    }


def run_one(name: str, script: Path, args: list, work: Path, pythonpath: str | None) -> dict:
    out = work / name.replace(" ", "_")
    env = {**os.environ, "PERFSLEUTH_CPU_PEAK": "0.1,10", "PERFSLEUTH_CACHE_DIR": str(work / "cache")}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "perfsleuth", "run", "--record-shapes", "--no-stack", "--no-memory",
           *SCHEDULE, "-o", str(out), str(script), *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    row = {"program": name, "command": "perfsleuth run " + " ".join(cmd[4:]), "exit": proc.returncode,
           "wall_s": round(time.perf_counter() - t0, 1)}
    report = out / "report.json"
    if not report.is_file():
        return {**row, "error": proc.stderr[-1500:]}
    e = json.loads(report.read_text()).get("efficiency")
    if not e:
        return {**row, "error": json.loads(report.read_text()).get("efficiency_unavailable")}
    matrix = sum(f["flops_per_step"] for f in e["families"] if f["family"] in MATRIX)
    theirs = e.get("model_flops_per_step")
    trace = next(out.glob("*.pt.trace.json.gz"), None)
    by_op = None
    if trace is not None:
        import gzip

        with gzip.open(trace, "rt") as f:
            meta = json.load(f).get("perfsleuth_final", {}).get("model_flops") or {}
        by_op = meta.get("by_op")
    own = sum(v for k, v in (by_op or {}).items() if k.split(".")[-1] in RNN_OPS)
    return {**row, "ours": e["flops_per_step"], "ours_matrix": matrix, "ours_in_it": own,
            "registry_only": theirs - own if theirs else None,
            "families": {f["family"]: f["flops_per_step"] for f in e["families"]},
            "flop_counter": theirs, "by_op": by_op,
            "ratio": round(matrix / theirs, 6) if theirs else None,
            "mfu_unavailable": e.get("mfu_unavailable"),
            "modelled_time_share": e.get("modelled_time_share")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=Path, required=True, help="a checkout of pytorch/examples")
    ap.add_argument("--pythonpath", default=None, help="a folder with a torchvision for this torch")
    ap.add_argument("--only", action="append", default=[], help="run only these programs (by name)")
    ap.add_argument("--out", type=Path, default=None, help="write the rows here as JSON")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flops_accuracy_"))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = []
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    for name, (script, args) in programs(a.examples.resolve(), work).items():
        if a.only and name not in a.only:
            continue
        row = run_one(name, script, args, work, a.pythonpath)
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"started": started, "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "loadavg_before": load, "rows": rows}
    if a.out:
        a.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
