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


@dataclass
class Variant:
    """The fixed program: its args, and edits of its copied source (file, function(src) -> src)."""
    label: str
    args: list
    edits: list = field(default_factory=list)
    env: dict = field(default_factory=dict)


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
    fixes: dict = field(default_factory=dict)   # rule -> function(setting, args) -> Variant
    default_fix: str = "cpu-threads"            # tried when no finding perfsleuth made has a fix here
    prepare: Optional[Callable] = None          # (examples, work dir, smoke) -> None, before any run
    timeout_s: int = 600            # one timed run
    perfsleuth_timeout_s: int = 600  # `perfsleuth run` (plus --verify-budget with --verify)
    perfsleuth: list = field(default_factory=list)  # options of `perfsleuth run` (slow steps: a shorter window)

    def setup(self, examples: Path, work: Path, smoke: bool = False) -> Path:
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
            self.prepare(examples, work, smoke)
        return work / self.script


# --- how a fix is applied ---------------------------------------------------------------------------
# A setting is (name, value): ("num_workers", 2), ("persistent_workers", True), ("prefetch_factor", 4),
# ("threads", 1) for torch.set_num_threads, ("omp", 1) for OMP/MKL_NUM_THREADS at start, ("foreach", True),
# ("fused", True). A program's fixer for a rule turns one into a Variant, or raises NotApplicable.
class NotApplicable(ValueError):
    pass


def _set_flag(args: list, flag: str, value) -> list:
    out = list(args)
    if flag in out:
        out[out.index(flag) + 1] = str(value)
    else:
        out += [flag, str(value)]
    return out


def loader(flag: Optional[str] = None, file: Optional[str] = None) -> Callable:
    """num_workers through the program's own option; other DataLoader settings as keywords of its
    DataLoader call(s) in a copy of `file`."""
    def fix(setting, args):
        name, value = setting
        if name == "num_workers" and flag:
            return Variant(f"num_workers={value} (`{flag} {value}`)", _set_flag(args, flag, value))
        if name in ("num_workers", "persistent_workers", "prefetch_factor") and file:
            return Variant(f"{name}={value} in the DataLoader call of a copy of {file}", list(args),
                           [(file, lambda src: set_call_kwarg(src, ("DataLoader",), name, repr(value))[0])])
        raise NotApplicable(f"{name}={value}: no way to set it in this program without perfsleuth")
    return fix


def threads(file: Optional[str] = None, flag: Optional[str] = None) -> Callable:
    """torch.set_num_threads(N) as the first statement of a copy of `file` (or the driver's `flag N`);
    OMP_NUM_THREADS/MKL_NUM_THREADS=N in the environment."""
    def fix(setting, args):
        name, n = setting
        if name == "omp":
            return Variant(f"OMP_NUM_THREADS=MKL_NUM_THREADS={n} in the environment", list(args),
                           env={"OMP_NUM_THREADS": str(n), "MKL_NUM_THREADS": str(n)})
        if flag:
            return Variant(f"torch.set_num_threads({n}) (`{flag} {n}`)", _set_flag(args, flag, n))
        code = f"import torch; torch.set_num_threads({int(n)})"
        return Variant(f"torch.set_num_threads({n}) first in a copy of {file}", list(args),
                       [(file, lambda src: prepend(src, code))])
    return fix


def optimizer(file: Optional[str] = None) -> Callable:
    """foreach=True / fused=True in the optimizer's constructor in a copy of `file` (or the driver's
    --foreach / --fused)."""
    def fix(setting, args):
        kw = setting[0]
        if kw not in ("foreach", "fused"):
            raise NotApplicable(f"{setting}: not an optimizer setting")
        if not file:
            return Variant(f"{kw}=True (`--{kw}`)", [*args, f"--{kw}"])
        return Variant(f"{kw}=True in the optimizer's constructor, in a copy of {file}", list(args),
                       [(file, lambda src: set_call_kwarg(src, OPTIMIZERS, kw, "True")[0])])
    return fix


def apply(variant: Variant, work: Path) -> None:
    for file, edit in variant.edits:
        path = work / file
        path.write_text(edit(path.read_text()))


SETTINGS = (  # (pattern in perfsleuth's words, setting); the first that matches wins
    (r"num_workers\s*=\s*(\d+)", "num_workers"), (r"persistent_workers\s*=\s*True", "persistent_workers"),
    (r"prefetch_factor\s*=\s*(\d+)", "prefetch_factor"), (r"OMP_NUM_THREADS\s*=\s*(\d+)", "omp"),
    (r"set_num_threads\((\d+)\)", "threads"), (r"intra-op threads \S+ -> (\d+)", "threads"),
    (r"\bfused\s*=\s*True", "fused"), (r"\bforeach\s*=\s*True", "foreach"))
RULE_SETTINGS = {"num-workers": ("num_workers",),
                 "dataloader-slow": ("num_workers", "persistent_workers", "prefetch_factor"),
                 "cpu-threads": ("threads", "omp"), "fused-optimizer": ("foreach", "fused")}
DEFAULT_SETTING = {"num-workers": ("num_workers", 2), "dataloader-slow": ("num_workers", 2),
                   "cpu-threads": ("threads", 1),
                   "fused-optimizer": ("foreach", True)}


def parse_setting(rule: str, text: str) -> Optional[tuple]:
    """The setting of `rule`'s fix that perfsleuth's words name ("num_workers=2", "OMP_NUM_THREADS=1 at
    start", "torch intra-op threads 2 -> 1"), or None."""
    for pattern, name in SETTINGS:
        if name in RULE_SETTINGS.get(rule, ()) and (m := re.search(pattern, str(text or ""))):
            return name, int(m.group(1)) if m.groups() else True
    return None


def setting_for(rule: str, finding: Optional[dict]) -> tuple:
    """The setting perfsleuth measured (verified.variant), else the one its forecast assumed, else a default."""
    texts = []
    if finding:
        texts.append((finding.get("verified") or {}).get("variant"))
        texts += list(((finding.get("forecast") or {}).get("assumptions") or {}).values())
    return next((got for t in texts if (got := parse_setting(rule, t))), DEFAULT_SETTING[rule])


def verified_for(rule: str, setting: tuple, finding: Optional[dict], experiments: list) -> Optional[dict]:
    """--verify's measurement of this very setting: the experiment for the rule whose variant names it
    (a finding's `verified` is the best of its experiments, which may be another setting)."""
    for e in experiments:
        if rule in (e.get("rules") or ()) and isinstance(e.get("verified"), dict) \
                and parse_setting(rule, e.get("variant")) == setting:
            return e["verified"]
    v = (finding or {}).get("verified")
    return v if isinstance(v, dict) and parse_setting(rule, v.get("variant")) == setting else None


# --- preparation of the examples that need it -----------------------------------------------------------
def _wikitext(examples: Path, work: Path, smoke: bool) -> None:
    """word_language_model reads data/wikitext-2/{train,valid,test}.txt; a snapshot without train.txt
    (over 4 MiB) trains on valid.txt."""
    data = work / "data" / "wikitext-2"
    if not (data / "train.txt").exists():
        shutil.copy(data / "valid.txt", data / "train.txt")


def _seeded(file: str) -> Callable:
    """torch.manual_seed(0) first in the copy that every run uses (perfsleuth's and the A/B's alike):
    regression's loop stops when its loss is small, after a number of batches its random target sets;
    seed 0 gives 830, enough for perfsleuth's window and --verify's."""
    def prepare(examples: Path, work: Path, smoke: bool) -> None:
        (work / file).write_text(prepend((work / file).read_text(), "import torch; torch.manual_seed(0)"))
    return prepare


def _sine(length: int, count: int) -> Callable:
    """generate_sine_wave.py, shrunk (L, N) in a copy (L a tenth of that with --smoke), run once;
    train.py's torch.load gets weights_only=False (the data is a NumPy array; torch >= 2.6 refuses it
    otherwise)."""
    def prepare(examples: Path, work: Path, smoke: bool) -> None:
        gen = work / "generate_sine_wave.py"
        src = gen.read_text()
        k = 10 if smoke else 1
        for old, new in (("L = 1000", f"L = {length // k}"), ("N = 100", f"N = {max(count // k, 6)}")):
            if src.count(old) != 1:
                raise PatchError(f"{gen.name}: expected one '{old}'")
            src = src.replace(old, new)
        gen.write_text(src)
        subprocess.run([sys.executable, gen.name], cwd=work, check=True, capture_output=True, timeout=120)
        train = work / "train.py"
        train.write_text(set_call_kwarg(train.read_text(), ("load",), "weights_only", "False")[0])
    return prepare


def fixes(loader_: Optional[Callable] = None, threads_: Optional[Callable] = None,
          optimizer_: Optional[Callable] = None) -> dict:
    out = {"cpu-threads": threads_, "fused-optimizer": optimizer_, "num-workers": loader_, "dataloader-slow": loader_}
    return {rule: fixer for rule, fixer in out.items() if fixer is not None}


IMAGENET = ["-a", "resnet18", "--dummy", "--epochs", "1", "--print-freq", "5"]
PROGRAMS = [
    Program("imagenet-w0", "pytorch/examples imagenet: ResNet-18, `--dummy` data, no workers", "main.py",
            [*IMAGENET, "-b", "4", "--workers", "0"], [*IMAGENET, "-b", "2", "--workers", "0"], folder="imagenet",
            warmup=2, steps=5, default_fix="num-workers", perfsleuth=["--wait", "3", "--warmup", "1", "--active", "3"],
            fixes=fixes(loader("--workers", "main.py"), threads("main.py"), optimizer("main.py"))),
    Program("imagenet-w2", "pytorch/examples imagenet: ResNet-18, `--dummy` data, 2 workers", "main.py",
            [*IMAGENET, "-b", "4", "--workers", "2"], [*IMAGENET, "-b", "2", "--workers", "2"], folder="imagenet",
            warmup=2, steps=5, default_fix="cpu-threads", perfsleuth=["--wait", "3", "--warmup", "1", "--active", "3"],
            fixes=fixes(loader("--workers", "main.py"), threads("main.py"), optimizer("main.py"))),
    Program("dcgan", "pytorch/examples dcgan: `--dataset fake`, its default 2 workers", "main.py",
            ["--dataset", "fake", "--batchSize", "16", "--ngf", "16", "--ndf", "16", "--niter", "10", "--outf", "out"],
            ["--dataset", "fake", "--batchSize", "4", "--ngf", "8", "--ndf", "8", "--niter", "10", "--outf", "out"],
            folder="dcgan", warmup=3, steps=12, default_fix="cpu-threads",
            fixes=fixes(loader("--workers", "main.py"), threads("main.py"), optimizer("main.py"))),
    Program("word_language_model", "pytorch/examples word_language_model: 1-layer LSTM, AdamW", "main.py",
            ["--emsize", "32", "--nhid", "32", "--nlayers", "1", "--epochs", "3", "--use-optimizer", "--lr", "0.001"],
            ["--emsize", "16", "--nhid", "16", "--nlayers", "1", "--epochs", "3", "--use-optimizer", "--lr", "0.001"],
            folder="word_language_model", prepare=_wikitext, warmup=5, steps=30, default_fix="fused-optimizer",
            fixes=fixes(None, threads("main.py"), optimizer("main.py"))),
    Program("time_sequence_prediction", "pytorch/examples time_sequence_prediction: LSTMCells, LBFGS(closure)",
            "train.py", ["--steps", "200"], ["--steps", "200"], folder="time_sequence_prediction",
            prepare=_sine(100, 20), warmup=1, steps=3, smoke_steps=(0, 1), default_fix="cpu-threads",
            perfsleuth=["--wait", "2", "--warmup", "1", "--active", "3"],
            fixes=fixes(None, threads("train.py"))),
    Program("regression", "pytorch/examples regression: one Linear, weights updated by hand", "main.py", [], [],
            folder="regression", on="forward", prepare=_seeded("main.py"), warmup=20, steps=200, smoke_steps=(5, 20),
            default_fix="cpu-threads", fixes=fixes(None, threads("main.py"))),
    Program("hf-bert", "Hugging Face Trainer: tiny random BERT (2 layers, hidden 64), synthetic Dataset",
            "hf_bert.py", ["--steps", "400", "--batch-size", "16"],
            ["--steps", "400", "--batch-size", "4", "--seq", "16"],
            driver="hf_bert.py", warmup=5, steps=30, default_fix="fused-optimizer",
            fixes=fixes(loader("--workers"), threads(flag="--threads"), optimizer())),
    Program("lightning", "Lightning module, Python-heavy Dataset (Trainer on CPU)", "lightning_dataset.py",
            ["--steps", "400", "--batch-size", "32"], ["--steps", "400", "--batch-size", "8", "--work", "2"],
            driver="lightning_dataset.py", warmup=5, steps=30, default_fix="num-workers",
            fixes=fixes(loader("--workers", "lightning_dataset.py"), threads(flag="--threads"), optimizer())),
    Program("lightning-t1", "the Lightning module with one torch thread (`--threads 1`)", "lightning_dataset.py",
            ["--steps", "400", "--batch-size", "32", "--threads", "1"],
            ["--steps", "400", "--batch-size", "8", "--work", "2", "--threads", "1"],
            driver="lightning_dataset.py", warmup=5, steps=30, default_fix="num-workers",
            fixes=fixes(loader("--workers", "lightning_dataset.py"), optimizer_=optimizer())),
    Program("jpeg", "a Dataset decoding in-memory JPEGs with PIL + torchvision transforms, a small CNN (written "
            "elsewhere for issue 37)", "jpeg_dataset.py", ["--steps", "120"], ["--steps", "30", "--num-images", "64"],
            driver="jpeg_dataset.py", warmup=5, steps=40, default_fix="num-workers",
            fixes=fixes(loader("--workers", "jpeg_dataset.py"), threads(flag="--threads"), optimizer())),
    Program("jpeg-t1", "the JPEG Dataset program with one torch thread (`--threads 1`)", "jpeg_dataset.py",
            ["--steps", "120", "--threads", "1"], ["--steps", "30", "--num-images", "64", "--threads", "1"],
            driver="jpeg_dataset.py", warmup=5, steps=40, default_fix="num-workers",
            fixes=fixes(loader("--workers", "jpeg_dataset.py"), optimizer_=optimizer())),
    Program("mnist-loop", "a user's loop around pytorch/examples mnist's Net, synthetic tensors, Adadelta",
            "mnist_loop.py", ["--steps", "1000", "--batch-size", "64"], ["--steps", "1000", "--batch-size", "8"],
            driver="mnist_loop.py", warmup=5, steps=40, default_fix="num-workers",
            fixes=fixes(loader("--workers", "mnist_loop.py"), threads(flag="--threads"), optimizer())),
]
BY_NAME = {p.name: p for p in PROGRAMS}


def program_args(p: Program, examples: Path, smoke: bool) -> list:
    args = list(p.smoke_args if smoke else p.args)
    return [*args, "--examples", str(examples)] if p.name == "mnist-loop" else args
