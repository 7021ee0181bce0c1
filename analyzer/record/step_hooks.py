"""Where the step boundaries of `perfsleuth run` and `perfsleuth.profile()` come from.

The user's code is not changed, so boundaries come from hooks. Sources, highest precedence first (a
higher source, once seen, switches the lower ones off for the rest of the session):

1. manual: `prof.step()` (the Python API), or each call of a function wrapped with `prof(fn)`;
2. optimizer: a global post-hook on `Optimizer.step`; only the first optimizer that steps counts
   (a GAN with two optimizers gets one step per iteration). A global pre-hook makes the optimizer the
   source as soon as one starts stepping, before its first step ends: inside `Optimizer.step` nothing
   else is a boundary, so `optimizer.step(closure)` (LBFGS calls the closure, and the model, up to
   `max_iter` times) is one step, never one per closure call;
3. dataloader: each `next()` on a DataLoader iterator starts a step;
4. module: the outermost `nn.Module` call of the loop. A global forward pre/post hook pair tracks
   the nesting depth, so only calls made outside any other module count; the module whose outermost
   call *repeats* first becomes the stepping module, and each of its calls from the second on starts
   a step (a loss module called after the model, or a setup call of another module, does not). Once
   it is chosen, the global hooks give way to a wrapper of its class's `__call__`. Evaluation and
   inference loops without a DataLoader, and update rules without an optimizer, get their steps
   this way. The module hooks are removed as soon as a higher source is seen, so training loops pay
   nothing for them.

Beside the boundaries, the hooks note where the user's code constructs each optimizer (`Optimizer.__init__`)
and calls `zero_grad`, for the optimizer findings' source lines (code_sites.py), and count the closure calls
of each optimizer step (the stacks window may end after one: step_clock.StacksSchedule).

Only the thread that installed the hooks, in its own process, makes boundaries (forks.Owner): another
thread's optimizer steps, DataLoader batches and model calls, and everything in a forked child, pass
through untouched.

Torch is imported inside `install()` only. docs/run.md is the user's guide.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import weakref
from typing import Any, Callable, Optional

from . import code_sites, trace_metadata as run_facts
from .forks import Owner

_compiling: Callable[[], bool] = lambda: False  # torch.compiler.is_compiling once install() imported torch
OWN_FRAME = "<perfsleuth>"  # the file name of the code perfsleuth puts inside the user's stack
SOURCES = ("manual", "optimizer", "dataloader", "module")  # highest precedence first
_RANK = {s: len(SOURCES) - i for i, s in enumerate(SOURCES)}


def _own_frame(fn):
    """Named like a built-in frame in traces and tracebacks: source-line attribution (which skips
    `<...>` frames) then points at the user's code, not at the hook."""
    fn.__code__ = fn.__code__.replace(co_filename=OWN_FRAME)
    return fn


@_own_frame
def _call_next(next_, it):
    return next_(it)


_own_frame(run_facts.CpuClock.loader_call)  # the clock's frame sits in the user's stack too


@_own_frame
def _call_closure(hooks, closure, *args, **kwargs):
    """The closure passed to `optimizer.step(closure)`, counted; `hooks.on_closure` runs after each call."""
    out = closure(*args, **kwargs)
    hooks.closure_calls += 1
    hooks.on_closure()
    return out


class StepHooks:
    """Installs the hooks and reports each boundary to `on_step(source, obj)`, which asks `accept`
    whether it counts."""

    def __init__(self, on_step: Callable[[str, Any], None]):
        self.on_step = on_step
        self.source: Optional[str] = None  # the source whose boundaries count now
        self.loaders: list = []  # settings of the DataLoaders iterated (the loader itself may be gone)
        self._optimizer: Optional[weakref.ref] = None
        self._iterators: weakref.WeakSet = weakref.WeakSet()
        self._undo: list = []
        self._module_undo: list = []
        self._module: Optional[weakref.ref] = None  # the stepping module, once one repeats
        self._outer_calls: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._depth = threading.local()
        self.around_next: Callable = _call_next  # runs each DataLoader __next__ (run.py: the CPU clock)
        self.optimizers: list = []  # where the user's code constructed optimizers (code_sites.remember_optimizer)
        self._sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # optimizer -> its entry there
        self._calls_seen: set = set()  # (entry, code, line) of the zero_grad calls already looked at
        self.closure_calls = 0  # closure calls in the current step of the tracked optimizer
        self.closure_calls_per_step: Optional[int] = None  # ... in its last completed step
        self.on_closure: Callable[[], None] = lambda: None  # after each closure call (run.py: the stacks window)
        self.owner = Owner()  # the process and thread whose boundaries count (set again by install)

    def mine(self) -> bool:
        """Is the caller the owning thread of the owning process? Hooks elsewhere pass through. Inside a graph
        that dynamo traces (a compiled model calling its submodules runs the module hooks in the trace), yes:
        os.getpid and threading.get_ident are functions dynamo skips, and calling them broke every compiled
        program's graph at each submodule call."""
        if _compiling():
            return True
        return self.owner.here()

    # --- which boundaries count ----------------------------------------------------------------
    def accept(self, source: str, obj: Any = None) -> bool:
        """Does a boundary from `source` count? Updates the current source (see the module docstring)."""
        if source == "optimizer":
            tracked = self._optimizer() if self._optimizer is not None else None
            if tracked is None:
                self._optimizer, tracked = weakref.ref(obj), obj
            if obj is not tracked:
                return False
            self.closure_calls_per_step = self.closure_calls or self.closure_calls_per_step
        if self.source is not None and _RANK[source] < _RANK[self.source]:
            return False
        if source != "module":
            self._remove_module_hooks()  # the module source can no longer win
        self.source = source
        return True

    def _optimizer_starts(self, opt: Any, args: tuple, kwargs: dict) -> Optional[tuple]:
        """The optimizer pre-hook: from the first optimizer step on, the optimizer is the source (the lower
        ones give way, so no closure call is a step); the tracked optimizer's closure is counted."""
        if not self.mine():
            return None
        if self.source is None or _RANK[self.source] < _RANK["optimizer"]:
            self.source = "optimizer"
            self._remove_module_hooks()
        tracked = self._optimizer() if self._optimizer is not None else None
        if tracked is not None and opt is not tracked:
            return None
        self.closure_calls = 0
        if len(args) > 1 and callable(args[1]):
            return (args[0], functools.partial(_call_closure, self, args[1]), *args[2:]), kwargs
        if callable(kwargs.get("closure")):
            return args, {**kwargs, "closure": functools.partial(_call_closure, self, kwargs["closure"])}
        return None

    # --- installing and removing ----------------------------------------------------------------
    def install(self, modules: bool = True) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
        from torch.utils.data import dataloader as dl

        global _compiling
        _compiling = getattr(getattr(sys.modules.get("torch"), "compiler", None), "is_compiling", _compiling)
        self.owner = Owner()
        handle = register_optimizer_step_post_hook(
            lambda opt, args, kwargs: self.on_step("optimizer", opt) if self.mine() else None)
        self._undo.append(handle.remove)
        handle = register_optimizer_step_pre_hook(self._optimizer_starts)
        self._undo.append(handle.remove)
        self._watch_optimizers()
        base, original_next, hooks = dl._BaseDataLoaderIter, dl._BaseDataLoaderIter.__next__, self

        @_own_frame
        def __next__(it):
            if not hooks.mine():
                return original_next(it)
            if isinstance(it, dl._MultiProcessingDataLoaderIter):
                hooks._iterators.add(it)
            hooks.on_step("dataloader", None)
            return hooks.around_next(original_next, it)

        base.__next__ = __next__
        self._undo.append(lambda: setattr(base, "__next__", original_next))
        loader_cls, original_iter = dl.DataLoader, dl.DataLoader.__iter__

        @_own_frame
        def __iter__(loader):
            if hooks.mine():
                run_facts.remember_loader(hooks.loaders, loader)
            return original_iter(loader)

        loader_cls.__iter__ = __iter__
        self._undo.append(lambda: setattr(loader_cls, "__iter__", original_iter))
        if modules and self.source in (None, "module"):
            self._install_module_hooks()

    def _watch_optimizers(self) -> None:
        """Where the user's code constructs optimizers and calls their zero_grad (code_sites.py)."""
        from torch.optim import Optimizer

        init, zero_grad, hooks = Optimizer.__init__, Optimizer.zero_grad, self

        @_own_frame
        def __init__(opt, *args, **kwargs):
            init(opt, *args, **kwargs)
            with contextlib.suppress(Exception):  # never the user's run's problem
                entry = code_sites.remember_optimizer(hooks.optimizers, opt, sys._getframe(1))
                if entry is not None:
                    hooks._sites[opt] = entry

        @functools.wraps(zero_grad)
        def _zero_grad(opt, *args, **kwargs):
            entry, caller = hooks._sites.get(opt), sys._getframe(1)
            if entry is not None and (id(entry), caller.f_code, caller.f_lineno) not in hooks._calls_seen:
                hooks._calls_seen.add((id(entry), caller.f_code, caller.f_lineno))
                with contextlib.suppress(Exception):
                    code_sites.remember_call(entry, caller)
            return zero_grad(opt, *args, **kwargs)

        Optimizer.__init__, Optimizer.zero_grad = __init__, _own_frame(_zero_grad)
        self._undo.append(lambda: (setattr(Optimizer, "__init__", init), setattr(Optimizer, "zero_grad", zero_grad)))

    def _install_module_hooks(self) -> None:
        from torch.nn.modules import module as nn_module

        depth = self._depth

        @_own_frame
        def pre(module, args):
            if not self.mine():
                return
            level = getattr(depth, "level", 0)
            if level == 0:
                self._outermost_call(module)  # may raise (the window is complete): then no forward runs
            depth.level = level + 1

        @_own_frame
        def post(module, args, output):
            if not self.mine():
                return
            depth.level = max(0, getattr(depth, "level", 0) - 1)

        handles = [nn_module.register_module_forward_pre_hook(pre),
                   nn_module.register_module_forward_hook(post, always_call=True)]
        self._module_undo = [h.remove for h in handles]

    def _outermost_call(self, module: Any) -> None:
        try:
            calls = self._outer_calls.get(module, 0) + 1
            self._outer_calls[module] = calls
        except TypeError:  # a module that cannot be weakly referenced: not a candidate
            return
        if calls < 2:
            return
        self._module = weakref.ref(module)
        self._outer_calls = weakref.WeakKeyDictionary()
        self._follow(module)
        self.on_step("module", module)

    def _follow(self, module: Any) -> None:
        """From now on only the stepping module's calls matter: the global hooks (which slow every module
        call, about 3 µs each here) give way to a wrapper of its class's `__call__` that checks the
        instance. Nothing is attached to the module itself, so pickling it still works."""
        self._remove_module_hooks()
        cls, hooks = type(module), self
        own, inherited = cls.__dict__.get("__call__"), cls.__call__

        @_own_frame
        def __call__(mod, *args, **kwargs):
            if hooks._module is not None and mod is hooks._module() and hooks.mine():
                hooks.on_step("module", mod)
            return inherited(mod, *args, **kwargs)

        cls.__call__ = __call__
        self._module_undo = [lambda: setattr(cls, "__call__", own) if own is not None else delattr(cls, "__call__")]

    def _remove_module_hooks(self) -> None:
        while self._module_undo:
            self._module_undo.pop()()

    def remove(self) -> None:
        self._remove_module_hooks()
        while self._undo:
            self._undo.pop()()

    def live_optimizers(self) -> list:
        """The optimizers constructed while the hooks were installed, and the one that steps, still alive."""
        tracked = self._optimizer() if self._optimizer is not None else None
        found = list(self._sites.keys())
        return found + ([tracked] if tracked is not None and all(o is not tracked for o in found) else [])

    def iterators(self) -> list:
        """The multi-process DataLoader iterators seen so far (alive)."""
        return list(self._iterators)

    def shutdown_workers(self) -> None:
        """End the worker processes of the multi-process DataLoader iterators the script used (in the owning
        process only: a forked child's copies are not its workers)."""
        if not self.owner.in_process():
            return
        for it in list(self._iterators):
            with contextlib.suppress(Exception):
                it._shutdown_workers()
        self._iterators = weakref.WeakSet()
