"""The memory window of `perfsleuth run` and `perfsleuth.profile()`: what fills memory, and whether
it grows.

After the analysed window and its unprofiled `after` steps, and before the stacks window, `steps`
steps (`RunConfig.memory_steps`, 3: a level that grows step after step needs three step ends to be
seen) are recorded by a profiler session of their own with `profile_memory`, `record_shapes` and
`with_stack` (all three are needed by torch's memory profile, which labels each tensor:
memory_categories.py). Its trace is written beside the main one as `trace.memory.pt.trace.json.gz`
(trace/companion.py); its `[memory]` events, one per allocation and free with the allocator's
totals, and its `ProfilerStep#N` ranges give the level at each step's end. Then the run's facts
(`memory`: the peak, the categories at it, the exact bytes of the optimizers' parameters, gradients
and state, what the window cost) go into the main trace's metadata, which is why the main trace is
finished (gzipped, `perfsleuth_final`) after this window and not before (run.py).

Why a window of its own and not the stacks window: the stacks window is sized
(step_clock.StacksBudget) to 1-2 steps, so that its companion stays small enough to be loaded for
source lines; memory needs three steps with an optimizer step in them, and memory events of its own.
Recording memory in the analysed window would slow every allocation of the steps the shares and the
verdict come from.

It starts like the stacks window (step_clock.OpenAnnotations): at the first boundary after the
`after` steps where no `record_function` block begun under the main session is open, and blocks
begun under it are watched in turn, so the stacks window after it never starts inside one."""

from __future__ import annotations

import logging
import statistics
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

from . import memory_categories
from .other_profilers import ours
from .outputs import write_trace
from .step_clock import AFTER, MEMORY, WAIT, OpenAnnotations, StepClock

log = logging.getLogger(__name__)
# torch's memory profile (the data of profile.export_memory_timeline)
SOURCE = "export_memory_timeline"


class MemoryWindow:
    """A profiler session with memory, shapes and stacks, `steps` steps long, written to `path` when
    done; then its facts (`facts`) are computed."""

    def __init__(self, path: Path, steps: int, cuda: bool, meta: Callable[[], dict],
                 optimizers: Callable[[], list], clock: StepClock,
                 max_events: Optional[int] = None):
        self.path, self.steps, self.cuda, self.meta = Path(path), steps, cuda, meta
        # categories only for a window of at most this many op and memory events
        self.max_events = max_events
        self.optimizers, self.clock = optimizers, clock
        self.seen = 0
        self.written = False
        self.facts: Optional[dict] = None
        self._prof: Any = None
        self._known: Optional[dict] = None
        self._stopping = False

    @property
    def device(self) -> str:
        return memory_categories.device_of(self.cuda)

    def start(self) -> "MemoryWindow":
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        # "won't be using warmup": the window is recorded whole, on purpose
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # a schedule, so that each step is a `ProfilerStep#N` range (0 to steps - 1)
            steps = schedule(wait=0, warmup=0, active=self.steps, repeat=1)
            self._prof = ours(profile(activities=activities, record_shapes=True,
                                      profile_memory=True, with_stack=True, schedule=steps))
        self._prof.start()
        return self

    def step(self) -> bool:
        """One boundary; True once the window is over (recorded, written and its facts computed)."""
        if self._prof is None:
            return True
        self.seen += 1
        # at each boundary: a script that ends inside the window takes them with it
        self._read_optimizers()
        # this boundary stops the recording: what goes into it goes in first
        if self.seen >= self.steps:
            self._stop_facts()
        self._prof.step()
        if self.seen >= self.steps:
            self.finish()
        return self._prof is None

    def _stop_facts(self) -> None:
        """While the profiler still records (torch keeps metadata added then): the run's metadata;
        and the optimizers' tensors, at a step boundary: an optimizer step has just ended, its
        gradients exist."""
        if self._stopping:
            return
        self._stopping = True
        self._read_optimizers()
        try:
            import json

            self._prof.add_metadata_json("perfsleuth", json.dumps(self.meta()))
        except Exception:  # never the user's run's problem
            pass

    def _read_optimizers(self) -> None:
        """The live optimizers' exact bytes (kept from the last boundary that saw one)."""
        try:
            self._known = memory_categories.known_bytes(self.optimizers()) or self._known
        except Exception as exc:
            log.warning("memory: could not read the optimizers' tensors: %s", exc)

    def finish(self) -> None:
        """Stop, write what was recorded and compute the facts (also when the run ends inside the
        window); idempotent; never raises into the script."""
        if self._prof is None:
            return
        self._stop_facts()
        prof, self._prof = self._prof, None
        known = self._known
        prof.__exit__(None, None, None)
        write_s = None
        if self.seen:
            t0 = time.perf_counter()
            try:
                write_trace(prof, self.path)
                self.written = True
                write_s = time.perf_counter() - t0
            except OSError as exc:
                log.warning("memory: the memory window could not be written to %s: %s",
                            self.path, exc)
        self.facts = self._facts(prof, known, write_s)

    def _facts(self, prof: Any, known: Optional[dict], write_s: Optional[float]) -> dict:
        out = blank(self.device, None)
        out["known"] = known
        if not self.seen:
            out["unavailable"] = "the run ended before a step of the memory window completed"
            return out
        t0 = time.perf_counter()
        events = _events(prof)
        if self.max_events is not None and events is not None and events > self.max_events:
            out["unavailable"] = (f"categories not computed: the memory window recorded {events:,} "
                                  f"op and memory events, over {self.max_events:,} (torch's memory "
                                  "profile takes 1-2.5 ms each); "
                                  "the memory trace holds the allocations")
            out["cost"] = self._cost(0.0, write_s)
            return out
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                peak, categories = memory_categories.timeline_peak(prof, self.device, known)
            out.update(peak_bytes=int(peak), categories_at_peak=categories)
        except Exception as exc:  # a torch without the memory profile, or one that changed it
            out["unavailable"] = f"torch's memory profile failed: {type(exc).__name__}: {exc}"
            log.warning("memory: %s", out["unavailable"])
        out["cost"] = self._cost(time.perf_counter() - t0, write_s)
        return out

    def _cost(self, timeline_s: float, write_s: Optional[float]) -> dict:
        """What recording memory cost: the window's steps against as many unprofiled steps (their
        median), and the work at its end (writing its trace, torch's memory profile)."""
        steps = self.clock.values(MEMORY)
        # the first wait step warms up
        plain = self.clock.values(WAIT)[1:] + self.clock.values(AFTER)
        median = statistics.median(plain) if plain else None
        size = self._size()
        return {"steps": len(steps), "window_s": round(sum(steps) / 1e6, 6),
                "unprofiled_window_s": (round(median * len(steps) / 1e6, 6)
                                        if median is not None else None),
                "write_s": round(write_s, 6) if write_s is not None else None,
                "categories_s": round(timeline_s, 6), "trace_bytes": size}


    def _size(self) -> Optional[int]:
        try:
            return self.path.stat().st_size if self.written else None
        except OSError:
            return None


def _events(prof: Any) -> Optional[int]:
    """Op and memory events the profiler recorded (what torch's memory profile costs in proportion
    to); the Python function events of `with_stack` are left out: they cost it next to nothing
    (10,000 of them added to a window of 9,500 op and memory events left its 14-17 s as it was),
    and a Python-heavy loop (Lightning's, a Python Dataset's) records more of them than of ops."""
    try:
        return sum(1 for e in prof.profiler.kineto_results.events() if not e.is_python_function())
    except Exception:
        return None


def blank(device: str, unavailable: Optional[str]) -> dict:
    """The `memory` metadata with nothing measured (yet): every key, `unavailable` saying why."""
    return {"device": device, "source": SOURCE, "peak_bytes": None, "categories_at_peak": None,
            "known": None,
            "cost": None, "unavailable": unavailable}


class MemorySchedule:
    """When the memory window runs: due once the main window and its `after` steps are over
    (`main_done`), started at the first boundary after that where no `record_function` block begun
    under the main session is open, done after its steps. Without a `path` there is no memory window
    (`--no-memory`, or `memory_steps=0`), and `final()` says so."""

    def __init__(self, path: Optional[Path], steps: int, annotations: OpenAnnotations,
                 installed: bool,
                 window: Callable[[Path, int], MemoryWindow], cuda: Callable[[], bool]):
        self.path, self.steps, self.annotations = path, steps, annotations
        self.installed = installed  # the stacks window watches the annotations already
        self.make, self.cuda = window, cuda
        self.window: Optional[MemoryWindow] = None
        self.done: Optional[MemoryWindow] = None
        self.due = False
        self._unwatch: Callable[[], None] = lambda: None

    def watch(self) -> None:
        """From the start of the main window (the stacks window's watch does it, when there is one).
        """
        if self.path is not None and not self.installed:
            self.annotations.watching = True
            self._unwatch = self.annotations.install()

    def unwatch(self) -> None:
        self._unwatch()

    def main_done(self, start_now: bool) -> bool:
        """The main window and its `after` steps are over; True when a memory window is due (then
        started at this boundary when `start_now` and no block begun under the main session is
        open)."""
        self.annotations.watching = False
        self.due = self.path is not None and self.done is None
        if self.due and start_now:
            self.step()
        return self.pending

    @property
    def pending(self) -> bool:
        return self.due or self.window is not None

    def step(self) -> bool:
        """One boundary; True once the memory window is over."""
        if self.due:
            if self.annotations.clear:
                self.due = False
                self.window = self.make(self.path, self.steps).start()
                # the stacks window must not start inside its blocks
                self.annotations.watching = True
            return False
        if self.window.step():
            self._over()
            return True
        return False

    def _over(self) -> None:
        self.done, self.window = self.window, None
        self.annotations.watching = False

    def finish(self) -> None:
        """The run ended: write and measure what the window recorded."""
        self.due = False
        if self.window is not None:
            self.window.finish()
            self._over()

    def final(self) -> dict:
        """`memory_trace` and `memory` for the main trace's metadata."""
        device = memory_categories.device_of(self.cuda())
        if self.path is None:
            return {"memory_trace": None,
                    "memory": blank(device, "not recorded (--no-memory, memory_steps=0)")}
        if self.done is None:
            return {"memory_trace": None, "memory": blank(
                device, "the run ended before the memory window (it follows the recorded window "
                "and its after steps)")}
        facts = self.done.facts or blank(device, "the memory window recorded nothing")
        return {"memory_trace": self.path.name if self.done.written else None, "memory": facts}


def schedule(session: Any) -> MemorySchedule:
    """The memory window of a run.ProfileSession (`RunConfig.memory_steps`; none when 0)."""
    from ..trace.companion import memory_name

    c, main = session.config, session.trace_path
    return MemorySchedule(
        main.with_name(memory_name(main.name)) if c.memory_steps else None, c.memory_steps,
        session._stacks.annotations, installed=session.stacks_path is not None,
        window=lambda path, steps: MemoryWindow(path, steps, session.cuda, lambda: session._meta(
            role="memory", main_trace=session.trace_path.name), session.hooks.live_optimizers,
            session.step_clock,
            c.memory_categories_events),
        cuda=lambda: session.cuda)
