"""Start-up: how long `perfsleuth --version`, `rules`, `docs` and `analyze` of a small trace take, and
which imports the time goes to.

    python benchmarks/startup.py [--repeat 20] [--perfsleuth PATH] [--trace FILE] [--markdown]

Each command runs `--repeat` times as the console script (a fresh interpreter each time, output
discarded), the commands interleaved so that a change in the machine's load hits all of them alike;
the minimum and median wall times are printed with the load average. Then one run of each under
`python -X importtime`: the modules' own import times summed by package (pandas, numpy, click,
jinja2, msgspec, perfsleuth, ...), and whether pandas, numpy and torch were imported at all.
--perfsleuth picks the console script of another install (a venv with the version to compare).

The commands run with bytecode caching on (PYTHONDONTWRITEBYTECODE removed from their environment,
one warm-up run each), as an installed package is: pip compiles the .pyc files at install time. An
editable install under PYTHONDONTWRITEBYTECODE=1 compiles every perfsleuth module from source on
every start (about 0.12 s on the shared 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SMALL = HERE.parent / "fixtures" / "traces" / "real" / "a100_alexnet_small.json.gz"
GROUPS = ("pandas", "numpy", "click", "jinja2", "markupsafe", "msgspec", "perfsleuth", "tomllib")
HEAVY = ("pandas", "numpy", "torch")


def commands(trace: Path) -> dict:
    return {"--version": ["--version"], "rules": ["rules"], "docs": ["docs"],
            "analyze (small trace)": ["analyze", str(trace)]}


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall(argv: list) -> float:
    t = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=ENV)
    return time.perf_counter() - t


def import_profile(script: str, args: list) -> dict:
    """Own import time (s) per package group, from one run under -X importtime; and which heavy
    modules were imported."""
    python = Path(script).read_text().splitlines()[0][2:].strip()
    env = {**ENV, "PYTHONPROFILEIMPORTTIME": "1"}
    err = subprocess.run([python, script, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True).stderr
    spent: dict = {}
    seen = set()
    for line in err.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        parts = line[len("import time:"):].split("|")
        own, name = int(parts[0]), parts[2].strip()
        root = name.split(".")[0]
        seen.add(root)
        group = root if root in GROUPS else "python and other"
        spent[group] = spent.get(group, 0.0) + own / 1e6
    spent["total"] = sum(spent.values())
    return {"spent": spent, "heavy": [m for m in HEAVY if m in seen]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--perfsleuth", action="append", default=[], metavar="SCRIPT",
                    help="a console script to time (repeatable: installs are interleaved run by run) "
                         "[default: this interpreter's]")
    ap.add_argument("--trace", type=Path, default=SMALL)
    args = ap.parse_args()
    scripts = args.perfsleuth or [shutil.which("perfsleuth", path=str(Path(sys.executable).parent))]
    cmds = commands(args.trace)
    load = os.getloadavg()
    times: dict = {(s, k): [] for s in scripts for k in cmds}
    for s in scripts:
        for argv in cmds.values():  # warm-up: writes the bytecode caches
            wall([s, *argv])
    for _ in range(args.repeat):
        for s in scripts:
            for name, argv in cmds.items():
                times[(s, name)].append(wall([s, *argv]))
    load_after = os.getloadavg()
    pandas = sorted(wall([sys.executable, "-c", "import pandas"]) for _ in range(5))
    bare = sorted(wall([sys.executable, "-c", "pass"]) for _ in range(5))
    print(f"{args.repeat} runs of each command, installs and commands interleaved; `python -c pass` "
          f"{bare[0]:.3f} s and `python -c 'import pandas'` {pandas[0]:.3f} s (best of 5); load average "
          f"{load[0]:.2f} before, {load_after[0]:.2f} after ({os.cpu_count()} cores)")
    for s in scripts:
        profiles = {name: import_profile(s, argv) for name, argv in cmds.items()}
        groups = [g for g in (*GROUPS, "python and other") if any(g in p["spent"] for p in profiles.values())]
        print(f"\n`{s}`:\n")
        print("| command | min | median | imports (-X importtime) | " + " | ".join(groups) +
              " | pandas/numpy/torch imported |")
        print("|---|--:|--:|--:|" + "--:|" * len(groups) + "---|")
        for name in cmds:
            ts, p = sorted(times[(s, name)]), profiles[name]
            cells = " | ".join(f"{p['spent'].get(g, 0.0) * 1000:.0f} ms" if g in p["spent"] else "-" for g in groups)
            print(f"| `{name}` | {ts[0]:.3f} s | {statistics.median(ts):.3f} s | {p['spent']['total'] * 1000:.0f} ms | "
                  f"{cells} | {', '.join(p['heavy']) or 'none'} |")


if __name__ == "__main__":
    main()
