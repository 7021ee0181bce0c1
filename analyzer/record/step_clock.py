"""Measuring without distorting: a cheap clock on every step, and the short stacks window.

`StepClock` times each step with `time.perf_counter` at the step boundaries the session already hooks,
profiled or not: the time between leaving one boundary hook and entering the next, so perfsleuth's own
work at a boundary (starting the profiler, writing a trace) is not in any step. Beside each step's wall
time it keeps the process's CPU time over the same interval (`time.process_time`: all its threads), the
stepping thread's own (`time.thread_time`: with several intra-op threads the others' spinning between
parallel regions is process CPU time the profiler does not cost) and, on Linux, the time the stepping
thread waited runnable for a CPU (`QueuedClock`, schedstat), so that a step that waited for a core (the
machine busy) can be told from one that did more work or waited for data. Each step is labelled with the
phase it ran in:

    wait (not profiled) | warmup (profiler tracing, discarded) | active (recorded) |
    after (not profiled, after the recorded window) | memory | stacks | rest (not timed)

The unprofiled baseline is the `wait` steps before the recorded window and the `after` steps right after
it (`RunConfig.after`). Torch keeps only metadata added while it records, so the clock's values as they
stand at the window's end go into the trace's `perfsleuth.clock`; the session writes the trace's file once
the `after` steps are timed too, with the whole clock under the top-level `perfsleuth_final`
(run_outputs.finish_trace). `analysis/measurement.py` turns the values into the report's `measurement`.

`StacksWindow` is the second, short profiler session after the main window: Python stacks on, a few
steps, written beside the main trace as its companion (`trace/companion.py`); its only use is source
lines for the findings. It starts one step or more after the main window and its `after` steps end
(`OpenAnnotations`), and `StacksBudget` sizes it from the main window so that analysing it never costs
more than the main trace.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ..config import Config
from .other_profilers import ours
from .outputs import write_trace

log = logging.getLogger(__name__)
WAIT, WARMUP, ACTIVE, AFTER, STACKS, REST = "wait", "warmup", "active", "after", "stacks", "rest"
MEMORY = "memory"  # the memory window (memory_window.py), between the after steps and the stacks window
STARTING = "starting"  # the script's start up to its first step (its imports, its data set-up)


def phase_words(c: Any, phase: str) -> Optional[tuple]:
    """(what, detail) of a phase for the line on the terminal (progress.PhaseLine); `c` a RunConfig."""
    return {STARTING: ("running", "the script, up to its first step (its imports and set-up)"),
            WAIT: ("waiting", f"{c.wait} steps unprofiled, timed (the baseline)"),
            WARMUP: ("profiling", f"{c.warmup} warm-up + {c.active} recorded steps"),
            ACTIVE: ("profiling", f"{c.warmup} warm-up + {c.active} recorded steps"),
            AFTER: ("waiting", f"{c.after} steps unprofiled after the window, timed"),
            MEMORY: ("profiling", f"{c.memory_steps} steps with memory (what fills it)"),
            STACKS: ("profiling", f"{c.stacks_window} steps with Python stacks (source lines)")}.get(phase)


class QueuedClock:
    """Seconds the calling thread has spent runnable but waiting for a CPU (Linux schedstat's run delay:
    preemption, measured), or None where that cannot be read (not Linux, a kernel without it). The file
    stays open, per thread: a read costs a few µs."""

    def __init__(self, path: str = "/proc/thread-self/schedstat"):
        self.path, self._fd, self._tid, self.ok = path, None, None, True

    def __call__(self) -> Optional[float]:
        if not self.ok:
            return None
        try:
            tid = threading.get_native_id()
            if self._fd is None or tid != self._tid:
                self.close()
                self._fd, self._tid = os.open(self.path, os.O_RDONLY), tid
            return int(os.pread(self._fd, 128, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError, AttributeError):
            self.ok = False
            return None

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self):
        self.close()


class StepClock:
    """Wall, CPU and queued durations of the steps between boundary hooks (µs), by the phase each ran in."""

    def __init__(self, clock=time.perf_counter, cpu_clock=time.process_time, queue_clock=None,
                 thread_clock=time.thread_time):
        self.clock, self.cpu_clock, self.thread_clock = clock, cpu_clock, thread_clock
        self.queue_clock = queue_clock if queue_clock is not None else QueuedClock()
        self._open: Optional[tuple] = None  # (step index, phase, the four clocks when the step began)
        self.intervals: list = []  # (step index, phase, wall µs, CPU µs, queued µs or None, the stepping
        #                            thread's CPU µs); step j runs between boundaries j and j + 1

    def _now(self) -> tuple:
        return self.queue_clock(), self.thread_clock(), self.cpu_clock(), self.clock()

    def enter(self) -> None:
        """A boundary hook starts: the step that just ended is timed (the one before the first boundary
        holds the script's start-up: it is never opened, so never timed)."""
        if self._open is not None:
            (j, phase, (q0, t0, c0, w0)), (q, t, c, w) = self._open, self._now()
            queued = round((q - q0) * 1e6, 3) if q is not None and q0 is not None else None
            self.intervals.append((j, phase, round((w - w0) * 1e6, 3), round((c - c0) * 1e6, 3), queued,
                                   round((t - t0) * 1e6, 3)))
            self._open = None

    def leave(self, j: int, phase: str) -> None:
        """The boundary hook returns: step `j` starts now, in `phase` (a `rest` step is not timed: a loop that
        runs on after the windows does not grow the list)."""
        if phase != REST:
            self._open = (j, phase, self._now())

    def _column(self, phase: str, i: int) -> list:
        return [x[i] for x in self.intervals if x[1] == phase]

    def values(self, phase: str) -> list:
        return self._column(phase, 2)

    def metadata(self) -> dict:
        """The trace's `perfsleuth.clock`, µs: wall and process CPU times of the unprofiled steps before (`wait`)
        and after (`after`) the recorded window and of the profiled (`active`) ones, the stepping thread's CPU
        time (`*_thread_us`); and the time the stepping thread waited for a CPU in each (`*_queued_us`, only
        where the system says)."""
        out = {"unit": "us"}
        for key, phase in (("unprofiled", WAIT), ("after", AFTER), ("profiled", ACTIVE)):
            out[f"{key}_us"], out[f"{key}_cpu_us"] = self._column(phase, 2), self._column(phase, 3)
            out[f"{key}_thread_us"] = self._column(phase, 5)
            queued = self._column(phase, 4)
            if None not in queued:
                out[f"{key}_queued_us"] = queued
        out["profiled_steps"] = [f"ProfilerStep#{x[0]}" for x in self.intervals if x[1] == ACTIVE]
        out.update(warmup_us=self.values(WARMUP), stacks_us=self.values(STACKS), memory_us=self.values(MEMORY))
        return out


class OpenAnnotations:
    """Counts the user's `record_function` blocks that began while the analysed window's profiler was on
    and have not ended yet. A torch profiler session must not start while such a block is open: the block's
    end would be recorded into the new session with the old one's (freed) bookkeeping, which crashes the
    process. So the stacks window starts at the first boundary after the main window where none is open,
    and never inside the step in which the main window stopped (that step's `Optimizer.step` annotation
    began under it)."""

    def __init__(self):
        self.watching = False  # True while the main session runs
        self.open: dict = {}  # id(record_function) -> blocks begun under the main session, not yet ended

    def install(self) -> Callable[[], None]:
        """Wrap record_function's __enter__/__exit__; returns the undo."""
        from torch.autograd import profiler

        cls, enter, exit_ = profiler.record_function, profiler.record_function.__enter__, profiler.record_function.__exit__
        watch = self

        def __enter__(rf):
            if watch.watching:
                watch.open[id(rf)] = watch.open.get(id(rf), 0) + 1
            return enter(rf)

        def __exit__(rf, *exc):
            n = watch.open.pop(id(rf), 0)
            if n > 1:
                watch.open[id(rf)] = n - 1
            return exit_(rf, *exc)

        from .step_hooks import _own_frame  # named like a built-in: source lines skip these frames

        cls.__enter__, cls.__exit__ = _own_frame(__enter__), _own_frame(__exit__)

        def undo():
            cls.__enter__, cls.__exit__ = enter, exit_
        return undo

    @property
    def clear(self) -> bool:
        return not self.open


# Bytes on disk of one step recorded with Python stacks and shapes, per byte of the same step recorded
# without them (the main window), as assumed when sizing the stacks window. Measured on the CPU fixtures
# (perfsleuth run, default schedule): 1.3x tiny_ops, 1.5x module_loop, 1.9x many_params; 138x
# python_dataset, whose main trace (35 KB) is far below the budget's floor, where this does not matter.
STACK_COST = 4.0
LONG_STEP_US = 1_000_000.0  # a main-window step this long (median): one stacks step, not more


class StacksBudget:
    """How much the stacks window records, decided from the main window when it starts. The companion is
    loaded by `analyze` only when it is no larger on disk than max(main trace, `Config.companion_free_bytes`)
    (facts/stacks.py); the window aims at half that, each of its steps estimated at `STACK_COST` times a main
    step (the main trace's bytes over its recorded steps):

    - `steps`: the asked-for steps (2) when they fit; else 1; 1 as well when the main steps are long
      (median >= `LONG_STEP_US`: a second one would cost the run another long step);
    - `cut`: when even one step does not fit and the steps are `optimizer.step(closure)` steps that call the
      closure more than once (LBFGS: up to `max_iter` forward and backward passes a step), the window ends
      when the first closure call returns (`closure`): one forward and backward holds every line a finding
      cites. Its per-step numbers are scaled back to whole steps (`scale`: the closure calls of a main step)."""

    def __init__(self, steps: int, main_bytes: int, main_steps: int, step_us: Optional[float],
                 closure_calls: Optional[int], free_bytes: int):
        self.limit = max(int(main_bytes), int(free_bytes))  # what analysis loads (facts/stacks.py)
        self.per_step = STACK_COST * main_bytes / max(main_steps, 1)
        fits = int(self.limit / 2 // self.per_step) if self.per_step > 0 else steps
        self.steps = max(1, min(steps, fits))
        if step_us is not None and step_us >= LONG_STEP_US:
            self.steps = 1
        self.cut = "closure" if fits < 1 and (closure_calls or 0) > 1 else None
        self.scale = float(closure_calls) if self.cut else 1.0

    @classmethod
    def of(cls, steps: int, main_trace: Path, clock: "StepClock", main_steps: int,
           closure_calls: Optional[int]) -> "StacksBudget":
        """From the main window as it was written: its trace file, its steps and their times."""
        try:
            main_bytes = Path(main_trace).stat().st_size
        except OSError:
            main_bytes = 0
        times = sorted(clock.values(ACTIVE))
        return cls(steps, main_bytes, main_steps, times[len(times) // 2] if times else None, closure_calls,
                   Config().companion_free_bytes)

    def metadata(self) -> dict:
        """The companion's `perfsleuth.stacks_window`."""
        return {"steps": self.steps, "cut": self.cut, "scale": self.scale, "limit_bytes": self.limit,
                "estimated_step_bytes": round(self.per_step)}


class StacksWindow:
    """A short profiler session with Python stacks, `steps` steps long, written to `path` when done."""

    def __init__(self, path: Path, steps: int, record_shapes: bool, meta: Callable[[], dict]):
        self.path, self.steps, self.record_shapes, self.meta = Path(path), steps, record_shapes, meta
        self.seen = 0
        self.written = False
        self._prof: Any = None
        self.cut: Optional[str] = None  # "closure": ends after the first closure call (StacksBudget)

    def start(self) -> "StacksWindow":
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self._prof = ours(profile(activities=activities, record_shapes=self.record_shapes, with_stack=True))
        self._prof.start()
        return self

    def step(self) -> bool:
        """One boundary; True once the window is over: recorded and written, or its trace could not be
        written (that costs source lines only, and the run must still complete)."""
        if self._prof is None:
            return True
        self.seen += 1
        self._prof.step()
        if self.seen >= self.steps:
            self.finish()
        return self._prof is None

    def closure_returned(self) -> bool:
        """A closure call of `optimizer.step(closure)` returned; True once the window is over (cut there)."""
        if self._prof is None or self.cut != "closure":
            return False
        self.seen = max(self.seen, 1)  # the window holds part of a step: still written
        self.finish()
        return True

    def finish(self) -> None:
        """Stop and write what was recorded (also when the run ends inside the window); idempotent."""
        prof, self._prof = self._prof, None
        if prof is None:
            return
        try:  # what the run recorded, the stacks window's step times included (role "stacks")
            prof.add_metadata_json("perfsleuth", json.dumps(self.meta()))
        except Exception:  # never the user's run's problem
            pass
        prof.__exit__(None, None, None)
        if self.seen:
            try:  # called from the script's step: a trace that cannot be written costs source lines, nothing more
                write_trace(prof, self.path)
                self.written = True
            except OSError as exc:
                log.warning("source lines: the stacks window could not be written to %s: %s", self.path, exc)


class StacksSchedule:
    """When the stacks window runs: due once the main window has ended, started at the first boundary after
    that where no `record_function` block begun under the main window is open (`OpenAnnotations`), done
    after its steps. `meta()` gives the window's metadata when it is written. Without a `path` there is no
    stacks window: nothing is watched, and the main window's end is the end."""

    def __init__(self, path: Optional[Path], steps: int, shapes: bool, meta: Callable[[], dict],
                 budget: Optional[Callable[[int], StacksBudget]] = None):
        self.path, self.steps, self.shapes, self.meta = path, steps, shapes, meta
        self.budget_of = budget  # steps asked for -> the budget, from the main window (run.py)
        self.budget: Optional[StacksBudget] = None
        self.annotations = OpenAnnotations()
        self.window: Optional[StacksWindow] = None
        self.due = False
        self._unwatch: Callable[[], None] = lambda: None

    def watch(self) -> None:
        """From the start of the main window."""
        if self.path is not None:
            self.annotations.watching = True
            self._unwatch = self.annotations.install()

    def main_done(self) -> bool:
        """The main window ended; True when that is all (no stacks window to come)."""
        self.annotations.watching, self.due = False, self.path is not None
        return not self.due

    @property
    def pending(self) -> bool:
        """Due or running: the session's boundaries belong to it."""
        return self.due or self.window is not None

    def step(self) -> bool:
        """One boundary; True once the stacks window is over (written, or not writable)."""
        if self.due:
            if self.annotations.clear:
                self.due = False
                self.budget = self.budget_of(self.steps) if self.budget_of is not None else None
                steps = self.budget.steps if self.budget is not None else self.steps
                self.window = StacksWindow(self.path, steps, self.shapes, self._meta)
                self.window.cut = self.budget.cut if self.budget is not None else None
                self.window.start()
            return False
        done = self.window.step()
        if done:
            self.window = None
        return done

    def _meta(self) -> dict:
        meta = self.meta()
        if self.budget is not None:
            meta["stacks_window"] = self.budget.metadata()
        return meta

    def closure_returned(self) -> bool:
        """A closure call returned inside `optimizer.step(closure)`; True when that ended the stacks window."""
        if self.window is None or not self.window.closure_returned():
            return False
        self.window = None
        return True

    def finish(self) -> None:
        """The run ended: write what the window recorded; stop watching."""
        window, self.window, self.due = self.window, None, False
        if window is not None:
            window.finish()

    def unwatch(self) -> None:
        self._unwatch()
