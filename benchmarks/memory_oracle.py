"""What fills memory at the peak of a training script's steps, by torch's own tools, without
perfsleuth (benchmarks/memory_categories.py's independent measurement).

    python memory_oracle.py --out FILE --tool profiler|memtracker [--skip 16] [--steps 3]
                            -- SCRIPT [ARGS...]

The script runs unchanged through `runpy.run_path` as `__main__` (its argv, its folder first on
sys.path). A step ends at each `optimizer.step()` of the first optimizer that steps (a global
post-hook). After `--skip` steps, `--steps` steps are measured by one tool:

- `profiler`: `torch.profiler.profile(record_shapes=True, profile_memory=True, with_stack=True)`
  started and stopped at the step boundaries, then torch's public
  `prof.export_memory_timeline("x.json", device="cpu")`: [times, sizes by category] (columns:
  unused, PARAMETER, OPTIMIZER_STATE, INPUT, TEMPORARY, ACTIVATION, GRADIENT, AUTOGRAD_DETAIL,
  unknown). The peak is the row with the largest sum; its columns are torch's labels, uncorrected.
- `memtracker`: `torch.distributed._tools.mem_tracker.MemTracker`, told the script's outermost
  modules and its optimizers (`track_external`), entered when the boundary's `optimizer.step()` has
  returned and left when the last one's has (MemTracker registers optimizer hooks: it cannot be
  entered while torch runs them), its module stats reset after each step (it refuses a module's
  second forward otherwise); its "peak" snapshot for the CPU.

Both write the exact bytes of the optimizers' parameters, gradients and state tensors at the last
boundary (each storage once), counted here. FILE: {"tool", "peak_bytes", "categories": {...},
"known": {...}, "steps", "complete"}. The script is stopped by an exception from the hook once done.

Nothing here imports perfsleuth: this is the measurement perfsleuth's own is checked against.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import tempfile
import weakref

# export_memory_timeline's JSON columns, 1..8 (0 is unused)
TIMELINE_COLUMNS = ("parameter", "optimizer_state", "input", "temporary", "activation", "gradient",
                    "autograd_detail", "unknown")
MEMTRACKER_NAMES = {"Parameter": "parameter", "Buffer": "buffer", "Gradient": "gradient",
                    "Activation": "activation", "Temp": "temporary", "Optstate": "optimizer_state",
                    "Other": "other"}


class StopRun(BaseException):
    pass


def storages(tensors) -> int:
    seen = {}
    for t in tensors:
        s = t.untyped_storage()
        seen.setdefault((str(t.device), s.data_ptr()), int(s.nbytes()))
    return sum(seen.values())


def known(optimizers) -> dict:
    import torch

    params, state = {}, []
    for opt in optimizers:
        for g in opt.param_groups:
            for p in g["params"]:
                params[id(p)] = p
        for entry in opt.state.values():
            state += [v for v in entry.values() if isinstance(v, torch.Tensor)]
    grads = [p.grad for p in params.values() if p.grad is not None]
    return {"parameter_bytes": storages(params.values()), "gradient_bytes": storages(grads),
            "optimizer_state_bytes": storages(state)}


def timeline_peak(prof) -> tuple:
    """(peak bytes, {column: bytes}) from torch's export_memory_timeline JSON for the CPU."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "timeline.json")
        prof.export_memory_timeline(path, device="cpu")
        with open(path) as f:
            times, sizes = json.load(f)
    best = max(sizes, key=lambda row: sum(row[1:])) if sizes else [0] * 9
    return sum(best[1:]), dict(zip(TIMELINE_COLUMNS, (int(v) for v in best[1:])))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tool", choices=("profiler", "memtracker"), required=True)
    ap.add_argument("--skip", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)

    import torch
    from torch.nn.modules import module as nn_module
    from torch.optim.optimizer import register_optimizer_step_post_hook

    state = {"boundaries": 0, "first": None, "prof": None, "mt": None, "pending": None,
             "done": False, "depth": 0, "known": None}
    optimizers: "weakref.WeakSet" = weakref.WeakSet()
    tops: "weakref.WeakSet" = weakref.WeakSet()

    def write(doc: dict) -> None:
        doc.update(tool=a.tool, steps=a.steps, skip=a.skip, boundaries=state["boundaries"])
        with open(a.out + ".tmp", "w") as f:
            json.dump(doc, f)
        os.replace(a.out + ".tmp", a.out)

    def finish_profiler() -> None:
        import time

        prof, state["prof"] = state["prof"], None
        prof.stop()
        events = len(prof.profiler.kineto_results.events())
        t0 = time.perf_counter()
        peak, cats = timeline_peak(prof)
        write({"peak_bytes": peak, "categories": cats, "known": state["known"], "complete": True,
               "events": events, "timeline_s": round(time.perf_counter() - t0, 2)})

    def finish_memtracker() -> None:
        mt, state["mt"] = state["mt"], None
        mt.__exit__(None, None, None)
        snap = mt.get_tracker_snapshot("peak")
        cpu = next((v for dev, v in snap.items() if torch.device(dev).type == "cpu"), {})
        cats = {MEMTRACKER_NAMES.get(getattr(k, "value", str(k)), str(getattr(k, "value", k))):
                int(v) for k, v in cpu.items() if getattr(k, "value", k) != "Total"}
        total = next((int(v) for k, v in cpu.items() if str(k) == "Total"), sum(cats.values()))
        write({"peak_bytes": total, "categories": cats, "known": state["known"], "complete": True})

    def after_step(opt, args, kwargs):
        optimizers.add(opt)
        if state["first"] is None:
            state["first"] = id(opt)
            wrap(opt)
        if id(opt) != state["first"]:
            return
        if state["done"]:
            raise StopRun()
        state["boundaries"] += 1
        b = state["boundaries"]
        if b == a.skip:
            if a.tool == "profiler":
                from torch.profiler import ProfilerActivity, profile

                state["prof"] = profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                                        profile_memory=True, with_stack=True)
                state["prof"].start()
            else:
                state["pending"] = "enter"
        elif b == a.skip + a.steps:
            state["known"] = known(list(optimizers))
            if a.tool == "profiler":
                finish_profiler()
                state["done"] = True
                raise StopRun()
            state["pending"] = "exit"

    def wrap(opt) -> None:
        """MemTracker registers (and removes) global optimizer hooks: it is entered and left after
        an `optimizer.step()` has returned, never while torch runs the hooks."""
        step = opt.step

        def stepped(*args, **kwargs):
            out = step(*args, **kwargs)
            if state["pending"] == "enter":
                from torch.distributed._tools.mem_tracker import MemTracker

                state["pending"] = None
                mt = MemTracker()
                mt.track_external(*[m for m in tops if any(True for _ in m.parameters())],
                                  *list(optimizers))
                mt.__enter__()
                state["mt"] = mt
            elif state["mt"] is not None and state["pending"] is None:
                # one step's module stats at a time (MemTracker refuses a module's second forward
                # otherwise); the peak snapshot is kept across steps
                state["mt"].reset_mod_stats()
            elif state["pending"] == "exit":
                state["pending"] = None
                finish_memtracker()
                state["done"] = True
                raise StopRun()
            return out

        opt.step = stepped

    def pre(mod, inputs):
        state["depth"] += 1
        if state["depth"] == 1:
            tops.add(mod)

    def post(mod, inputs, output):
        state["depth"] = max(0, state["depth"] - 1)

    register_optimizer_step_post_hook(after_step)
    nn_module.register_module_forward_pre_hook(pre)
    nn_module.register_module_forward_hook(post, always_call=True)

    script = os.path.abspath(a.script)
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(script)
    try:
        runpy.run_path(script, run_name="__main__")
    except StopRun:
        return 0
    except SystemExit:
        if state["done"]:
            return 0
    if state["done"]:
        return 0
    write({"peak_bytes": None, "categories": None, "known": None, "complete": False})
    return 3


if __name__ == "__main__":
    sys.exit(main())
