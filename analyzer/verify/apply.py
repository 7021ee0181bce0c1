"""How the child process of `perfsleuth run --verify` applies a fix (verify/fixes.py names them).

Two ways, as the fix allows:

- **at the start of a fresh process** (`Patch.install` before the script runs, in variant windows only):
  DataLoader keyword arguments (`num_workers`, `persistent_workers`, `prefetch_factor`, `pin_memory`: the
  workers of an iterator are made when it is created), the optimizer's `fused=True` (its state is made
  for it); OMP/MKL thread counts come from the environment the process starts with (verify.py);
- **toggled between windows of one process** (`set(on)` at a step boundary): torch's intra-op threads,
  an optimizer's `param_groups[i]["foreach"]` (read at every step), `zero_grad(set_to_none=True)`,
  `torch.backends.cudnn.benchmark`, float32 matmul precision, autocast or `torch.compile` around the
  top module (the outermost module with the most parameters called in the first steps).

Every toggle restores the script's own setting in baseline windows. `applied()` says what was changed,
or None when there was nothing to change (no optimizer with that setting, no DataLoader, ...).
Only the child imports this module, and torch with it.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from typing import Any, Optional

import torch


class Patch:
    """A fix: `install()` before the script runs; `set(on)` at each window's start (toggles only)."""

    def __init__(self, params: dict):
        self.params, self.on, self.count = dict(params), False, 0

    def install(self) -> None:
        pass

    def set(self, on: bool) -> None:
        self.on = on

    def applied(self) -> Optional[str]:
        return "applied" if self.count else None


class Loader(Patch):
    """DataLoader keyword arguments, forced whatever the script passes (fresh process, variant only)."""

    def install(self) -> None:
        from torch.utils.data import DataLoader

        original, sig, patch = DataLoader.__init__, inspect.signature(DataLoader.__init__), self

        def __init__(loader, *args, **kwargs):
            bound = sig.bind(loader, *args, **kwargs)
            workers = patch.params.get("num_workers", bound.arguments.get("num_workers", 0))
            for k, v in patch.params.items():
                if k in ("persistent_workers", "prefetch_factor") and not workers:
                    continue  # needs worker processes: such a loader is left as it is
                bound.arguments[k] = v
                patch.count += 1
            return original(*bound.args, **bound.kwargs)

        DataLoader.__init__ = __init__

    def applied(self) -> Optional[str]:
        n = self.count
        return f"{n} DataLoader argument{'s' if n != 1 else ''} set" if n else None


class Fused(Patch):
    """Optimizers made with fused=True (and foreach off): their state is created for the fused kernels."""

    def install(self) -> None:
        from torch.optim import Optimizer

        original, patch = Optimizer.__init__, self

        def __init__(opt, params, defaults):
            if "fused" in defaults:
                defaults = {**defaults, "fused": True, "foreach": False}
                patch.count += 1
            return original(opt, params, defaults)

        Optimizer.__init__ = __init__


class Threads(Patch):
    def set(self, on: bool) -> None:
        if not hasattr(self, "script"):
            self.script = torch.get_num_threads()  # the script's own, set before its first step
        self.on = on
        torch.set_num_threads(int(self.params["threads"]) if on else self.script)
        self.count += 1


class OptimizerFlag(Patch):
    """`param_groups[i][key] = value` for every optimizer that steps (seen by a global step pre-hook)."""

    def install(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self.seen: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self.with_key = 0  # optimizers that have the setting (the script's may be gone by the end)
        register_optimizer_step_pre_hook(lambda opt, args, kwargs: self._see(opt))

    def _see(self, opt: Any) -> None:
        if opt not in self.seen:
            key = self.params["key"]
            has = all(key in g for g in opt.param_groups)
            self.seen[opt] = [g.get(key) for g in opt.param_groups] if has else None
            self.with_key += int(has)
            self._apply(opt)

    def _apply(self, opt: Any) -> None:
        originals = self.seen.get(opt)
        if originals is None:
            return
        key, value = self.params["key"], self.params["value"]
        for g, was in zip(opt.param_groups, originals):
            g[key] = value if self.on and not g.get("fused") else was
        self.count += 1

    def set(self, on: bool) -> None:
        self.on = on
        for opt in list(self.seen.keys()):
            self._apply(opt)

    def applied(self) -> Optional[str]:
        n = self.with_key
        return f"{n} optimizer{'s' if n != 1 else ''}" if n else None


class ZeroGrad(Patch):
    """`zero_grad(set_to_none=True)` on optimizers and modules; counts the script's `set_to_none=False` calls."""

    def install(self) -> None:
        from torch import nn
        from torch.optim import Optimizer

        self.fills = 0
        for cls in (Optimizer, nn.Module):
            self._wrap(cls)

    def _wrap(self, cls) -> None:
        original, patch = cls.zero_grad, self

        def zero_grad(obj, set_to_none: bool = True):
            if not set_to_none:
                patch.fills += 1
            return original(obj, set_to_none=True if patch.on else set_to_none)

        cls.zero_grad = zero_grad

    def applied(self) -> Optional[str]:
        n = self.fills
        return f"{n} zero_grad(set_to_none=False) call{'s' if n != 1 else ''}" if n else None


class Cudnn(Patch):
    def set(self, on: bool) -> None:
        if not hasattr(self, "script"):
            self.script = torch.backends.cudnn.benchmark
        self.on, self.count = on, self.count + 1
        torch.backends.cudnn.benchmark = True if on else self.script


class Tf32(Patch):
    def set(self, on: bool) -> None:
        if not hasattr(self, "script"):
            self.script = torch.get_float32_matmul_precision()
        self.on, self.count = on, self.count + 1
        torch.set_float32_matmul_precision("high" if on else self.script)


class TopModule(Patch):
    """Finds the top module in the steps before the first window (global forward hooks: the outermost
    module with the most parameters), then wraps its class's `__call__` for that instance only."""

    def install(self) -> None:
        from torch.nn.modules import module as nn_module

        self.calls: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self.top: Optional[weakref.ref] = None
        self.depth = threading.local()
        depth = self.depth

        def pre(module, args):
            if getattr(depth, "level", 0) == 0:
                self.calls[module] = sum(p.numel() for p in module.parameters())
            depth.level = getattr(depth, "level", 0) + 1

        def post(module, args, output):
            depth.level = max(0, getattr(depth, "level", 0) - 1)

        self.handles = [nn_module.register_module_forward_pre_hook(pre),
                        nn_module.register_module_forward_hook(post, always_call=True)]

    def set(self, on: bool) -> None:
        self.on = on
        if self.top is None and self.handles:
            for h in self.handles:
                h.remove()
            self.handles = []
            ranked = sorted(self.calls.items(), key=lambda kv: -kv[1])
            if ranked and ranked[0][1] > 0:
                self.top, self.top_name = weakref.ref(ranked[0][0]), type(ranked[0][0]).__name__
                self._wrap(ranked[0][0])

    def _wrap(self, module) -> None:
        cls, patch, inside = type(module), self, threading.local()
        inherited = cls.__call__

        def __call__(mod, *args, **kwargs):
            if not patch.on or getattr(inside, "on", False) or patch.top is None or mod is not patch.top():
                return inherited(mod, *args, **kwargs)
            inside.on = True
            try:
                patch.count += 1
                return patch.around(mod, inherited, args, kwargs)
            finally:
                inside.on = False

        cls.__call__ = __call__

    def around(self, mod, call, args, kwargs):
        return call(mod, *args, **kwargs)

    def applied(self) -> Optional[str]:
        return getattr(self, "top_name", None) if self.count else None


class Autocast(TopModule):
    def around(self, mod, call, args, kwargs):
        if not hasattr(self, "dtype"):
            self.dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        with torch.autocast("cuda", dtype=self.dtype):
            return call(mod, *args, **kwargs)

    def applied(self) -> Optional[str]:
        top = super().applied()
        return f"{top}, {str(self.dtype).replace('torch.', '')}" if top else None


class Compile(TopModule):
    def around(self, mod, call, args, kwargs):
        if not hasattr(self, "compiled"):
            def forward(*a, **k):  # the module's own __call__, not this wrapper: nothing for dynamo to trace here
                return call(mod, *a, **k)
            self.compiled = torch.compile(forward)
        return self.compiled(*args, **kwargs)


class Env(Patch):
    """OMP/MKL thread counts: the process started with them in its environment (verify.py)."""

    def applied(self) -> Optional[str]:
        return " ".join(f"{k}={v}" for k, v in self.params.items())


KINDS = {"loader": Loader, "fused": Fused, "threads": Threads, "optimizer": OptimizerFlag, "zero-grad": ZeroGrad,
         "cudnn": Cudnn, "tf32": Tf32, "autocast": Autocast, "compile": Compile, "env": Env}


def make(kind: str, params: dict) -> Patch:
    return KINDS[kind](params)
