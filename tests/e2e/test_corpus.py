"""The bad-input corpus (tests/helpers/badcorpus.py, tests/helpers/corpus/) run END TO END through the real CLI: a fresh
`python -m perfsleuth` per case, in a scratch folder. The promise (docs/robustness.md): a bad input
gets exactly one line on stderr naming the file and the problem, and exit code 2; never a traceback
(which exits 1, the CI-gate code); an input that can be analysed gets a report that says what was odd."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from badcorpus import CASES, FOUND
from privileges import UNPRIVILEGED

TIMEOUT = 120  # a case that hangs (a FIFO, a bomb, a rule loop) fails here instead of hanging CI


def perfsleuth(argv, cwd: Path, unprivileged=False, prefix=()):
    return subprocess.run([*(UNPRIVILEGED if unprivileged else []), *prefix, sys.executable, "-m", "perfsleuth",
                           *argv], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)


def _run_case(case, root: Path):
    folder = root / case.name
    folder.mkdir()
    folder.chmod(0o755)
    argv, names = case.make(folder)
    try:
        return perfsleuth(argv, folder, case.unprivileged, case.prefix), names
    except subprocess.TimeoutExpired as exc:
        return exc, names
    finally:
        for p in folder.rglob("*"):  # the cases lock folders; let pytest clean up
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Every case, run a few at a time (each is a process of its own): {name: (process, file to name)}."""
    root = tmp_path_factory.mktemp("corpus")
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        futures = {c.name: pool.submit(_run_case, c, root) for c in CASES}
    return {name: f.result() for name, f in futures.items()}


def check_promise(proc, expect: int, text: str = "", names: Path = None, absent: str = ""):
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == expect, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    if expect == 2:
        assert proc.stderr.count("\n") == 1, proc.stderr  # exactly one line
        line = proc.stderr.rstrip("\n")
        assert line.startswith("perfsleuth: error: "), line
        assert text in line, line
        if names is not None:
            assert str(names) in line, line
    else:
        assert text in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not [ch for ch in proc.stdout + proc.stderr if ord(ch) < 32 and ch not in "\n\t"], "raw control characters"
    assert not absent or absent not in proc.stdout + proc.stderr, (absent, proc.stdout[-2000:], proc.stderr[-2000:])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_case(outcomes, case):
    proc, names = outcomes[case.name]
    assert not isinstance(proc, subprocess.TimeoutExpired), f"{case.name}: no answer in {TIMEOUT} s"
    check_promise(proc, case.expect, case.text, names, case.absent)


def test_examples_the_fuzzers_found(tmp_path):
    """What the fuzzers once broke (tests/helpers/corpus/found/): now exit 0, or 2 with one line. A report goes
    to diff, a pyproject.toml or a rule file is used on a small trace, anything else is analysed."""
    from badcorpus import _good_trace

    found = sorted(p for p in FOUND.iterdir() if p.name != "README.md")
    trace = _good_trace(tmp_path)
    for path in found:
        if path.name.startswith("pyproject"):
            (tmp_path / "pyproject.toml").write_bytes(path.read_bytes())
            argv = ["analyze", str(trace)]
        elif path.suffix == ".toml":
            argv = ["analyze", str(trace), "--rules", str(path)]
        elif path.name.startswith("report"):
            argv = ["diff", str(trace), str(path)]
        else:
            argv = ["analyze", str(path)]
        proc = perfsleuth(argv, tmp_path)
        (tmp_path / "pyproject.toml").unlink(missing_ok=True)
        assert proc.returncode in (0, 2), (path.name, proc.stderr)
        check_promise(proc, proc.returncode)
    assert (FOUND / "README.md").is_file()
