"""The package shows its pipeline (docs/architecture.md): one subpackage per stage, a docstring on
each, small modules, and imports that run one way only (import-linter's layers contract in
pyproject.toml). The contract is run on the real package, and on a copy with one upward import
added, which it must refuse: a check that cannot fail proves nothing."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "analyzer"
STAGES = ("trace", "analysis", "facts", "engine", "report", "commands")
TOP_LEVEL = {"__init__.py", "__main__.py", "api.py", "config.py", "errors.py", "version.py"}
MAX_LINES = 400


def _lint(root: Path, package_parent: Path) -> subprocess.CompletedProcess:
    """lint-imports with the contract of `root`/pyproject.toml, importing `perfsleuth` from `package_parent`."""
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    code = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_stages_import_downward_only():
    done = _lint(ROOT, ROOT / "build-does-not-exist")  # the installed package
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


@pytest.mark.parametrize("module, upward", [
    ("trace/model.py", "from ..report import model as _upward"),
    ("facts/host.py", "from ..engine import catalog as _upward"),
    ("analysis/steps.py", "from ..commands import cli as _upward"),
])
def test_an_upward_import_breaks_the_contract(tmp_path, module, upward):
    copy = tmp_path / "src" / "perfsleuth"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    target.write_text(target.read_text() + f"\n{upward}\n")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    done = _lint(tmp_path, tmp_path / "src")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "0 kept, 1 broken" in done.stdout
    importer = "perfsleuth." + module.removesuffix(".py").replace("/", ".")
    assert importer in done.stdout


def test_the_contract_lists_every_stage_once():
    layers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]["layers"]
    assert layers[:7] == [f"perfsleuth.{s}" for s in
                          ("commands", "api", "engine", "report", "facts", "analysis", "trace")]


def test_top_level_holds_only_the_front_door_and_the_base():
    files = {p.name for p in PACKAGE.glob("*.py")}
    assert files == TOP_LEVEL
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(STAGES)


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_says_what_it_takes_and_gives(stage):
    doc = ast.get_docstring(ast.parse((PACKAGE / stage / "__init__.py").read_text()))
    assert doc and "takes" in doc and "gives" in doc, stage


def test_modules_stay_small():
    big = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
           if (n := len(p.read_text().splitlines())) >= MAX_LINES}
    assert not big, f"modules of {MAX_LINES} lines or more: {big}"
