"""The package shows its design (docs/architecture.md): one subpackage per capability, a docstring on
each, small modules, imports that run one way only (import-linter's layers contract in
pyproject.toml) and no import circle. Both checks run on the real package, and on a copy with one
upward import (or one circle) added, which they must refuse: a check that cannot fail proves nothing.
docs/architecture.md's tree and pyproject's package list are checked against the folders."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "analyzer"
STAGES = ("trace", "analysis", "facts", "engine", "report", "render", "record", "verify", "cli")
LAYERS = ("cli", "verify", "record", "api | render", "engine", "report", "facts", "analysis", "trace")
PACKAGES = sorted(str(p.parent.relative_to(PACKAGE)) for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE)
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
    ("analysis/steps.py", "from ..cli import main as _upward"),
    ("engine/evaluate.py", "from ..render import terminal as _upward"),  # the engine needs the document only
    ("record/paths.py", "from ..verify import stats as _upward"),
    ("render/terminal.py", "from .. import api as _upward"),  # api and the renderers are independent
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
    assert layers[:9] == [" | ".join(f"perfsleuth.{p}" for p in layer.split(" | ")) for layer in LAYERS]
    assert sorted(p for layer in LAYERS for p in layer.split(" | ") if p != "api") == sorted(STAGES)


_CIRCLES = """
import sys
import grimp

graph = grimp.build_graph("perfsleuth", cache_dir=None)
edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
order, low, stack, circles = {}, {}, [], []


def visit(v):  # Tarjan: strongly connected components of more than one module are circles
    order[v] = low[v] = len(order)
    stack.append(v)
    for w in edges[v]:
        if w not in order:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in stack:
            low[v] = min(low[v], order[w])
    if low[v] == order[v]:
        part = stack[stack.index(v):]
        del stack[stack.index(v):]
        if len(part) > 1:
            circles.append(sorted(part))


sys.setrecursionlimit(10_000)
for m in sorted(edges):
    if m not in order:
        visit(m)
print(circles)
"""


def _circles(package_parent: Path) -> list:
    """The import circles of the package (lazy imports inside functions count: grimp reads them all)."""
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    done = subprocess.run([sys.executable, "-c", _CIRCLES], env=env, capture_output=True, text=True, timeout=120,
                          cwd=package_parent if package_parent.exists() else ROOT)
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout.strip())


def test_the_package_has_no_import_circle():
    assert _circles(ROOT / "build-does-not-exist") == []  # the installed package


def test_an_import_circle_is_found(tmp_path):
    copy = tmp_path / "src" / "perfsleuth"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "analysis" / "forecast" / "registry.py"  # the models import it: importing one back is a circle
    target.write_text(target.read_text() + "\nfrom .models import host as _back\n")
    assert _circles(tmp_path / "src") == [["perfsleuth.analysis.forecast.models.host",
                                          "perfsleuth.analysis.forecast.registry"]]


def test_pyproject_installs_every_package():
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert sorted(p for p in listed if p.count(".") and p.split(".")[1] not in ("rules", "templates", "docs")) \
        == sorted("perfsleuth." + p.replace("/", ".") for p in PACKAGES)


def _documented_tree() -> list:
    """The package folders drawn in docs/architecture.md's tree (the first fenced block after "## The tree")."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## The tree", 1)[1].split("```", 2)[1]
    folders, path = [], []
    for line in block.splitlines()[1:]:
        name = line.split("#", 1)[0].rstrip()
        if not name.strip():
            continue
        depth = (len(name) - len(name.lstrip(" │├└─"))) // 4
        name = name.strip(" │├└─")
        path[depth:] = [name.rstrip("/")]
        if name.endswith("/") and depth > 0:
            folders.append("/".join(path[1:]))
    return folders


def test_the_documented_tree_matches_the_package():
    assert sorted(_documented_tree()) == PACKAGES


def test_top_level_holds_only_the_front_door_and_the_base():
    files = {p.name for p in PACKAGE.glob("*.py")}
    assert files == TOP_LEVEL
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(STAGES)


@pytest.mark.parametrize("stage", PACKAGES)
def test_each_stage_says_what_it_takes_and_gives(stage):
    doc = ast.get_docstring(ast.parse((PACKAGE / stage / "__init__.py").read_text()))
    assert doc and "takes" in doc and "gives" in doc, stage


def test_modules_stay_small():
    big = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
           if (n := len(p.read_text().splitlines())) >= MAX_LINES}
    assert not big, f"modules of {MAX_LINES} lines or more: {big}"
