"""The wheel a user installs: `python -m build` makes an sdist and a wheel (built from that sdist) holding
the rules, templates and guides; installed into a fresh virtual environment outside the checkout, its
`perfsleuth` analyses the bundled example, lists the rules, prints a guide and says the version it was
built with -- run from another folder, where nothing of the checkout is on the path.

The sources are copied and given a version of their own first: the version is defined once
(analyzer/version.py), so the wheel's name, its metadata and `perfsleuth --version` must all follow it.
The fresh venv gets no network: the wheel goes in with --no-deps and --no-index, and a .pth file puts the
dependencies this interpreter already has (pandas, click, jinja2, ...) on its path.
"""

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "fixtures" / "traces" / "cpu" / "dataloader_starved.pt.trace.json.gz"
VERSION = "0.1.0.dev29"  # not the checkout's own: the test sees which definition the build reads
SOURCES = ("analyzer", "rules", "templates", "docs", "README.md", "pyproject.toml", "MANIFEST.in")


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src") / "perfsleuth"
    for name in SOURCES:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(
            ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if (ROOT / name).is_dir() else {}))
    (src / "analyzer" / "version.py").write_text(f'__version__ = "{VERSION}"\n')
    out = src.parent / "dist"
    # from outside the checkout: a build/ folder there (setuptools leaves one) would shadow the build module
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(src)], capture_output=True,
                          text=True, timeout=600, cwd=src.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> Path:
    """A fresh venv outside the checkout with the wheel installed, and nothing else of perfsleuth."""
    place = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(place)], check=True, timeout=300)
    py = place / "bin" / "python"
    purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # the dependencies this interpreter has; a .pth line adds a folder, not the .pth files in it, so an
    # editable perfsleuth of the checkout that lives there (its import hook is a .pth) stays out
    deps = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    Path(purelib, "deps.pth").write_text("".join(f"{p}\n" for p in deps))
    [wheel] = dist.glob("*.whl")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
                           "-q", str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return place


def _perfsleuth(venv, *args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    return subprocess.run([str(venv / "bin" / "perfsleuth"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_build_makes_an_sdist_and_a_wheel_named_by_the_version(dist):
    assert sorted(p.name for p in dist.iterdir()) == [f"perfsleuth-{VERSION}-py3-none-any.whl",
                                                       f"perfsleuth-{VERSION}.tar.gz"]
    with tarfile.open(dist / f"perfsleuth-{VERSION}.tar.gz") as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"pyproject.toml", "README.md", "analyzer/api.py", "rules/sync.toml",
            "templates/report.html.j2", "docs/run.md"} <= names
    assert not any(n.startswith(("tests/", "fixtures/")) for n in names)  # the tests run from a clone


def test_the_wheel_holds_the_rules_templates_and_guides(dist):
    [wheel] = dist.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, suffix in (("rules", ".toml"), ("templates", ".j2"), ("docs", ".md")):
        shipped = sorted(p.name for p in (ROOT / folder).iterdir() if p.suffix == suffix)
        assert shipped and all(f"perfsleuth/{folder}/{name}" in names for name in shipped), folder
    assert {"perfsleuth/templates/report.css", "perfsleuth/templates/report.js"} <= names
    metadata = zipfile.ZipFile(wheel).read(f"perfsleuth-{VERSION}.dist-info/METADATA").decode()
    assert f"\nVersion: {VERSION}\n" in metadata
    assert "perfsleuth = perfsleuth.cli.main:main" in zipfile.ZipFile(wheel).read(
        f"perfsleuth-{VERSION}.dist-info/entry_points.txt").decode()


def test_the_installed_wheel_works_from_another_folder(venv, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run([venv / "bin" / "python", "-c", "import perfsleuth; print(perfsleuth.__file__)"],
                           cwd=elsewhere, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(venv)  # the wheel's package, not the checkout's

    version = _perfsleuth(venv, "--version", cwd=elsewhere)
    assert (version.returncode, version.stdout) == (0, f"perfsleuth, version {VERSION}\n")

    shutil.copy(EXAMPLE, elsewhere / EXAMPLE.name)  # the README's example trace
    analyzed = _perfsleuth(venv, "analyze", EXAMPLE.name, "-o", "out", cwd=elsewhere)
    assert analyzed.returncode == 0, analyzed.stderr
    assert analyzed.stdout.startswith(f"perfsleuth {VERSION} — {EXAMPLE.name}\n")
    assert "verdict: DATALOADER-BOUND (high)" in analyzed.stdout and "[high] num-workers" in analyzed.stdout
    assert sorted(p.name for p in (elsewhere / "out").iterdir()) == ["report.html", "report.json", "summary.md"]
    assert "<style>" in (elsewhere / "out" / "report.html").read_text()  # the templates and their CSS

    rules = _perfsleuth(venv, "rules", cwd=elsewhere)
    assert rules.returncode == 0 and "num-workers" in rules.stdout and "item-sync" in rules.stdout

    guide = _perfsleuth(venv, "docs", "run", cwd=elsewhere)
    assert guide.returncode == 0 and guide.stdout == (ROOT / "docs" / "run.md").read_text(encoding="utf-8") + "\n"
