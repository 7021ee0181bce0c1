"""action.yml, the GitHub Action of docs/ci.md, run here step by step (tests/helpers/ghaction.py) as a runner would:
perfsleuth installed by the action's own step into a fresh venv, a toy git repository with a base and a head
commit, a stand-in `gh` on PATH that records what it would post, and the inputs docs/ci.md shows.

The toy is a small real training script whose batches take DELAY seconds each to load (one sleep, as I/O
is): its step time follows DELAY closely even on a busy machine, which delays each wake-up by a little. A step
is the load and about 1.5 ms beside it, so a pull request that raises DELAY from 30 to 39.5 ms slows the step
by 30 % (issue 29). The assertions are on exit codes and calls, never on times.
"""

import json
import re
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ghaction import evaluate, load, run_action, runner_env

ROOT = Path(__file__).resolve().parents[2]
ACTION = load(ROOT / "action.yml")
SOURCES = ("analyzer", "rules", "templates", "docs", "README.md", "pyproject.toml", "MANIFEST.in", "action.yml")
INSTALL = "Install perfsleuth"

TRAIN = '''\
"""A toy training loop: each batch takes DELAY seconds to load (decoding, I/O), a small MLP learns on it."""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

DELAY = {delay}  # seconds per batch


class Batches(Dataset):
    def __init__(self, batch_size):
        self.batch_size = batch_size

    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        time.sleep(DELAY)
        return torch.randn(self.batch_size, 32), torch.randint(0, 4, (self.batch_size,))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(Batches(args.batch_size), batch_size=None):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


if __name__ == "__main__":
    main()
'''


def documented_inputs() -> dict:
    """The `with:` of the perfsleuth step of docs/ci.md's first workflow: what a user copies."""
    doc = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    workflow = __import__("yaml").safe_load(re.findall(r"^```yaml\n(.*?)^```$", doc, re.S | re.M)[0])
    [step] = [s for j in workflow["jobs"].values() for s in j["steps"] if "/perfsleuth@" in s.get("uses", "")]
    return {k: str(v) for k, v in step["with"].items()}


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    """A fresh venv, first on PATH, into which the action's own install step put perfsleuth (from a copy of
    the checkout: the action's folder); the venv sees this interpreter's packages (torch, pandas, ...) through
    a .pth file, so the install needs no download beyond the build backend. And a stand-in `gh`."""
    tmp = tmp_path_factory.mktemp("runner")
    action_path = tmp / "perfsleuth-action"
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, action_path / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, action_path / name)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    purelib = subprocess.run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    deps = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    Path(purelib, "deps.pth").write_text("".join(f"{p}\n" for p in deps))
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    # `gh api .../comments` lists the comments as the --jq filter would print them: the ids in $GH_COMMENTS
    # whose body starts with the marker asked for (none: no earlier comment)
    _script(bin_dir / "gh", '#!/bin/sh\necho "$@" >> "$GH_LOG"\n'
                            'case " $* " in *" GET "*|*"/comments --paginate "*) '
                            'cat "${GH_COMMENTS:-/dev/null}"; exit 0;; esac\n'
                            'while [ $# -gt 0 ]; do [ "$1" = --body-file ] && cp "$2" "$POSTED"; '
                            'case "$1" in body=@*) cp "${1#body=@}" "$POSTED";; esac; shift; done\n')
    env = runner_env(tmp, [venv / "bin", bin_dir])
    workspace = tmp / "empty"
    workspace.mkdir()
    done = run_action(ACTION, action_path, {"script": "x.py"}, {}, workspace, env,
                      skip=tuple(s["name"] for s in ACTION["runs"]["steps"] if s["name"] != INSTALL))
    assert done.outcomes[INSTALL] == "success", done.logs[INSTALL][-3000:]
    where = subprocess.run(["perfsleuth", "--version"], env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith("perfsleuth, version ")
    installed = subprocess.run(["python", "-c", "import perfsleuth; print(perfsleuth.__file__)"], env=env, cwd=tmp,
                               capture_output=True, text=True, check=True).stdout.strip()
    assert Path(installed).is_relative_to(venv)  # the action's install, not the checkout's editable one
    return action_path, venv, bin_dir


def _repo(tmp: Path, head_delay: float) -> tuple:
    """A repository with a base commit (DELAY 30 ms per batch) and a head commit on top, checked out."""
    repo = tmp / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run(git + ["init", "-q"], check=True)
    (repo / "train.py").write_text(TRAIN.format(delay="0.03"))
    subprocess.run(git + ["add", "train.py"], check=True)
    subprocess.run(git + ["commit", "-qm", "base"], check=True)
    base = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    text = TRAIN.format(delay=repr(head_delay)).replace("a small MLP learns", "a small MLP (2 layers) learns")
    (repo / "train.py").write_text(text)
    subprocess.run(git + ["commit", "-qam", "head"], check=True)
    return repo, base


def _act(runner, tmp, head_delay):
    action_path, venv, bin_dir = runner
    repo, base = _repo(tmp, head_delay)
    env = runner_env(tmp, [venv / "bin", bin_dir], GH_LOG=str(tmp / "gh.log"), POSTED=str(tmp / "posted.md"))
    github = {"event": {"pull_request": {"number": 42, "base": {"sha": base}}}, "token": "t", "repository": "o/r"}
    done = run_action(ACTION, action_path, documented_inputs(), github, repo, env, skip=(INSTALL,))
    return done, repo, tmp


def test_the_documented_action_fails_a_pull_request_that_slows_the_step_by_30_percent(runner, tmp_path):
    done, repo, tmp = _act(runner, tmp_path, head_delay=0.0395)
    logs = "\n".join(f"--- {k}\n{v[-2500:]}" for k, v in done.logs.items())
    out = Path(done.steps["setup"]["outputs"]["dir"])
    assert out.is_relative_to(tmp / "runner-temp")  # the runner's temporary folder, never the repository
    assert done.steps["diff"]["outputs"]["exit"] == "1", logs  # the regression gate tripped
    assert re.search(r"gate failed: step time \+\d+\.\d%", done.logs["Compare with the base commit"]), logs
    diff = json.loads((out / "diff.json").read_text())
    st = diff["step_time"]
    assert (st["call"], st["basis"]) == ("regression", "unprofiled")
    assert st["base"]["n"] >= 17 and st["head"]["n"] >= 17  # --measure 20 on each side, less warm-up steps
    # the documented banned bottlenecks are ones a CPU runner sees: this loader-bound toy trips them
    assert done.steps["gates"]["outputs"]["exit"] == "1", logs
    assert done.outcomes["Fail on a regression or a banned bottleneck"] == "failure"
    assert "perfsleuth diff exited 1, perfsleuth analyze exited 1" in done.logs["Fail on a regression or a banned bottleneck"]
    # published before failing: the job summary, the comment (a new one: no earlier comment to edit), the upload
    assert [o for n, o in done.outcomes.items() if n != "Fail on a regression or a banned bottleneck"] == [
        "skipped", *["success"] * 5, "uses", *["success"] * 3]
    posted = (tmp / "posted.md").read_text(encoding="utf-8").splitlines()
    assert posted[0] == "<!-- perfsleuth: perfsleuth-train.py -->"  # the hidden marker: this use's comment
    assert posted[1].startswith("### perfsleuth diff: median step without the profiler **+")
    assert "(▲ regression)" in posted[1]
    assert "<details><summary>Full report of this pull request</summary>" in posted
    comment = f"--body-file {out}/comment.md"
    assert (tmp / "gh.log").read_text() == (
        'api repos/o/r/issues/42/comments --paginate --jq .[] | select(.body | startswith("'
        '<!-- perfsleuth: perfsleuth-train.py -->")) | .id\n'
        f"pr comment 42 {comment}\n")
    assert (tmp / "step-summary.md").read_text(encoding="utf-8").startswith(posted[1])
    assert done.uses == [("Upload the reports", "actions/upload-artifact@v4",
                          {"name": "perfsleuth-train.py", "path": str(out), "if-no-files-found": "warn"})]
    assert sorted(p.name for p in out.iterdir()) == ["base", "comment.md", "diff.json", "diff.md", "head"]
    assert not Path(done.steps["setup"]["outputs"]["base"]).exists()  # the base checkout is removed
    assert not (repo / "perfsleuth-ci").exists()  # nothing written into the user's repository


def test_a_pull_request_that_does_not_slow_the_step_passes_the_regression_gate(runner, tmp_path):
    """The same toy, the head commit changing a comment only: the diff gate passes; the banned-bottleneck gate
    still fails the check (the toy's loader is the bottleneck on both sides), and says which gate it was."""
    done, repo, tmp = _act(runner, tmp_path, head_delay=0.03)
    logs = "\n".join(f"--- {k}\n{v[-2500:]}" for k, v in done.logs.items())
    assert done.steps["diff"]["outputs"]["exit"] == "0", logs  # (the call may say a few % either way: under 10 %)
    assert (Path(done.steps["setup"]["outputs"]["dir"]) / "diff.json").is_file()
    assert done.steps["gates"]["outputs"]["exit"] == "1"
    assert "perfsleuth diff exited 0, perfsleuth analyze exited 1" in done.logs["Fail on a regression or a banned bottleneck"]


def test_without_a_base_commit_it_says_so_in_one_line(tmp_path):
    """A push event (no pull request) and no base-ref: the set-up step fails with one error line; nothing runs
    after it but the final step's skip."""
    env = runner_env(tmp_path, [])
    workspace = tmp_path / "w"
    workspace.mkdir()
    done = run_action(ACTION, ROOT, {"script": "train.py"}, {"event": {}}, workspace, env, skip=(INSTALL,))
    assert done.outcomes["Check out the base commit"] == "failure"
    assert done.logs["Check out the base commit"].strip() == (
        "::error::perfsleuth: no base-ref to compare with (not a pull_request event? set base-ref)")
    assert {n for n, o in done.outcomes.items() if o != "skipped"} == {"Check out the base commit"}


def test_the_action_has_the_inputs_docs_ci_md_promises_and_keeps_them_out_of_its_scripts():
    assert ACTION["runs"]["using"] == "composite"
    assert {"script", "args", "base-ref", "fail-on", "fail-on-regression", "comment", "measure"} <= set(ACTION["inputs"])
    assert ACTION["inputs"]["base-ref"]["default"] == "${{ github.event.pull_request.base.sha }}"
    assert ACTION["inputs"]["measure"]["default"] == "20"
    for step in ACTION["runs"]["steps"]:
        # inputs reach the shell through env: an expression inside a script is spliced into it as code
        assert "${{" not in step.get("run", ""), step["name"]
        assert "uses" in step or step["shell"] == "bash"
    assert set(documented_inputs()) <= set(ACTION["inputs"])


def test_expressions_evaluate_as_on_github():
    ctx = {"inputs": {"comment": "true", "fail-on": ""}, "steps": {"diff": {"outputs": {"exit": "1"}}},
           "github": {"event": {"pull_request": {"number": 7}}}}
    assert evaluate("inputs.comment == 'true' && github.event.pull_request.number != ''", ctx) is True
    assert evaluate("inputs.fail-on != ''", ctx) is False
    assert evaluate("steps.diff.outputs.exit == '0' || steps.gates.outputs.exit == ''", ctx) is True
    assert evaluate("always() && !(inputs.comment == 'false')", ctx, failed=True) is True
    assert evaluate("success()", ctx, failed=True) is False


def test_run_words_are_split_as_a_shell_would_and_never_run():
    """The action's script arguments: quotes group words, and `$(...)` stays text."""
    [step] = [s for s in ACTION["runs"]["steps"] if s["name"] == "Profile the pull request"]
    words = step["run"].split("perfsleuth run", 1)[0] + 'printf "[%s]" "${args[@]}"\n'
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", words], capture_output=True,
                          text=True, env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "OPTIONS": "",
                                          "ARGS": textwrap.dedent("""--name 'a b' "$(touch pwned)" x;y""")},
                          cwd=str(Path(__file__).parent), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[--name][a b][$(touch pwned)][x;y]"
    assert not (Path(__file__).parent / "pwned").exists()
    bad = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", words], capture_output=True,
                         text=True, env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "OPTIONS": "",
                                         "ARGS": "--name 'a b"}, timeout=60)
    assert bad.returncode != 0 and "No closing quotation" in bad.stderr and bad.stdout == ""


def _setup_only(tmp: Path, inputs: dict, repo: Path, base: str):
    env = runner_env(tmp, [])
    github = {"event": {"pull_request": {"number": 42, "base": {"sha": base}}}, "token": "t", "repository": "o/r"}
    return run_action(ACTION, ROOT, inputs, github, repo, env,
                      skip=tuple(s["name"] for s in ACTION["runs"]["steps"] if s.get("id") != "setup"))


def test_the_set_up_keeps_the_users_perfsleuth_ci_folder_and_an_earlier_uses_reports(tmp_path):
    """Issue 38, class 4: the set-up step removed "$PWD/perfsleuth-ci" (a folder of the user's, committed or not)
    and a second use in one job removed the first one's reports. Each use now works in a fresh folder of its own
    under $RUNNER_TEMP, named in its outputs, and the artifact is named by the script (or the input)."""
    repo, base = _repo(tmp_path, head_delay=0.03)
    (repo / "perfsleuth-ci").mkdir()
    (repo / "perfsleuth-ci" / "committed.txt").write_text("mine")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo), "commit", "-qm", "ci"],
                   check=True)
    (repo / "perfsleuth-ci" / "uncommitted.txt").write_text("mine too")
    first = _setup_only(tmp_path, {"script": "sub dir/train.py"}, repo, base)
    assert first.outcomes["Check out the base commit"] == "success", first.logs
    out1 = Path(first.steps["setup"]["outputs"]["dir"])
    (out1 / "report.json").write_text("{}")  # what the first use wrote
    second = _setup_only(tmp_path, {"script": "train.py", "artifact-name": "perfsleuth py3.12"}, repo, base)
    out2 = Path(second.steps["setup"]["outputs"]["dir"])
    assert sorted(p.name for p in (repo / "perfsleuth-ci").iterdir()) == ["committed.txt", "uncommitted.txt"]
    assert (out1 / "report.json").read_text() == "{}" and out1 != out2
    assert out1.is_relative_to(tmp_path / "runner-temp") and out2.is_relative_to(tmp_path / "runner-temp")
    assert first.steps["setup"]["outputs"]["artifact"] == "perfsleuth-sub-dir-train.py"
    assert second.steps["setup"]["outputs"]["artifact"] == "perfsleuth-py3.12"
    assert Path(second.steps["setup"]["outputs"]["base"], "train.py").read_text().count("DELAY = 0.03") == 1


def test_a_base_ref_that_starts_with_a_dash_is_refused_and_never_reaches_git(tmp_path):
    """Issue 38, class 9: `--upload-pack=CMD` as base-ref was an option of `git fetch` and ran CMD against a
    local-path origin. Refused in one line; nothing runs."""
    repo, base = _repo(tmp_path, head_delay=0.03)
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(origin)], check=True)
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", str(origin)], check=True)
    pwned = tmp_path / "pwned"
    done = _setup_only(tmp_path, {"script": "train.py", "base-ref": f"--upload-pack=touch {pwned};false"},
                       repo, base)
    assert done.outcomes["Check out the base commit"] == "failure"
    assert done.logs["Check out the base commit"].strip() == (
        "::error::perfsleuth: base-ref must not start with '-' (got one that does)")
    assert not pwned.exists()
    # a ref the checkout lacks is fetched from origin, after `--`
    fetched = _setup_only(tmp_path, {"script": "train.py", "base-ref": "refs/heads/master"}, repo, base)
    branch = subprocess.run(["git", "-C", str(repo), "branch", "--show-current"], capture_output=True, text=True,
                            check=True).stdout.strip()
    if branch != "master":  # the default branch name depends on git's configuration
        fetched = _setup_only(tmp_path, {"script": "train.py", "base-ref": f"refs/heads/{branch}"}, repo, base)
    assert fetched.outcomes["Check out the base commit"] == "success", fetched.logs


def test_the_comment_step_edits_its_own_comment_and_no_other(runner, tmp_path):
    """Issue 38, class 5: `gh pr comment --edit-last` edited the last comment of the token's user (another matrix
    job's, another bot's). The step finds its own comment by a hidden marker naming the artifact and edits that
    one; without one it posts a new comment."""
    _, _, bin_dir = runner
    [step] = [s for s in ACTION["runs"]["steps"] if s["name"] == "Post the pull-request comment"]
    out = tmp_path / "out"
    out.mkdir()
    (out / "diff.md").write_text("### perfsleuth diff: median step **+1.0%**\n")
    ids = tmp_path / "ids"
    ids.write_text("1234\n")  # the filter's output: the id of the comment that starts with this use's marker
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(out), "GH_REPO": "o/r", "PR": "42",
           "ARTIFACT": "perfsleuth-py3.12", "GH_LOG": str(tmp_path / "gh.log"), "POSTED": str(tmp_path / "posted"),
           "GH_COMMENTS": str(ids)}
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "gh.log").read_text().splitlines()
    assert calls[0].startswith("api repos/o/r/issues/42/comments --paginate --jq ")
    assert '<!-- perfsleuth: perfsleuth-py3.12 -->' in calls[0]
    assert calls[1:] == [f"api -X PATCH repos/o/r/issues/comments/1234 -F body=@{out}/comment.md"]
    assert (tmp_path / "posted").read_text().splitlines()[:2] == [
        "<!-- perfsleuth: perfsleuth-py3.12 -->", "### perfsleuth diff: median step **+1.0%**"]
