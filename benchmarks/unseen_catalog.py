"""The programs of benchmarks/unseen.py: public example programs this project did not write, run from a
checkout of pytorch/examples (`--examples DIR`), and three small drivers of ours
(benchmarks/unseen_programs/) that only configure public libraries (transformers, lightning) or import
an example's model (mnist).

Each program says how to run it on a 2-core CPU (args for the full run and for --smoke), how its steps
are counted by the independent runner, and how the independent A/B applies each fix it can take:
through the program's own flags (`--workers 2`), or as an edit of a COPY of its source
(benchmarks/unseen_patch.py: `torch.set_num_threads(1)` as its first statement, `foreach=True` in
its optimizer's constructor). Nothing here uses perfsleuth's own way of applying a fix.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from unseen_patch import PatchError, prepend, set_call_kwarg

DRIVERS = Path(__file__).resolve().parent / "unseen_programs"
RUNNER = DRIVERS / "runner.py"
OPTIMIZERS = ("SGD", "Adam", "AdamW", "Adadelta", "Adagrad", "RMSprop", "NAdam", "RAdam", "Adamax")
DEFAULT_VALUE = {"num-workers": 2, "dataloader-slow": 2, "cpu-threads": 1, "fused-optimizer": "foreach"}


@dataclass
class Variant:
    """The fixed program: its args, and edits of its copied source (file, function(src) -> src)."""
    label: str
    args: list
    edits: list = field(default_factory=list)


@dataclass
class Program:
    name: str
    title: str
    script: str                     # relative to the work copy
    args: list
    smoke_args: list
    folder: Optional[str] = None    # pytorch/examples sub-folder copied into the work dir
    driver: Optional[str] = None    # or: our driver, copied into the work dir
    on: str = "optimizer"           # the runner's step source
    warmup: int = 3
    steps: int = 10
    smoke_steps: tuple = (1, 2)     # (warm-up, timed) steps with --smoke
    seed: Optional[int] = None
    fixes: dict = field(default_factory=dict)   # rule -> function(value, args) -> Variant
    default_fix: str = "cpu-threads"            # tried when no finding perfsleuth made has a fix here
    prepare: Optional[Callable] = None          # (examples, work dir) -> None, before any run
    timeout_s: int = 600
    perfsleuth: list = field(default_factory=list)  # options of `perfsleuth run` (slow steps: a shorter window)

    def setup(self, examples: Path, work: Path) -> Path:
        """A fresh copy of the program in `work`, prepared; returns the script's path."""
        if work.exists():
            shutil.rmtree(work)
        if self.folder:
            shutil.copytree(examples / self.folder, work, ignore=shutil.ignore_patterns("*.pt", "__pycache__"),
                            symlinks=True)
        else:
            work.mkdir(parents=True)
            shutil.copy(DRIVERS / self.driver, work / self.driver)
        if self.prepare:
            self.prepare(examples, work)
        return work / self.script


# --- how a fix is applied ---------------------------------------------------------------------------
def _set_flag(args: list, flag: str, value) -> list:
    out = list(args)
    if flag in out:
        i = out.index(flag)
        if value is None:
            del out[i]
        else:
            out[i + 1] = str(value)
    elif value is not None:
        out += [flag, str(value)]
    return out


def flag(name: str, what: str) -> Callable:
    """The program's own option: `name value`."""
    return lambda value, args: Variant(f"{what}={value} (`{name} {value}`)", _set_flag(args, name, value))


def switch() -> Callable:
    """Our drivers' --foreach / --fused (the optimizer's constructor gets foreach=True / fused=True)."""
    return lambda value, args: Variant(f"{value}=True (`--{value}`)", [*args, f"--{value}"])


def threads_line(file: str) -> Callable:
    def fix(value, args):
        code = f"import torch; torch.set_num_threads({int(value)})"
        return Variant(f"torch.set_num_threads({int(value)}) first in a copy of {file}", list(args),
                       [(file, lambda src: prepend(src, code))])
    return fix


def optimizer_kw(file: str) -> Callable:
    def fix(value, args):
        kw = "fused" if value == "fused" else "foreach"
        return Variant(f"{kw}=True in the optimizer's constructor, in a copy of {file}", list(args),
                       [(file, lambda src: set_call_kwarg(src, OPTIMIZERS, kw, "True")[0])])
    return fix


def apply(variant: Variant, work: Path) -> None:
    for file, edit in variant.edits:
        path = work / file
        path.write_text(edit(path.read_text()))


def value_for(rule: str, finding: Optional[dict]) -> object:
    """The setting perfsleuth measured (verified.variant), else the one its forecast assumed, else a default."""
    texts = []
    if finding:
        texts.append(str((finding.get("verified") or {}).get("variant") or ""))
        texts += [str(v) for v in ((finding.get("forecast") or {}).get("assumptions") or {}).values()]
    for t in texts:
        if rule in ("num-workers", "dataloader-slow") and (m := re.search(r"num_workers\s*=\s*(\d+)", t)):
            return int(m.group(1))
        if rule == "cpu-threads" and (m := re.search(r"(?:threads?\s*=\s*|set_num_threads\(|threads \S+ -> )(\d+)", t)):
            return int(m.group(1))
        if rule == "fused-optimizer" and re.search(r"\bfused\b", t):
            return "fused"
    return DEFAULT_VALUE[rule]


# --- preparation of the examples that need it -----------------------------------------------------------
def _wikitext(examples: Path, work: Path) -> None:
    """word_language_model reads data/wikitext-2/{train,valid,test}.txt; a snapshot without train.txt
    (over 4 MiB) trains on valid.txt."""
    data = work / "data" / "wikitext-2"
    if not (data / "train.txt").exists():
        shutil.copy(data / "valid.txt", data / "train.txt")


def _sine(length: int, count: int) -> Callable:
    """generate_sine_wave.py, shrunk (L, N) in a copy, run once; train.py's torch.load gets
    weights_only=False (the data is a NumPy array; torch >= 2.6 refuses it otherwise)."""
    def prepare(examples: Path, work: Path) -> None:
        gen = work / "generate_sine_wave.py"
        src = gen.read_text()
        for old, new in (("L = 1000", f"L = {length}"), ("N = 100", f"N = {count}")):
            if src.count(old) != 1:
                raise PatchError(f"{gen.name}: expected one '{old}'")
            src = src.replace(old, new)
        gen.write_text(src)
        subprocess.run([sys.executable, gen.name], cwd=work, check=True, capture_output=True, timeout=120)
        train = work / "train.py"
        train.write_text(set_call_kwarg(train.read_text(), ("load",), "weights_only", "False")[0])
    return prepare


def _loader_fixes(fixer: Callable) -> dict:
    return {"num-workers": fixer, "dataloader-slow": fixer}


IMAGENET = ["-a", "resnet18", "--dummy", "--epochs", "1", "--print-freq", "5"]
PROGRAMS = [
    Program("imagenet-w0", "pytorch/examples imagenet: ResNet-18, `--dummy` data, no workers", "main.py",
            [*IMAGENET, "-b", "4", "--workers", "0"], [*IMAGENET, "-b", "2", "--workers", "0"], folder="imagenet",
            warmup=2, steps=5, default_fix="num-workers", perfsleuth=["--wait", "3", "--warmup", "1", "--active", "3"],
            fixes={**_loader_fixes(flag("--workers", "num_workers")), "cpu-threads": threads_line("main.py"),
                   "fused-optimizer": optimizer_kw("main.py")}),
    Program("imagenet-w2", "pytorch/examples imagenet: ResNet-18, `--dummy` data, 2 workers", "main.py",
            [*IMAGENET, "-b", "4", "--workers", "2"], [*IMAGENET, "-b", "2", "--workers", "2"], folder="imagenet",
            warmup=2, steps=5, default_fix="cpu-threads", perfsleuth=["--wait", "3", "--warmup", "1", "--active", "3"],
            fixes={**_loader_fixes(flag("--workers", "num_workers")), "cpu-threads": threads_line("main.py"),
                   "fused-optimizer": optimizer_kw("main.py")}),
    Program("dcgan", "pytorch/examples dcgan: `--dataset fake`, its default 2 workers", "main.py",
            ["--dataset", "fake", "--batchSize", "16", "--ngf", "16", "--ndf", "16", "--niter", "5", "--outf", "out"],
            ["--dataset", "fake", "--batchSize", "4", "--ngf", "8", "--ndf", "8", "--niter", "5", "--outf", "out"],
            folder="dcgan", warmup=3, steps=12, default_fix="cpu-threads",
            fixes={**_loader_fixes(flag("--workers", "num_workers")), "cpu-threads": threads_line("main.py"),
                   "fused-optimizer": optimizer_kw("main.py")}),
    Program("word_language_model", "pytorch/examples word_language_model: 1-layer LSTM, AdamW", "main.py",
            ["--emsize", "32", "--nhid", "32", "--nlayers", "1", "--epochs", "1", "--use-optimizer", "--lr", "0.001"],
            ["--emsize", "16", "--nhid", "16", "--nlayers", "1", "--epochs", "1", "--use-optimizer", "--lr", "0.001"],
            folder="word_language_model", prepare=_wikitext, warmup=5, steps=30, default_fix="fused-optimizer",
            fixes={"cpu-threads": threads_line("main.py"), "fused-optimizer": optimizer_kw("main.py")}),
    Program("time_sequence_prediction", "pytorch/examples time_sequence_prediction: LSTMCells, LBFGS(closure)",
            "train.py", ["--steps", "40"], ["--steps", "40"], folder="time_sequence_prediction",
            prepare=_sine(300, 30), warmup=1, steps=4, smoke_steps=(0, 1), default_fix="cpu-threads",
            perfsleuth=["--wait", "2", "--warmup", "1", "--active", "3"],
            fixes={"cpu-threads": threads_line("train.py")}),
    Program("regression", "pytorch/examples regression: one Linear, weights updated by hand", "main.py", [], [],
            folder="regression", on="forward", seed=0, warmup=20, steps=200, smoke_steps=(5, 20),
            default_fix="cpu-threads", fixes={"cpu-threads": threads_line("main.py")}),
    Program("hf-bert", "Hugging Face Trainer: tiny random BERT (2 layers, hidden 64), synthetic Dataset",
            "hf_bert.py", ["--steps", "400", "--batch-size", "16"], ["--steps", "400", "--batch-size", "4", "--seq", "16"],
            driver="hf_bert.py", warmup=5, steps=30, default_fix="fused-optimizer",
            fixes={**_loader_fixes(flag("--workers", "num_workers")), "cpu-threads": flag("--threads", "threads"),
                   "fused-optimizer": switch()}),
    Program("lightning", "Lightning module, Python-heavy Dataset (Trainer on CPU)", "lightning_dataset.py",
            ["--steps", "400", "--batch-size", "32"], ["--steps", "400", "--batch-size", "8", "--work", "2"],
            driver="lightning_dataset.py", warmup=5, steps=30, default_fix="num-workers",
            fixes={**_loader_fixes(flag("--workers", "num_workers")), "cpu-threads": flag("--threads", "threads"),
                   "fused-optimizer": switch()}),
    Program("mnist-loop", "a user's loop around pytorch/examples mnist's Net, synthetic tensors, Adadelta",
            "mnist_loop.py", ["--steps", "1000", "--batch-size", "64"], ["--steps", "1000", "--batch-size", "8"],
            driver="mnist_loop.py", warmup=5, steps=40, default_fix="num-workers",
            fixes={**_loader_fixes(flag("--workers", "num_workers")), "cpu-threads": flag("--threads", "threads"),
                   "fused-optimizer": switch()}),
]
BY_NAME = {p.name: p for p in PROGRAMS}


def program_args(p: Program, examples: Path, smoke: bool) -> list:
    args = list(p.smoke_args if smoke else p.args)
    return [*args, "--examples", str(examples)] if p.name == "mnist-loop" else args
