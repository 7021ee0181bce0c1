"""The machine around benchmarks/unseen.py's runs: what else kept the cores busy during an A/B pair
(from /proc/stat, less this benchmark's own CPU time, and the busiest other processes by name), the
versions and commits a result was measured with, and a command run in its own process group with a
time limit. Linux only (/proc)."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import platform
import resource
import shlex
import signal
import subprocess
import tempfile
import time
from pathlib import Path


def _busy_jiffies() -> int:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - (v[4] if len(v) > 4 else 0)


def _procs() -> dict:
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    s = f.read()
                comm, rest = s[s.index("(") + 1:s.rindex(")")], s[s.rindex(")") + 2:].split()
                out[int(d)] = (comm, int(rest[11]) + int(rest[12]))
            except (OSError, ValueError, IndexError):
                continue
    return out


def _own_cpu_s() -> float:
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def snapshot() -> dict:
    return {"t": time.monotonic(), "busy": _busy_jiffies(), "own": _own_cpu_s(), "procs": _procs(),
            "load": [round(x, 2) for x in os.getloadavg()]}


def others(s0: dict, s1: dict) -> tuple:
    """Cores other processes kept busy between two snapshots, and the busiest of them by name."""
    hz, wall = os.sysconf("SC_CLK_TCK"), max(s1["t"] - s0["t"], 1e-6)
    cores = ((s1["busy"] - s0["busy"]) / hz - (s1["own"] - s0["own"])) / wall
    me = os.getpid()
    by: dict = {}
    for p, (c, j) in s1["procs"].items():  # a process started during the pair counts from 0
        used = (j - s0["procs"].get(p, (c, 0))[1]) / hz / wall
        if p != me and used > 0:
            name = _cmdline(p, c)
            by[name] = by.get(name, 0.0) + used
    top = sorted(by.items(), key=lambda x: -x[1])
    return round(max(cores, 0.0), 3), [[c, round(u, 3)] for c, u in top[:3] if u >= 0.02]


def _cmdline(pid: int, comm: str) -> str:
    """The process's program and first arguments, shortened (its name if it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = [w.decode(errors="replace") for w in f.read().split(b"\0") if w]
    except OSError:
        return comm
    text = " ".join(" ".join(Path(w).name if i < 2 else w for i, w in enumerate(words[:3])).split())
    return text[:60] or comm


def bounded(cmd: list, cwd: Path, timeout: float, env: dict = None) -> tuple:
    """(exit code or "timeout after N s", stderr): the command in its own session, and on timeout its
    whole process group killed (DataLoader workers, --verify's children)."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                env={**os.environ, **(env or {})}, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = f"timeout after {timeout:.0f} s"
        err.seek(0)
        return rc, err.read()


def _commit(path: Path) -> str:
    if (path / "COMMIT").exists():
        return (path / "COMMIT").read_text().strip()
    r = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def machine(examples: Path, ps: list, own: bool) -> dict:
    """The machine, the versions, and the commits of perfsleuth (when it is this venv's own, installed
    from a checkout) and of the examples."""
    import torch

    spec = importlib.util.find_spec("perfsleuth") if own else None
    src = Path(spec.origin).resolve().parent.parent if spec and spec.origin else None
    dirty = src and subprocess.run(["git", "-C", str(src), "status", "--porcelain"], capture_output=True,
                                   text=True).stdout.strip()
    vers = {n: md.version(n) for n in ("transformers", "accelerate", "lightning", "torchvision")}
    vers["perfsleuth"] = subprocess.run([*ps, "--version"], capture_output=True, text=True).stdout.strip().split()[-1:]
    vers["perfsleuth"] = (vers["perfsleuth"] or ["unknown"])[0]
    return {"cpus": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)), "python": platform.python_version(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "versions": vers,
            "perfsleuth_commit": (_commit(src) if src else "unknown") + (" (modified)" if dirty else ""),
            "perfsleuth_cmd": shlex.join(ps),
            "examples_commit": _commit(examples), "system": f"{platform.system()} {platform.release()}"}


def machine_line(m: dict, verify: tuple) -> str:
    v = m["versions"]
    return (f"Machine: {m['cpus']} cores (affinity {m['affinity']}), Python {m['python']}, torch {m['torch']}, "
            f"torchvision {v['torchvision']}, transformers {v['transformers']}, lightning {v['lightning']}; "
            f"perfsleuth {v['perfsleuth']} at {m['perfsleuth_commit'][:12]}"
            f"{' (modified)' if m['perfsleuth_commit'].endswith('(modified)') else ''}"
            f"{'' if verify[0] else ' (no `--verify` in it)'}; pytorch/examples at {m['examples_commit'][:12]}.")
