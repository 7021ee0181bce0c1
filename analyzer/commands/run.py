"""`perfsleuth run`: profile an unmodified training script under torch.profiler, then analyze the trace.

The only module that imports torch, and only inside functions: `perfsleuth analyze` never needs it.
docs/run.md is the user's guide. Step boundaries come from hooks, in order of precedence (a higher
source, once seen, switches the lower ones off): manual (`prof.step()`, the Python API); optimizer
(a global post-hook on `Optimizer.step`; only the first optimizer that steps counts); dataloader
(until an optimizer step is seen, each `next()` on a DataLoader iterator starts a step).

Stopping early: when the window completes, the step hook raises `_WindowComplete`, a private
`BaseException` subclass that the runner catches. It is safe because `except Exception` in the
script does not catch it (it unwinds like Ctrl-C, running the script's `finally` blocks and `with`
exits); the runner then drops the traceback (the frames holding DataLoader iterators), shuts down the
workers of every multi-process iterator it saw (persistent ones included) and collects garbage. A
script that swallows it (bare `except:`) gets it again at its next step.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import logging
import os
import runpy
import sys
import traceback
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from ..errors import UsageError
from . import run_facts, run_outputs
from .signals import as_interrupts, exit_code, signal_name
from .run_paths import rank_info, trace_name

log = logging.getLogger(__name__)

EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OUTPUT = 1, 130, 2
_HERE = os.path.abspath(__file__)
_RUNPY = os.path.abspath(runpy.__file__)
OWN_FRAME = "<perfsleuth>"  # the file name of the code perfsleuth puts inside the script's stack


@dataclass(frozen=True)
class RunConfig:
    """Every profiling default, once (the CLI options and `perfsleuth.profile()` read them from here)."""

    wait: int = 1  # steps skipped first (start-up: lazy init, first allocations)
    warmup: int = 2  # steps traced but discarded (profiler start-up cost)
    active: int = 5  # steps recorded and analyzed
    with_stack: bool = True  # Python source lines for the findings; the largest overhead
    record_shapes: bool = True  # input shapes and dtypes of every op
    stop_after_window: bool = True  # stop the script once the active window is recorded

    def __post_init__(self):
        for name, least in (("wait", 0), ("warmup", 0), ("active", 1)):
            if getattr(self, name) < least:
                raise UsageError(f"--{name} must be at least {least}")

    @property
    def window(self) -> int:
        """Steps from the start until the recorded window is complete."""
        return self.wait + self.warmup + self.active


class _WindowComplete(BaseException):
    """Raised from a step hook when the active window is recorded (see the module docstring)."""


# --- the profiling session: the machinery under `perfsleuth run` and `perfsleuth.profile()` -------
class ProfileSession:
    """torch.profiler with a wait/warmup/active schedule, stepped from hooks; writes one gzipped trace."""

    def __init__(self, config: RunConfig, trace_path: Path, raise_on_complete: bool):
        self.config = config
        self.trace_path = Path(trace_path)
        self.raise_on_complete = raise_on_complete
        self.steps = 0  # step boundaries seen while profiling
        self.source: Optional[str] = None  # manual | optimizer | dataloader
        self.window_done = False
        self.trace_written = False
        self.export_error: Optional[str] = None  # the trace could not be written where asked
        self._prof: Any = None
        self._optimizer: Optional[weakref.ref] = None
        self._undo: list = []
        self._iterators: weakref.WeakSet = weakref.WeakSet()
        self._loaders: list = []  # settings of the DataLoaders iterated (the loader itself may be gone): into the trace

    @property
    def profiled_steps(self) -> int:
        """Steps of the active window that completed."""
        c = self.config
        return max(0, min(c.active, self.steps - c.wait - c.warmup))

    def start(self) -> "ProfileSession":
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        c = self.config
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._prof = profile(activities=activities, record_shapes=c.record_shapes, with_stack=c.with_stack,
                             schedule=schedule(wait=c.wait, warmup=c.warmup, active=c.active, repeat=1),
                             on_trace_ready=self._on_trace_ready)
        self._prof.start()
        self._install_hooks()
        if c.wait == 0:  # already recording (warm-up): metadata is kept from here on
            self._record_metadata()
        return self

    def _record_metadata(self) -> None:
        """Machine and loader facts into the trace (run_facts.py). torch keeps metadata added while it
        records (warm-up or active), the last value of a key winning: called at each such step."""
        try:
            rank, world = rank_info()
            meta = run_facts.metadata(run_facts.host_facts(rank, world), self._loaders)
            self._prof.add_metadata_json(run_facts.METADATA_KEY, json.dumps(meta))
        except Exception as exc:  # never the user's run's problem
            log.warning("could not record machine facts in the trace: %s", exc)

    def step(self, source: str, optimizer: Any = None) -> None:
        if not self._counts(source, optimizer):
            return
        if self.window_done:
            if self.raise_on_complete:
                raise _WindowComplete()  # again: the script swallowed the first one
            return
        if self._prof is None:  # stopped early (Ctrl-C, the end of a `with` block)
            return
        self.steps += 1
        self._prof.step()
        if not self.window_done and self.steps >= self.config.wait:
            self._record_metadata()
        if self.window_done:
            self.finish(keep_hooks=self.raise_on_complete)
            if self.raise_on_complete:
                raise _WindowComplete()

    def _counts(self, source: str, optimizer: Any) -> bool:
        """Does a boundary from `source` count? (precedence: manual > optimizer > dataloader)"""
        if source == "manual" or self.source == "manual":
            self.source = "manual"
            return source == "manual"
        if source == "optimizer":
            tracked = self._optimizer() if self._optimizer is not None else None
            if tracked is None:
                self._optimizer, tracked = weakref.ref(optimizer), optimizer
            if optimizer is not tracked:
                return False
            self.source = "optimizer"
            return True
        if self.source in (None, "dataloader"):
            self.source = "dataloader"
            return True
        return False

    def _install_hooks(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.utils.data import dataloader as dl

        handle = register_optimizer_step_post_hook(lambda opt, args, kwargs: self.step("optimizer", opt))
        self._undo.append(handle.remove)
        base, original, session = dl._BaseDataLoaderIter, dl._BaseDataLoaderIter.__next__, self

        def __next__(it):
            if isinstance(it, dl._MultiProcessingDataLoaderIter):
                session._iterators.add(it)
            session.step("dataloader")
            return original(it)

        # Named like a built-in frame in traces and tracebacks: source-line attribution (which skips
        # `<...>` frames) then points at the user's loop, not at this wrapper.
        __next__.__code__ = __next__.__code__.replace(co_filename=OWN_FRAME)
        base.__next__ = __next__
        self._undo.append(lambda: setattr(base, "__next__", original))
        loader_cls, original_iter = dl.DataLoader, dl.DataLoader.__iter__

        def __iter__(loader):
            run_facts.remember_loader(session._loaders, loader)
            return original_iter(loader)

        __iter__.__code__ = __iter__.__code__.replace(co_filename=OWN_FRAME)
        loader_cls.__iter__ = __iter__
        self._undo.append(lambda: setattr(loader_cls, "__iter__", original_iter))

    def _on_trace_ready(self, prof) -> None:
        """Called by torch from inside the script's step: nothing raised here may reach the script
        (run_outputs.export_trace: a trace that cannot go where asked goes to a temporary folder)."""
        self.window_done = self.steps >= self.config.window
        written, self.export_error = run_outputs.export_trace(prof, self.trace_path)
        self.trace_written = written is not None
        self.trace_path = written or self.trace_path
        log.info("trace written: %s (%d profiled steps)", self.trace_path, self.profiled_steps)

    def finish(self, keep_hooks: bool = False) -> None:
        """Stop the profiler (a window cut short is still exported); remove the hooks unless asked."""
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.__exit__(None, None, None)
        if not keep_hooks:
            while self._undo:
                self._undo.pop()()

    def shutdown_workers(self) -> None:
        """End the worker processes of the multi-process DataLoader iterators the script used."""
        for it in list(self._iterators):
            with contextlib.suppress(Exception):
                it._shutdown_workers()
        self._iterators = weakref.WeakSet()


# --- running a script --------------------------------------------------------------------------
@dataclass
class Target:
    """What to run: a script path or a module name, and the arguments it gets."""

    name: str
    args: tuple = ()
    module: bool = False
    path: Optional[Path] = None  # the script, or the module's file

    @property
    def stem(self) -> str:
        return self.name.rsplit(".", 1)[-1] if self.module else Path(self.name).stem


@dataclass
class RunOutcome:
    """What happened: the report (None when there is none, or on ranks other than 0) and why."""

    out_dir: Path
    trace_path: Path
    exit_code: Any = 0  # an int, or a SystemExit code passed through as is
    report: Any = None
    message: Optional[str] = None  # one plain line about what happened, for stderr
    user_traceback: Optional[str] = None  # the script's own traceback, our frames removed
    steps: int = 0
    profiled_steps: int = 0
    rank: Optional[int] = None
    warnings: list = field(default_factory=list)
    signal: Optional[str] = None  # SIGINT, SIGTERM or SIGHUP when the run was interrupted
    export_error: Optional[str] = None  # the trace could not be written where asked (see ProfileSession)


def resolve_target(name: str, args: Sequence[str], module: bool) -> Target:
    """A missing script or module is a UsageError (one line, exit 2), found before torch is imported."""
    if module:
        with _sys_path_first(os.getcwd()):
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
        if spec is None:
            raise UsageError(f"no module named {name!r}")
        return Target(name, tuple(args), True, Path(spec.origin) if spec.origin else None)
    path = Path(name)
    if not path.exists():
        raise UsageError(f"{name}: no such script")
    if path.is_dir() and not (path / "__main__.py").is_file():
        raise UsageError(f"{name}: is a directory without __main__.py")
    return Target(name, tuple(args), False, path)


def run_script(target: Target, config: RunConfig, out_dir: Path) -> RunOutcome:
    """Run `target` in this process as `__main__` under the profiler; analyze what was recorded."""
    rank, _ = rank_info()
    outcome = RunOutcome(out_dir=out_dir, trace_path=out_dir / trace_name(rank), rank=rank)
    session = ProfileSession(config, outcome.trace_path.absolute(), raise_on_complete=config.stop_after_window)
    ended = "finished"
    with _script_environment(target), as_interrupts():
        session.start()  # outside the try: a failure here is perfsleuth's, not the script's
        try:
            _execute(target)
        except _WindowComplete:
            ended = "stopped"
        except KeyboardInterrupt as exc:  # Ctrl-C, and SIGTERM / SIGHUP (signals.py): partial data is kept
            ended, outcome.signal = "interrupted", signal_name(exc)
            outcome.exit_code = exit_code(exc)
        except SystemExit as exc:
            ended, outcome.exit_code = "exited", exc.code
        except BaseException as exc:  # the script's own error: reported, not ours to crash on
            ended, outcome.user_traceback = "raised", run_outputs.user_traceback(exc, format_user_traceback)
            outcome.message = f"the script raised {type(exc).__name__}: {(str(exc).strip() or '-').splitlines()[0]}"
        finally:
            session.finish()
            session.shutdown_workers()
            gc.collect()
    outcome.steps, outcome.profiled_steps = session.steps, session.profiled_steps
    if session.export_error:
        outcome.export_error, outcome.trace_path = session.export_error, session.trace_path
    _conclude(outcome, ended, session.window_done, config)
    return outcome


def _conclude(o: RunOutcome, ended: str, window_done: bool, config: RunConfig) -> None:
    """Exit code, the one-line message, and the report when there is something to analyze."""
    have = o.profiled_steps > 0 and o.trace_path.is_file()
    where = f"; partial trace kept: {o.trace_path}" if o.trace_path.is_file() else ""
    seen = f"{o.steps} step(s) seen, profiling starts at step {config.wait + config.warmup + 1}"
    if ended == "raised":
        o.exit_code = EXIT_FAILED
        when = "after the profiled window" if window_done else (
            f"during the profiled window ({o.profiled_steps} of {config.active} steps recorded)" if have
            else f"before any profiled step completed ({seen}){where}")
        o.message = f"{o.message} {when}"
    elif ended == "interrupted":
        how = f"interrupted ({o.signal})" if o.signal and o.signal != "SIGINT" else "interrupted"
        o.message = (f"{how}: the report covers the {o.profiled_steps} profiled step(s) collected" if have
                     else f"{how} before any profiled step completed ({seen}){where}")
    elif ended == "exited" and not have and o.steps:
        o.message = f"the script exited (code {o.exit_code}) before any profiled step completed ({seen})"
    elif ended == "finished" and not have:
        o.exit_code = EXIT_FAILED
        o.message = (f"no report: the script ended before any profiled step completed ({seen}). Steps come "
                     f"from optimizer.step() or DataLoader iterations; lower --wait/--warmup, or use "
                     f"perfsleuth.profile() and prof.step()")
    elif ended == "stopped":
        o.message = f"stopped the script after step {o.steps} (profiled {o.profiled_steps}); --full runs it to the end"
    if not window_done:
        o.warnings.append(f"the run ended inside the active window ({o.profiled_steps} of {config.active} steps): "
                          f"the last step is partial")
    if o.rank not in (None, 0) and o.exit_code == 0:
        o.message = None  # rank 0 speaks for a healthy run
    if o.export_error:  # perfsleuth's failure, said as such; never the script's
        o.message = f"{o.export_error}" + (f"; {o.message}" if o.message else "")
        if o.exit_code == 0:
            o.exit_code = EXIT_OUTPUT
    if have and o.rank in (None, 0):
        o.report = analyze(o.trace_path, o.warnings)


def analyze(trace_path: Path, warnings: Sequence[str] = ()):
    from ..api import analyze_path

    report = analyze_path(trace_path, jobs=1)  # no fork from a process running torch
    report.steps.warnings.extend(warnings)
    return report


def _execute(target: Target) -> None:
    if target.module:
        runpy.run_module(target.name, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(str(target.path), run_name="__main__")


@contextlib.contextmanager
def _script_environment(target: Target):
    """sys.argv as the script expects it; its folder (the working directory for -m) first on sys.path;
    sys.argv, sys.path and the working directory restored afterwards."""
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    sys.argv = [str(target.path) if target.path else target.name, *target.args]
    first = saved_cwd if target.module else os.path.dirname(os.path.abspath(target.path))
    try:
        with _sys_path_first(first):
            yield
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)  # a script that changed directory: the reports still go where asked


@contextlib.contextmanager
def _sys_path_first(folder: str):
    saved = list(sys.path)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.path[:] = saved


def format_user_traceback(exc: BaseException) -> str:
    """The script's traceback as Python would print it, without perfsleuth's and runpy's frames."""
    te = traceback.TracebackException.from_exception(exc)
    seen: set = set()
    todo = [te]
    while todo:
        t = todo.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        t.stack = traceback.StackSummary.from_list([f for f in t.stack if not _ours(f.filename)])
        todo += [x for x in (t.__cause__, t.__context__) if x is not None]
    return "".join(te.format())


def _ours(filename: str) -> bool:
    name = os.path.abspath(filename) if not filename.startswith("<") else filename
    return name in (_HERE, _RUNPY) or filename in ("<frozen runpy>", OWN_FRAME)

