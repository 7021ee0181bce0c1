"""Time a training script's steps without the profiler and without perfsleuth (benchmarks/unseen.py's
independent A/B).

    python runner.py --out FILE [--warmup W] [--steps S] [--on optimizer|forward] -- SCRIPT [ARGS...]

The script runs unchanged through `runpy.run_path` as `__main__`, with `sys.argv` = [SCRIPT, *ARGS]
and its own folder first on `sys.path`, as `python SCRIPT ARGS` would run it. A step ends at each
`optimizer.step()` of the first optimizer that steps (a global post-hook,
`torch.optim.optimizer.register_optimizer_step_post_hook`; a GAN's two optimizers give one step per
iteration, LBFGS's `step(closure)` one step), or, with `--on forward`, a step starts at each outermost
`nn.Module` call (scripts that update their weights by hand). After W warm-up steps and S timed ones
the runner writes FILE -- {"step_s": [...], "warmup_s": [...], "startup_s", "complete"} -- and stops
the script by raising an exception from the hook (so its DataLoader workers shut down as on any
error). A script that ends first writes what it had, with "complete": false, and exits 3.

Nothing here imports perfsleuth: this is the measurement perfsleuth's own is checked against.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time


class StopRun(BaseException):
    """Raised from a hook once the timed steps are done (BaseException: a script's `except Exception`
    does not swallow it)."""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--on", choices=("optimizer", "forward"), default="optimizer")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()

    import torch

    marks: list = []
    state = {"done": False, "optimizer": None, "depth": 0}
    need = a.warmup + a.steps + 1  # step k's time is marks[k] - marks[k - 1]

    def write(complete: bool) -> None:
        gaps = [y - x for x, y in zip(marks, marks[1:])]
        doc = {"warmup_s": gaps[:a.warmup], "step_s": gaps[a.warmup:a.warmup + a.steps],
               "startup_s": (marks[0] - t0) if marks else None, "complete": complete, "on": a.on,
               "threads": torch.get_num_threads()}
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, a.out)

    def mark() -> None:
        if state["done"]:  # the script swallowed StopRun: end it here
            os._exit(0)
        marks.append(time.perf_counter())
        if len(marks) >= need:
            state["done"] = True
            write(True)
            raise StopRun()

    def after_step(opt, args, kwargs):
        if state["optimizer"] is None:
            state["optimizer"] = id(opt)
        if id(opt) == state["optimizer"]:
            mark()

    if a.on == "optimizer":
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(after_step)
    else:
        from torch.nn.modules import module as nn_module

        def pre(mod, inputs):
            state["depth"] += 1
            if state["depth"] == 1:
                mark()

        def post(mod, inputs, output):
            state["depth"] -= 1

        nn_module.register_module_forward_pre_hook(pre)
        nn_module.register_module_forward_hook(post, always_call=True)

    script = os.path.abspath(a.script)
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(script)  # as `python SCRIPT` has it (not this runner's folder)
    try:
        runpy.run_path(script, run_name="__main__")
    except StopRun:
        return 0
    except SystemExit as e:
        if state["done"]:
            return 0
        write(False)
        return e.code if isinstance(e.code, int) and e.code else 3
    if state["done"]:
        return 0
    write(False)
    return 3


if __name__ == "__main__":
    sys.exit(main())
