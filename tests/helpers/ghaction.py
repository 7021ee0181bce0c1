"""A small local runner for a composite GitHub Action (action.yml): enough of the runner to run its steps here.

It evaluates the `${{ ... }}` expressions the action uses (inputs, steps.ID.outputs, github.*, ==, !=, &&, ||,
!, always()/success()/failure()), gives each `run:` step the environment a runner gives (GITHUB_OUTPUT,
GITHUB_STEP_SUMMARY, GITHUB_ACTION_PATH, GITHUB_WORKSPACE, RUNNER_TEMP, CI) and runs it the way GitHub runs
`shell: bash` (`bash --noprofile --norc -eo pipefail FILE`). A step without a status function in its `if:`
runs only while every earlier step succeeded, as on GitHub. `uses:` steps (other actions) are recorded, not run.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

_EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)
_TOKEN = re.compile(r"'(?:[^']|'')*'|\b(?:always|success|failure|cancelled)\(\)|&&|\|\||!=|==|!|\(|\)|"
                    r"[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*|\d+|\s+")


def _lookup(ctx: dict, path: str):
    value = ctx
    for part in path.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return value


def evaluate(expr: str, ctx: dict, failed: bool = False):
    """The value of one expression (without `${{ }}`)."""
    out, pos = [], 0
    for m in _TOKEN.finditer(expr):
        assert m.start() == pos, f"cannot read {expr!r} at {pos}"
        tok, pos = m.group(0), m.end()
        if tok.isspace():
            continue
        if tok.startswith("'"):
            out.append(repr(tok[1:-1].replace("''", "'")))
        elif tok in ("always()", "cancelled()"):
            out.append("True" if tok == "always()" else "False")
        elif tok == "success()":
            out.append(repr(not failed))
        elif tok == "failure()":
            out.append(repr(failed))
        elif tok in ("&&", "||", "!"):
            out.append({"&&": " and ", "||": " or ", "!": " not "}[tok])
        elif tok in ("==", "!=", "(", ")") or tok.isdigit():
            out.append(f" {tok} ")
        elif tok in ("true", "false", "null"):
            out.append({"true": "True", "false": "False", "null": "''"}[tok])
        else:
            out.append(repr(_lookup(ctx, tok)))
    assert pos == len(expr), f"cannot read {expr!r}"
    return eval("".join(out), {"__builtins__": {}})  # noqa: S307 -- built above from a closed set of tokens


def expand(text, ctx: dict) -> str:
    """A string with its `${{ }}` expressions replaced by their values (as GitHub does before a step runs)."""
    return _EXPR.sub(lambda m: str(evaluate(m.group(1).strip(), ctx)), str(text))


@dataclass
class Run:
    """What running the action did: each step's outcome, output and outputs."""

    outcomes: dict = field(default_factory=dict)  # step name -> "success" | "failure" | "skipped" | "uses"
    logs: dict = field(default_factory=dict)  # step name -> stdout + stderr
    steps: dict = field(default_factory=dict)  # step id -> {"outputs": {...}}
    uses: list = field(default_factory=list)  # (name, uses, with) of the steps not run here

    @property
    def failed(self) -> bool:
        return "failure" in self.outcomes.values()


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def run_action(action: dict, action_path: Path, inputs: dict, github: dict, workspace: Path, env: dict,
               skip: tuple = (), timeout: int = 600) -> Run:
    """Run the composite action's steps in `workspace` with these inputs (defaults filled in, expanded with the
    `github` context); steps named in `skip` count as skipped."""
    ctx = {"github": github, "steps": {}, "inputs": {}}
    for name, spec in action.get("inputs", {}).items():
        ctx["inputs"][name] = str(inputs[name]) if name in inputs else expand(spec.get("default", ""), ctx)
    unknown = set(inputs) - set(action.get("inputs", {}))
    assert not unknown, f"the action has no input {sorted(unknown)}"
    run = Run(steps=ctx["steps"])
    temp = Path(env["RUNNER_TEMP"])
    for i, step in enumerate(action["runs"]["steps"]):
        name = step.get("name", f"step {i}")
        cond = str(step.get("if", "success()"))
        cond = cond[3:-2].strip() if cond.startswith("${{") else cond
        if not re.search(r"\b(always|success|failure|cancelled)\(\)", cond):
            cond = f"success() && ({cond})"
        if name in skip or not evaluate(cond, ctx, failed=run.failed):
            run.outcomes[name] = "skipped"
            continue
        if "uses" in step:
            run.uses.append((name, step["uses"], {k: expand(v, ctx) for k, v in step.get("with", {}).items()}))
            run.outcomes[name] = "uses"
            continue
        assert step.get("shell") == "bash", f"{name}: a composite action's run step names its shell"
        output = temp / f"output-{i}"
        output.write_text("")
        script = temp / f"step-{i}.sh"
        script.write_text(expand(step["run"], ctx))
        step_env = {**env, "GITHUB_OUTPUT": str(output), "GITHUB_ACTION_PATH": str(action_path),
                    "GITHUB_WORKSPACE": str(workspace), "CI": "true",
                    **{k: expand(v, ctx) for k, v in step.get("env", {}).items()}}
        cwd = expand(step.get("working-directory", ""), ctx) or str(workspace)
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=cwd,
                              env=step_env, capture_output=True, text=True, timeout=timeout)
        run.logs[name] = done.stdout + done.stderr
        run.outcomes[name] = "success" if done.returncode == 0 else "failure"
        if "id" in step:
            pairs = (line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
            ctx["steps"][step["id"]] = {"outputs": dict(pairs)}
    return run


def runner_env(tmp: Path, bin_dirs: list, **extra) -> dict:
    """The environment of a runner's job: PATH with `bin_dirs` first, a job summary file, RUNNER_TEMP."""
    (tmp / "runner-temp").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PATH=os.pathsep.join([*map(str, bin_dirs), os.environ["PATH"]]), RUNNER_TEMP=str(tmp / "runner-temp"),
               GITHUB_STEP_SUMMARY=str(tmp / "step-summary.md"), LC_ALL="C.UTF-8", **extra)
    return env
