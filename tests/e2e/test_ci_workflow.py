"""docs/ci.md's long-form workflow (the fallback to the action): it parses, has the steps the docs promise, uses
options the CLI really has, and its shell steps work: they are run here with the real CLI and a stand-in `gh`."""

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from perfsleuth.cli.main import main
from perfsleuth.render.diff_view import MAX_CHARS

DOC = Path(__file__).resolve().parents[2] / "docs" / "ci.md"
GITHUB_COMMENT_LIMIT = 65_536
CONTROL, TEST = "a100_trace_diff_control.json.gz", "v100_trace_diff_test.json.gz"
# a CPU run (the runner docs/ci.md shows): the loader is the bottleneck, the DataLoader has no workers
LOADER_BOUND = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "cpu" / "dataloader_starved.pt.trace.json.gz"


def _blocks(lang):
    return re.findall(rf"^```{lang}\n(.*?)^```$", DOC.read_text(encoding="utf-8"), re.S | re.M)


@pytest.fixture(scope="module")
def workflow():
    """The long form (the fallback after the action, whose own test is tests/e2e/test_action.py)."""
    blocks = _blocks("yaml")
    assert len(blocks) == 2, "docs/ci.md holds two ```yaml blocks: the workflow with the action, then the long form"
    assert "/perfsleuth@" in blocks[0] and "Profile the base branch" in blocks[1]
    return yaml.safe_load(blocks[1])


@pytest.fixture(scope="module")
def steps(workflow):
    return {s["name"]: s for s in workflow["jobs"]["profile"]["steps"]}


def _step_with(steps, text):
    found = [s for s in steps.values() if text in s.get("run", "") or text in s.get("uses", "")]
    assert len(found) == 1, f"one step with {text!r}, found {len(found)}"
    return found[0]


def test_workflow_shape(workflow, steps):
    assert workflow["name"] == "perfsleuth"
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert "pull_request" in on
    assert workflow["permissions"] == {"contents": "read", "pull-requests": "write"}
    assert list(steps) == [
        "Check out the pull request", "Check out the base branch", "Set up Python",
        "Install perfsleuth and the training code's requirements", "Profile the base branch",
        "Profile the pull request", "Compare with the base branch", "Check banned bottlenecks",
        "Upload the HTML report", "Write the job summary", "Post the PR comment",
        "Fail on a regression or a banned bottleneck"]


def test_workflow_profiles_both_sides(steps):
    base = steps["Check out the base branch"]
    assert base["uses"] == "actions/checkout@v4"
    assert base["with"] == {"ref": "${{ github.event.pull_request.base.sha }}", "path": "base"}
    assert steps["Profile the base branch"]["working-directory"] == "base"
    assert "-o ../prof-base" in steps["Profile the base branch"]["run"]
    assert "-o prof-head" in steps["Profile the pull request"]["run"]



def test_workflow_installs_perfsleuth_from_its_repository_and_torch_for_the_cpu(workflow, steps):
    """perfsleuth is not on a package index: a name like `perfsleuth[run]` cannot be installed, and its torch
    extra would pull the CUDA build onto a CPU runner."""
    from packaging.requirements import Requirement

    lines = [line.strip() for line in steps["Install perfsleuth and the training code's requirements"]["run"].splitlines()
             if line.strip() and not line.strip().startswith("#")]
    assert lines == ["pip install torch --index-url https://download.pytorch.org/whl/cpu",
                     "pip install -r requirements.txt", 'pip install "perfsleuth @ ${PERFSLEUTH_SOURCE}"']
    source = workflow["env"]["PERFSLEUTH_SOURCE"]
    req = Requirement(f"perfsleuth @ {source}")
    assert req.name == "perfsleuth" and req.url.startswith("git+https://") and not req.extras
    assert "perfsleuth[" not in DOC.read_text()


def test_workflow_publishes_even_when_a_gate_fails(steps):
    upload = _step_with(steps, "actions/upload-artifact")
    assert upload["if"] == "always()"
    assert "prof-head/report.html" in upload["with"]["path"].split()
    summary = steps["Write the job summary"]
    assert summary["if"] == "always()"
    assert '>> "$GITHUB_STEP_SUMMARY"' in summary["run"] and "prof-head/summary.md" in summary["run"]
    comment = steps["Post the PR comment"]
    assert comment["if"] == "always()" and comment["continue-on-error"] is True
    assert comment["env"] == {"GH_TOKEN": "${{ github.token }}", "PR": "${{ github.event.pull_request.number }}"}
    assert 'gh pr comment "$PR" --body-file comment.md' in comment["run"]
    # the gates record their exit code, and the job fails only in the last step
    for name in ("Compare with the base branch", "Check banned bottlenecks"):
        assert steps[name]["run"].startswith("set +e\n")
        assert steps[name]["run"].rstrip().endswith('echo "exit=$?" >> "$GITHUB_OUTPUT"')
    last = steps["Fail on a regression or a banned bottleneck"]
    assert last["if"] == "steps.diff.outputs.exit != '0' || steps.gates.outputs.exit != '0'"
    assert last["run"].rstrip().endswith("exit 1")
    assert (steps["Compare with the base branch"]["id"], steps["Check banned bottlenecks"]["id"]) == ("diff", "gates")


def _perfsleuth_commands(text):
    """Every `perfsleuth ...` command in a shell text (continuation lines joined), as argv lists."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        for part in line.split(" # ")[0].split("&&"):
            part = part.strip().strip("()").strip()
            if part.startswith("perfsleuth "):
                out.append(shlex.split(part)[1:])
    return out


def test_every_perfsleuth_command_in_the_doc_parses(workflow):
    shell = "\n".join(s.get("run", "") for s in workflow["jobs"]["profile"]["steps"])
    shell += "\n" + "\n".join(_blocks("sh"))
    commands = _perfsleuth_commands(shell)
    assert sorted({c[0] for c in commands}) == ["analyze", "diff", "run"]
    assert len(commands) == 8  # 4 in the workflow, 4 in the quick start
    for argv in commands:
        cmd = main.get_command(None, argv[0])  # `run` is loaded lazily (cli/main.py LazyGroup)
        ctx = cmd.make_context(argv[0], argv[1:])  # raises on an option the CLI does not have
        if argv[0] == "diff":
            assert ctx.params["regression"] == ("10%",) and ctx.params["markdown_path"] == "diff.md"
            assert ctx.params["json_path"] == "diff.json"
        if argv[0] == "analyze":  # gates a CPU runner can trip (no sync, no item-sync without a GPU)
            assert ctx.params["fail_on"] == ("dataloader-bound,num-workers",)


# ---------------------------------------------------------------- the shell steps, run for real


@pytest.fixture()
def job(tmp_path, real_traces):
    """A job folder as the workflow leaves it after profiling, and an environment with a perfsleuth
    on PATH (the CLI of this checkout) and a stand-in `gh` that records what it would post."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "perfsleuth", f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m perfsleuth "$@"\n')
    _script(bin_dir / "gh", '#!/bin/sh\necho "$@" >> "$GH_LOG"\n'
                            'case " $* " in *" --edit-last "*) exit 1;; esac\n'  # no earlier comment yet
                            'while [ $# -gt 0 ]; do [ "$1" = --body-file ] && cp "$2" "$POSTED"; shift; done\n')
    work = tmp_path / "work"
    for side, trace in (("prof-base", CONTROL), ("prof-head", TEST)):
        (work / side).mkdir(parents=True)
        shutil.copy(real_traces / trace, work / side / "trace.pt.trace.json.gz")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GITHUB_OUTPUT": str(tmp_path / "out"),
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"), "GH_LOG": str(tmp_path / "gh.log"),
           "POSTED": str(tmp_path / "posted.md"), "PR": "42", "GH_TOKEN": "t", "LC_ALL": "C.UTF-8"}
    return work, env, tmp_path


def _script(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run_step(step, work, env):
    # GitHub runs `run:` with `bash --noprofile --norc -eo pipefail {0}`
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)


def test_compare_step_records_the_gate_and_writes_the_comment(steps, job):
    work, env, tmp = job
    p = _run_step(steps["Compare with the base branch"], work, env)
    assert p.returncode == 0, p.stderr  # the gate's exit code is recorded, the step itself passes
    assert (tmp / "out").read_text() == "exit=1\n"  # +52 % between the A100 and the V100 run
    assert "gate failed: step time +52.0%" in p.stderr
    diff_md = (work / "diff.md").read_text()
    assert len(diff_md) < MAX_CHARS
    assert json.loads((work / "diff.json").read_text())["verdict"]["changed"] is True


def test_banned_bottleneck_step(steps, job):
    """The documented gates trip on a CPU run that the loader starves (fixtures/traces/cpu, recorded here)."""
    work, env, tmp = job
    shutil.copy(LOADER_BOUND, work / "prof-head" / "trace.pt.trace.json.gz")
    p = _run_step(steps["Check banned bottlenecks"], work, env)
    assert p.returncode == 0, p.stderr
    assert (tmp / "out").read_text() == "exit=1\n"
    assert p.stderr == ("perfsleuth: gate failed: verdict dataloader-bound (--fail-on dataloader-bound); "
                        "finding num-workers (--fail-on num-workers)\n")


def test_summary_and_comment_steps(steps, job):
    work, env, tmp = job
    (work / "diff.md").write_text("### perfsleuth diff: small\n")
    (work / "prof-head" / "summary.md").write_text("### perfsleuth: `kernel-bound`\n")
    assert _run_step(steps["Write the job summary"], work, env).returncode == 0
    assert (tmp / "summary").read_text() == "### perfsleuth diff: small\n\n### perfsleuth: `kernel-bound`\n"
    p = _run_step(steps["Post the PR comment"], work, env)
    assert p.returncode == 0, p.stderr
    assert (tmp / "gh.log").read_text() == ("pr comment 42 --body-file comment.md --edit-last\n"
                                            "pr comment 42 --body-file comment.md\n")
    assert (tmp / "posted.md").read_text() == (
        "### perfsleuth diff: small\n\n<details><summary>Full report of this pull request</summary>\n\n"
        "### perfsleuth: `kernel-bound`\n\n</details>\n")


def test_comment_stays_within_githubs_limit(steps, job):
    """Both parts near their 60,000-character cap: the comment falls back to the diff alone."""
    work, env, tmp = job
    diff_md = ("→" * 99 + "\n") * 595  # 59,500 characters, 119,000 bytes
    (work / "diff.md").write_text(diff_md, encoding="utf-8")
    (work / "prof-head" / "summary.md").write_text(("µ" * 99 + "\n") * 590, encoding="utf-8")  # 59,000 chars
    p = _run_step(steps["Post the PR comment"], work, env)
    assert p.returncode == 0, p.stderr
    posted = (tmp / "posted.md").read_text(encoding="utf-8")
    assert posted == diff_md
    assert len(posted) < GITHUB_COMMENT_LIMIT


def test_real_comment_is_within_the_limit(steps, job):
    """The comment the workflow would post for the real trace pair (diff + the head's summary.md)."""
    work, env, tmp = job
    assert _run_step(steps["Compare with the base branch"], work, env).returncode == 0
    r = subprocess.run([sys.executable, "-m", "perfsleuth.cli.main", "analyze", "prof-head/trace.pt.trace.json.gz",
                        "--markdown", "prof-head/summary.md"], cwd=work, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert _run_step(steps["Post the PR comment"], work, env).returncode == 0
    posted = (tmp / "posted.md").read_text(encoding="utf-8")
    assert posted.startswith("### perfsleuth diff: median step **+52.0%** (▲ regression)")
    assert "<details><summary>Full report of this pull request</summary>" in posted
    assert len(posted) < GITHUB_COMMENT_LIMIT
