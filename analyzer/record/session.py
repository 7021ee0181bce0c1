"""`perfsleuth run`: profile an unmodified training script under torch.profiler, then analyze the trace.

The only module that imports torch, and only inside functions: `perfsleuth analyze` never needs it.
docs/run.md is the user's guide. Step boundaries come from hooks (step_hooks.py: `prof.step()`, the
optimizer, DataLoader iterations, the outermost model call, in that order of precedence).

Stopping early: when the window completes, the step hook raises `_WindowComplete`, a private
`BaseException` subclass that the runner catches. It is safe because `except Exception` in the
script does not catch it (it unwinds like Ctrl-C, running the script's `finally` blocks and `with`
exits); the runner then drops the traceback (the frames holding DataLoader iterators), shuts down the
workers of every multi-process iterator it saw (persistent ones included) and collects garbage. A
script that swallows it (bare `except:`) gets it again at its next step.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any, Callable, Optional

from ..trace.companion import companion_name
from . import code_sites, cpu_peak, forks, memory_window, other_profilers as rival, trace_metadata as run_facts, outputs as run_outputs
from . import model_flops
from . import batched_probe
from .config import RunConfig
from .outcome import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OUTPUT, WHOLE_RUN_WARNING,  # noqa: F401
                          RunOutcome, analyze, conclude)
from .paths import rank_info
from .compile_facts import CompileWatch
from .step_clock import (ACTIVE, AFTER, MEMORY, REST, STACKS, STARTING, WAIT, WARMUP,
                         StacksBudget, StacksSchedule, StepClock, phase_words)
from .step_hooks import StepHooks
from .target import Target, execute, script_environment, format_user_traceback, require_torch  # noqa: F401

log = logging.getLogger(__name__)


class _WindowComplete(BaseException):
    """Raised from a step hook when the active window is recorded (see the module docstring)."""


# --- the profiling session: the machinery under `perfsleuth run` and `perfsleuth.profile()` -------
class ProfileSession:
    """torch.profiler with a wait/warmup/active schedule, stepped from hooks; writes one gzipped trace.

    Until the first step boundary a light recorder runs (no stacks, no shapes, no schedule): if no
    boundary ever comes, its recording is the trace, analysed as one window (`whole_run`); at the
    first boundary it is stopped and thrown away, and the scheduled profiler takes over. With
    `wait=0` the scheduled profiler records from the start, and with `fallback_window=False` nothing
    is recorded before the first boundary: no light recorder either way.

    Then `after` steps run unprofiled and timed (step_clock.py): the trace, exported as JSON when the window
    ends, is gzipped to its place with their times when they are over (run_outputs.finish_trace)."""

    def __init__(self, config: RunConfig, trace_path: Path, raise_on_complete: bool, manual: bool = False):
        self.config = config
        self.trace_path = Path(trace_path)
        self.raise_on_complete = raise_on_complete
        self.steps = 0  # step boundaries seen while profiling
        self.hooks = StepHooks(self.step)
        if manual:
            self.hooks.source = "manual"
        self.window_done = False  # the analysed window is recorded
        self.done = False  # ... and the stacks window after it (step_clock.py)
        self.trace_written = False
        self.export_error: Optional[str] = None  # the trace could not be written where asked
        self.whole_run = False  # the trace is the light recording of everything (no step boundary)
        self._after_left = 0  # unprofiled steps still to time after the recorded window
        self._raw: Optional[run_outputs.RawTrace] = None  # the window's trace, exported, not yet finished
        self.step_clock = StepClock()  # step times, profiled or not (self._clock: CPU time, for forecasts)
        self.stacks_path = (self.trace_path.with_name(companion_name(self.trace_path.name))
                            if config.stacks_window else None)
        self._stacks = StacksSchedule(self.stacks_path, config.stacks_window, config.stack_shapes, lambda: self._meta(
            role="stacks", main_trace=self.trace_path.name), budget=lambda steps: StacksBudget.of(
            steps, self.trace_path, self.step_clock, self.profiled_steps, self.hooks.closure_calls_per_step))
        self.hooks.on_closure = self._closure_returned
        self._memory = memory_window.schedule(self)  # the memory window, before the stacks one
        self._flops = model_flops.schedule(self)  # one step under FlopCounterMode, before the memory window
        self._prof: Any = None  # the scheduled profiler, from the first boundary on (from the start with wait=0)
        self._light: Any = None  # the light recorder, until the first boundary
        self._keep_light = False
        self.cuda = False  # a profiler of this session records CUDA activity (forks.py)
        self.rival_at: Optional[str] = None  # where the script started its own profiler (record/other_profilers.py), if it did
        self._unwatch_rival = lambda: None
        self._finished = False
        self._host: Optional[dict] = None  # run_facts.host_facts, taken once per profiler
        self._meta_sent: tuple = (None, -1)  # (profiler, loaders seen) the metadata was last added for
        self._clock = run_facts.CpuClock()  # cores and CPU time over the active window, for the forecasts
        self._user_dir: Optional[str] = None  # the script's folder: its modules are the user's (code_sites.py)
        self.hooks.around_next = self._clock.loader_call
        self._compile = CompileWatch()  # which steps torch.compile compiled in, and why (compile_facts.py)
        self.on_phase: Optional[Callable[[str, str], None]] = None  # progress.PhaseLine under `perfsleuth run`
        self._said: Optional[tuple] = None  # the phase last told to on_phase
        self.program: Optional[str] = None  # the script's file name or module (diff compares it)

    @property
    def source(self) -> Optional[str]:
        """Where the boundaries that count come from (step_hooks.SOURCES), None before the first."""
        return self.hooks.source

    @property
    def recording(self) -> bool:
        """One of this session's profilers records now (forks.py: a child forked meanwhile stops recording)."""
        return any(x is not None for x in (self._light, self._prof, self._stacks.window, self._memory.window))

    @property
    def profiled_steps(self) -> int:
        """Steps of the active window that completed."""
        c = self.config
        return max(0, min(c.active, self.steps - c.wait - c.warmup))

    def _profiler(self, light: bool) -> Any:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        forks.profiling(self)  # a fork from now on: the child is neither profiled nor stopped, and never hangs
        c = self.config
        self.cuda = self.cuda or torch.cuda.is_available()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        if light:
            return rival.ours(profile(activities=activities, on_trace_ready=self._on_light_ready))
        return rival.ours(profile(activities=activities, record_shapes=c.record_shapes, with_stack=c.with_stack,
                                  schedule=schedule(wait=c.wait, warmup=c.warmup, active=c.active, repeat=1),
                                  on_trace_ready=self._on_trace_ready))

    def start(self) -> "ProfileSession":
        self._clock.probe()  # before profiling starts: its children are not in the trace
        if self.config.wait == 0:
            self._prof = self._profiler(light=False)
            self._prof.start()  # already recording (warm-up): metadata is kept from here on
        elif self.config.fallback_window:
            self._light = self._profiler(light=True)
            self._light.start()
        self._clock.tick(0, self.config.wait + self.config.warmup)
        self._say_phase(STARTING)  # said before the script's imports and set-up (they can be long)
        self._user_dir = code_sites.script_dir()  # before the script can change sys.path
        self._record_metadata()
        self.hooks.install(modules=True)
        self._stacks.watch()
        self._memory.watch()
        self._unwatch_rival = rival.watch(self._rival)
        return self

    def _rival(self, where: Optional[str]) -> None:
        """The script starts a torch.profiler of its own (record/other_profilers.py): this session stops profiling first."""
        if not self._finished and self.hooks.mine():
            self.rival_at = rival.stand_aside(where, self.finish)

    def _record_metadata(self, final: bool = False, **extra) -> None:
        """Machine and loader facts into the trace (record/trace_metadata.py). torch keeps metadata added while it
        records (warm-up or active), the last value of a key winning: called at each such step, it adds
        them only when there is something new (another profiler, another loader) -- inside a profiled
        step every Python call is recorded, and the step's time must stay the script's own. Host facts
        are taken afresh for each profiler: by the scheduled one the script has set its threads. `final`:
        the step and CPU clocks' times at the end of the recorded window, or a partial step."""
        prof = self._light if self._light is not None else self._prof
        if prof is None or (self._meta_sent == (prof, len(self.hooks.loaders)) and not final):
            return
        try:
            if self._meta_sent[0] is not prof:  # the script may have set its threads since the last one
                self._host = run_facts.host_facts(*rank_info())
            prof.add_metadata_json(run_facts.METADATA_KEY, json.dumps(self._meta(**extra)))
            self._meta_sent = (prof, len(self.hooks.loaders))
        except Exception as exc:  # never the user's run's problem
            log.warning("could not record machine facts in the trace: %s", exc)

    def _meta(self, **extra) -> dict:
        c = self.config
        host = self._host if self._host is not None else run_facts.host_facts(*rank_info())
        return {**run_facts.metadata(host, self.hooks.loaders, self._clock.facts()),
                "clock": self.step_clock.metadata(),
                "schedule": {"wait": c.wait, "warmup": c.warmup, "active": c.active, "after": c.after,
                             "with_stack": c.with_stack,
                             "record_shapes": c.record_shapes, "stack_steps": c.stacks_window,
                             "stack_shapes": c.stack_shapes, "memory_steps": c.memory_steps},
                "stacks_trace": self.stacks_path.name if self.stacks_path else None,
                **({"program": self.program} if self.program else {}),
                "optimizers": self.hooks.optimizers, "code": code_sites.code_facts(self._user_dir),
                **({"compile": compiled} if (compiled := self._compile.facts()) else {}), **extra}

    def _closure_returned(self) -> None:
        """After each closure call inside `optimizer.step(closure)`: a stacks window cut at the first one ends."""
        if self._stacks.window is not None and self._stacks.closure_returned():
            self._complete()
            if self.raise_on_complete:
                raise _WindowComplete()

    def step(self, source: str, obj: Any = None) -> None:
        """A step boundary from `source` (the hooks, or `prof.step()`): counted if the source counts. Each
        step is timed by the clock, between this hook and the last one (step_clock.py)."""
        if not self.hooks.mine() or not self.hooks.accept(source, obj):  # another thread, or a forked child
            return
        self.step_clock.enter()
        try:
            self._advance()
        finally:
            phase = self._phase()
            self.step_clock.leave(self.steps, phase)
            self._compile.boundary(phase)
        self._say_phase(phase)
        if self.done and self.raise_on_complete:
            raise _WindowComplete()  # (again, when the script swallowed the first one)

    def _say_phase(self, phase: str) -> None:
        """The phase the run is in, in words, to `on_phase` (a line on the terminal when it changes)."""
        said = phase_words(self.config, phase)
        if said is not None and self.on_phase is not None and not self.done and said != self._said:
            self._said = said
            # perfsleuth's own time where a window may record it; never in the light recording, where
            # any op would count as the script's torch work (a script that ran none says so)
            with run_facts.own_span() if self._light is None else contextlib.nullcontext():
                self.on_phase(*said)

    def _phase(self) -> str:
        """The phase of the step that starts now (step_clock.py)."""
        c = self.config
        if self._prof is not None:
            return WAIT if self.steps < c.wait else WARMUP if self.steps < c.wait + c.warmup else ACTIVE
        if self._after_left:
            return AFTER
        return MEMORY if self._memory.window is not None else STACKS if self._stacks.window is not None else REST

    def _advance(self) -> None:
        if self.done or self._finished:  # after the windows, or stopped early (Ctrl-C, the end of a `with`)
            return
        if self._light is not None:
            self._end_light(keep=False)
        self.steps += 1
        if self._after_left:  # an unprofiled step after the window is over (timed by step())
            self._after_left -= 1
            if not self._after_left:
                self._main_over()
        elif self._flops.pending:  # the step FlopCounterMode counted is over: then the memory window
            self._flops.step() and self._main_over(flops_over=True)
        elif self._memory.pending:  # the memory window, then the trace is finished with its facts
            self._memory.step() and self._main_over(memory_over=True)
        elif self._stacks.pending:  # the short stacks window after the analysed one
            if self._stacks.step():
                self._complete()
        else:
            self._step_main()

    def _step_main(self) -> None:
        if self._prof is None:
            self._prof = self._profiler(light=False)
            self._prof.start()
        if self.steps == self.config.window:  # this step ends the window: its times go in first
            with run_facts.own_span():
                self._record_metadata(final=True)
            self._prof.step()  # not inside a range: the profiler stops in it
        else:
            with run_facts.own_span():  # forecasts leave out the profiler's step and this bookkeeping
                self._prof.step()
                self._clock.tick(self.steps, self.config.wait + self.config.warmup)
                self._clock.see_workers(self.hooks.iterators())
                if not self.window_done and self.steps >= self.config.wait:
                    self._record_metadata()
        if self.window_done:
            prof, self._prof = self._prof, None
            prof.__exit__(None, None, None)
            self._stacks.annotations.watching = False  # blocks begun from now on were never recorded
            self._after_left = self.config.after
            if not self._after_left:
                self._main_over()

    def _main_over(self, memory_over: bool = False, flops_over: bool = False) -> None:
        """The recorded window and the `after` steps are over: one step counted by FlopCounterMode (model_flops.py), the
        memory window (memory_window.py); then the trace is
        finished with their times and its facts; then the stacks window (from this boundary on when steps passed
        since the last profiler session: step_clock.OpenAnnotations)."""
        if not (memory_over or flops_over) and self._flops.main_done():
            return
        if not memory_over and self._memory.main_done(start_now=bool(self.config.after) or flops_over):
            return
        self._finish_trace()
        if self._stacks.main_done():
            self._complete()
        elif self.config.after and not memory_over:
            self._stacks.step()

    def _complete(self) -> None:
        self.done = True
        self.finish(keep_hooks=self.raise_on_complete)

    def _end_light(self, keep: bool) -> None:
        light, self._light = self._light, None
        self._keep_light = keep
        light.__exit__(None, None, None)  # calls _on_light_ready

    def _on_light_ready(self, prof) -> None:
        if self._keep_light and prof.events():  # a run that recorded no op at all has nothing to analyse
            self._export(prof)
            self.whole_run = True

    def _on_trace_ready(self, prof) -> None:
        """The recorded window is over (or cut short): its trace is exported as JSON now, finished later."""
        self.window_done = self.steps >= self.config.window
        self._raw = run_outputs.export_raw(prof, self.trace_path)

    def _finish_trace(self) -> None:
        """Gzip the exported trace to its place, with all the clock's times as `perfsleuth_final`; never raises."""
        raw, self._raw = self._raw, None
        if raw is None:
            return
        compiled = self._compile.facts()  # torch.compile in the steps timed after the window too
        if self.on_phase is not None:
            self.on_phase("writing", f"the trace ({self.trace_path.name})")
        # this CPU's peak at the window's thread count: after the steps, once per machine (cpu_peak.py)
        threads = (self._host or {}).get("torch_threads")
        given = self.config.peak_tflops is not None or self.config.peak_arch is not None  # not measured then
        peak = None if given else cpu_peak.for_run(self.config.record_shapes, threads)
        # the loops' small ops timed batched at their recorded shapes (batched_probe.py; issue 39)
        batched = batched_probe.for_run(raw.raw, self.profiled_steps, self.config.record_shapes, threads)
        final = {"clock": self.step_clock.metadata(), **({"compile": compiled} if compiled else {}),
                 **({"batched_probe": batched} if batched else {})}
        written, self.export_error = run_outputs.finish_trace(raw, {**final, **({"peak": peak} if peak else {}),
                                                                    "model_flops": self._flops.final(),
                                                                    **self._memory.final()})
        self.trace_written = written is not None
        self.trace_path = written or self.trace_path
        log.info("trace written: %s (%d profiled steps)", self.trace_path, self.profiled_steps)

    def _export(self, prof) -> None:
        """Called by torch from inside the script's step: nothing raised here may reach the script
        (run_outputs.export_trace: a trace that cannot go where asked goes to a temporary folder, and
        `export_error` says so; the caller reports it as perfsleuth's failure, never the script's)."""
        written, self.export_error = run_outputs.export_trace(prof, self.trace_path)
        self.trace_written = written is not None
        self.trace_path = written or self.trace_path

    def finish(self, keep_hooks: bool = False, whole_run: bool = False) -> None:
        """Stop profiling (a window cut short is still exported, its last step named partial in the trace;
        with `whole_run`, a run that saw no step boundary keeps its light recording as the trace); stop and
        write the stacks window; remove the hooks unless asked to keep them."""
        if not self.hooks.owner.in_process():  # a forked child: the profiler and its files are the parent's
            return
        self._finished = True
        if self._light is not None:
            self._record_metadata()  # the loaders seen since the start
            self._end_light(keep=whole_run)
        c = self.config
        if self._prof is not None and c.wait + c.warmup <= self.steps < c.window:  # recording: a step is cut short
            self._record_metadata(final=True, partial_step=f"ProfilerStep#{self.steps}")
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.__exit__(None, None, None)
        self._after_left = 0
        self._flops.finish()  # a count still running: its step did not complete
        self._memory.finish()  # what the memory window recorded, its facts into the main trace
        self._finish_trace()  # with the unprofiled steps after the window timed so far
        self._stacks.finish()
        if not keep_hooks or self.rival_at:
            self.hooks.remove()
            self._stacks.unwatch(), self._memory.unwatch()
            self._unwatch_rival()

    def shutdown_workers(self) -> None:
        """End the worker processes of the multi-process DataLoader iterators the script used."""
        self.hooks.shutdown_workers()
