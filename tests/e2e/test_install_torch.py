"""scripts/install_torch.py (what scripts/test.sh, and so CI, runs): a CUDA build of torch is never installed
on a machine without an NVIDIA GPU, and every decision is said."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install_torch.py"
spec = importlib.util.spec_from_file_location("install_torch", SCRIPT)
install_torch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(install_torch)

PYPI = "https://files.pythonhosted.org/packages/xx/"
COMMON = [{"name": n, "version": v, "url": f"{PYPI}{n}-{v}-py3-none-any.whl"}
          for n, v in (("filelock", "4.3.1"), ("sympy", "1.14.0"), ("networkx", "3.6.1"), ("jinja2", "3.1.6"))]
# what `pip install --dry-run --report` lists for torch==2.13.0 on an ordinary x86_64 Linux machine: PyPI's wheel
# and the CUDA libraries it depends on
LINUX_PYPI = [{"name": "torch", "version": "2.13.0", "url": f"{PYPI}torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"},
              *COMMON, *({"name": n, "version": "12.8.1", "url": f"{PYPI}{n}.whl"} for n in
                         ("nvidia-cublas-cu12", "nvidia-cudnn-cu12", "nvidia-nccl-cu12", "nvidia-cuda-runtime-cu12",
                          "nvidia-cusparse-cu12")), {"name": "triton", "version": "3.6.0", "url": f"{PYPI}triton.whl"}]
# the project's machines: pip's configuration finds a local CPU wheel
LOCAL_CPU = [{"name": "torch", "version": "2.13.0+cpu",
              "url": "file:///opt/wheels/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"}, *COMMON]
MACOS = [{"name": "torch", "version": "2.13.0", "url": f"{PYPI}torch-2.13.0-cp311-none-macosx_11_0_arm64.whl"}, *COMMON]


def test_a_cuda_resolution_on_a_machine_without_gpu_takes_the_cpu_index():
    choice, lines = install_torch.plan(LINUX_PYPI, gpu=False)
    assert choice == "cpu-index"
    assert lines == ["pip would install the CUDA build of torch (nvidia-cublas-cu12, nvidia-cuda-runtime-cu12, "
                     "nvidia-cudnn-cu12, nvidia-cusparse-cu12 and 2 more) and this machine has no NVIDIA GPU: "
                     "installing the CPU build from https://download.pytorch.org/whl/cpu instead"]


def test_a_cuda_resolution_is_kept_where_there_is_a_gpu():
    choice, lines = install_torch.plan(LINUX_PYPI, gpu=True)
    assert choice == "as-resolved" and lines[0].startswith("pip would install the CUDA build of torch (")
    assert lines[0].endswith("); this machine has an NVIDIA GPU: installing it")


def test_cpu_builds_are_installed_as_resolved():
    for packages, where in ((LOCAL_CPU, LOCAL_CPU[0]["url"]), (MACOS, MACOS[0]["url"])):
        choice, lines = install_torch.plan(packages, gpu=False)
        assert choice == "as-resolved"
        assert lines == [f"pip would install torch {packages[0]['version']} from {where}: a CPU build; installing it"]


def test_cuda_evidence():
    assert install_torch.cuda_evidence([{"name": "torch", "version": "2.13.0+cu128", "url": ""}]) == [
        "torch 2.13.0+cu128"]
    assert install_torch.cuda_evidence(LOCAL_CPU) == [] and install_torch.cuda_evidence(MACOS) == []
    assert install_torch.cuda_evidence(LINUX_PYPI)[-1] == "triton"


def test_an_installed_torch_at_the_pin_is_left_alone():
    """This machine (and CI, a fresh clone on it) has torch 2.13.0: the script says so and installs nothing."""
    import torch

    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"install_torch: torch {torch.__version__} is installed: nothing to install\n"
    assert torch.__version__.split("+")[0] == install_torch.VERSION
