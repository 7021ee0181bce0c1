"""Install the torch the tests need without silently pulling a CUDA build onto a machine without a GPU.

    python3 scripts/install_torch.py               # what scripts/test.sh runs
    python3 scripts/install_torch.py --dry-run     # say what it would do, install nothing

Only `perfsleuth run`, `perfsleuth.profile()` and their tests need torch. On Linux, PyPI's
`torch==2.13.0` is the CUDA build (several GB of nvidia-* wheels); the CPU build comes from
https://download.pytorch.org/whl/cpu. So, one line printed per decision:

1. torch at the pinned version already imports: nothing to install.
2. Otherwise ask pip what it would install (`pip install --dry-run --report`). A CPU build (PyPI's
   wheel on macOS and Windows, or a local CPU wheel that pip finds through its configuration, as on
   the project's machines) is installed as resolved.
3. A CUDA build (torch's version says +cuNNN, or the resolution brings nvidia-*, cuda-* or triton
   packages) is installed only where an NVIDIA GPU is present; elsewhere the CPU build is installed
   from the index above instead, and the script says so. If that index cannot be reached, it stops
   with an error rather than fall back to CUDA.
4. Afterwards torch is imported and its build reported.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VERSION = "2.13.0"  # the torch the tests are pinned to
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
_CUDA_PACKAGE = re.compile(r"^(nvidia-.*|cuda-.*|triton)$", re.I)


def say(text: str) -> None:
    print(f"install_torch: {text}", flush=True)


def installed(python: str) -> str | None:
    """The version of torch `python` imports, or None."""
    done = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def resolution(python: str, *pip_args: str) -> list[dict]:
    """What `pip install PIP_ARGS` would install: [{name, version, url}] from pip's installation report."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run([python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report), *pip_args],
                       check=True)
        data = json.loads(report.read_text())
    return [{"name": item["metadata"]["name"], "version": item["metadata"]["version"],
             "url": item.get("download_info", {}).get("url", "")} for item in data.get("install", [])]


def cuda_evidence(packages: list[dict]) -> list[str]:
    """Why a resolution is a CUDA build: torch's +cu version, and the CUDA packages it brings; [] for a CPU build."""
    why = [f"torch {p['version']}" for p in packages
           if p["name"].lower() == "torch" and re.search(r"\+cu\d+", p["version"])]
    return why + sorted(p["name"] for p in packages if _CUDA_PACKAGE.match(p["name"]))


def has_nvidia_gpu() -> bool:
    gpus = Path("/proc/driver/nvidia/gpus")
    if gpus.is_dir() and any(gpus.iterdir()):
        return True
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    done = subprocess.run([smi, "-L"], capture_output=True, text=True)
    return done.returncode == 0 and "GPU" in done.stdout


def plan(packages: list[dict], gpu: bool) -> tuple[str, list[str]]:
    """("as-resolved" | "cpu-index", the lines that say why) for a dry-run resolution."""
    torch = next((p for p in packages if p["name"].lower() == "torch"), None)
    where = f" from {torch['url']}" if torch and torch["url"] else ""
    evidence = cuda_evidence(packages)
    if not evidence:
        return "as-resolved", [f"pip would install torch {torch['version'] if torch else '?'}{where}: a CPU build; "
                               f"installing it"]
    shown = ", ".join(evidence[:4]) + (f" and {len(evidence) - 4} more" if len(evidence) > 4 else "")
    if gpu:
        return "as-resolved", [f"pip would install the CUDA build of torch ({shown}); this machine has an NVIDIA "
                               f"GPU: installing it"]
    return "cpu-index", [f"pip would install the CUDA build of torch ({shown}) and this machine has no NVIDIA GPU: "
                         f"installing the CPU build from {CPU_INDEX} instead"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=sys.executable, help="the interpreter to install into [this one]")
    ap.add_argument("--dry-run", action="store_true", help="say what would be done, install nothing")
    args = ap.parse_args(argv)
    pin = f"torch=={VERSION}"
    have = installed(args.python)
    if have and have.split("+")[0] == VERSION:
        say(f"torch {have} is installed: nothing to install")
        return 0
    if have:
        say(f"torch {have} is installed; the tests are pinned to {VERSION}")
    choice, lines = plan(resolution(args.python, pin), has_nvidia_gpu())
    for line in lines:
        say(line)
    extra = ["--index-url", CPU_INDEX] if choice == "cpu-index" else []
    command = [args.python, "-m", "pip", "install", "--quiet", pin, *extra]
    if args.dry_run:
        say("dry run: would run " + " ".join(command))
        return 0
    if subprocess.run(command).returncode != 0:
        say(f"could not install {pin}" + (f" from {CPU_INDEX}: not falling back to the CUDA build" if extra else ""))
        return 1
    check = subprocess.run([args.python, "-c", "import torch; print(torch.__version__, torch.version.cuda or 'CPU')"],
                           capture_output=True, text=True)
    say(f"installed torch {check.stdout.strip() or '(does not import: ' + check.stderr.strip()[-200:] + ')'}")
    return check.returncode


if __name__ == "__main__":
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    sys.exit(main())
