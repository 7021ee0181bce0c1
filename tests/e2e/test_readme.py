"""README.md as a new user meets it: its main command, its sample output, its test command."""

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
spec = importlib.util.spec_from_file_location("readme_sample", ROOT / "scripts" / "readme_sample.py")
readme_sample = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_sample)


def sh_blocks() -> list:
    return re.findall(r"^```sh\n(.*?)^```$", README, re.S | re.M)


def main_command() -> str:
    return sh_blocks()[0].strip()


def test_the_main_command_makes_a_virtual_environment_and_analyses_the_example():
    parts = [p.strip() for p in main_command().split("&&")]
    assert parts[:3] == ["python3 -m venv .venv", ". .venv/bin/activate", "pip install -e ."]
    assert parts[3].startswith("perfsleuth analyze fixtures/")
    command, _, _ = readme_sample.sample(README)
    assert command == parts[3]  # the sample shows what the main command prints


def test_the_sample_output_is_what_the_example_command_prints():
    """Run the README's example for real; only trailing spaces and the version may differ. When the analysis
    changes, `python scripts/readme_sample.py` regenerates the sample."""
    command, shown, _ = readme_sample.sample(README)
    done = subprocess.run([sys.executable, "-m", "perfsleuth", *shlex.split(command)[1:]], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    printed = readme_sample.normalised(done.stdout)
    assert readme_sample.normalised(shown) == printed
    assert printed.startswith("perfsleuth VERSION — fixtures/traces/cpu/dataloader_starved.pt.trace.json.gz\n")
    assert len(printed.splitlines()) == len(shown.splitlines()) >= 15


def test_the_normalisation_hides_only_the_version_and_trailing_spaces():
    a = "perfsleuth 0.1.0 — x\ncategory   share  \nkernel 1.1%  \n"
    assert readme_sample.normalised(a) == readme_sample.normalised("perfsleuth 0.2.3 — x\ncategory   share\nkernel 1.1%\n")
    assert readme_sample.normalised(a) != readme_sample.normalised("perfsleuth 0.1.0 — x\ncategory   share\nkernel 1.2%\n")
    assert readme_sample.normalised(a) != readme_sample.normalised("perfsleuth 0.1.0 — y\ncategory   share\nkernel 1.1%\n")


def test_the_main_command_can_be_run_again_and_writes_nothing():
    argv = shlex.split(main_command().split("&&")[-1])
    before = sorted(p.name for p in ROOT.iterdir())
    outputs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "perfsleuth", *argv[1:]], cwd=ROOT, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    assert sorted(p.name for p in ROOT.iterdir()) == before


def test_the_readme_test_command_is_what_ci_runs():
    assert "bash scripts/test.sh" in sh_blocks()[1]
    assert "\nbash scripts/test.sh -q\n" in (ROOT / ".ci" / "run").read_text()
    assert "python3 scripts/install_torch.py\n" in (ROOT / "scripts" / "test.sh").read_text()


def test_the_rule_list_is_the_catalogues():
    """The README lists every rule of the catalogue, generated (`python scripts/readme_sample.py` rewrites it)."""
    listed, generated, _, _ = readme_sample.rule_list(README)
    assert listed == generated
    from perfsleuth.engine.catalog import load_catalog

    slugs = [r.slug for r in load_catalog(())]
    assert len(slugs) >= 17 and all(f"`{s}`" in listed for s in slugs)


def _option_names(command) -> set:
    return {name for p in command.params for name in (*p.opts, *p.secondary_opts)}


def test_the_command_table_is_true_to_each_command():
    """Each row names only options its command has, says which it lacks ("no `-o`"), and names every file it
    can write."""
    from perfsleuth.cli.main import main

    rows = [line for line in README.splitlines() if line.startswith("| `perfsleuth ")]
    assert [r.split("`")[1].split()[1] for r in rows] == ["analyze", "run", "run", "diff", "rules", "docs"]
    for row in rows:
        name = row.split("`")[1].split()[1]
        have = _option_names(main.get_command(None, name))
        lacks = set(re.findall(r"no `(-[\w-]+)`", row))
        named = set(re.findall(r"(?<![\w-])(-o|--[a-z][a-z-]+)\b", re.sub(r"no `-[\w-]+`", "", row)))
        assert named <= have, (name, named - have)
        assert not lacks & have, (name, lacks & have)
        outputs = {"-o", "--html", "--markdown", "--json"} & have
        writes = row.rsplit("|", 2)[1].strip()
        if writes != "as `run`":  # run --verify's row
            assert all(o in writes for o in outputs), (name, outputs, writes)
    diff = next(r for r in rows if "`perfsleuth diff" in r)
    assert "no `-o`" in diff and "-o" not in _option_names(main.get_command(None, "diff"))
