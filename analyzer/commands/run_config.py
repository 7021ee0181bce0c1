"""Every profiling default of `perfsleuth run` and `perfsleuth.profile()`, once: the schedule, what the
analysed window records, the stacks window after it (docs/run.md)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError


@dataclass(frozen=True)
class RunConfig:
    """Every profiling default, once (the CLI options and `perfsleuth.profile()` read them from here)."""

    wait: int = 5  # steps run unprofiled first, timed: the unprofiled step time (docs/run.md#measurement)
    warmup: int = 2  # steps traced but discarded (profiler start-up cost)
    active: int = 5  # steps recorded and analyzed
    # steps run unprofiled right after the recorded window, timed: with the `wait` steps, the unprofiled step
    # time; a machine whose load changed shows as the two halves disagreeing (docs/run.md#measurement)
    after: int = 4
    with_stack: bool = False  # Python stacks in the analysed window itself (they cost most of the overhead)
    record_shapes: bool = False  # input shapes and dtypes in the analysed window (up to +50 % on tiny ops)
    stack_steps: int = 2  # then this many steps with stacks (and shapes), for source lines and dtypes (0: none)
    stack_shapes: bool = True  # input shapes in that stacks window
    # End the user's code once the window is recorded. Off for `perfsleuth.profile()`: a library never cuts
    # a training run short unless asked. `perfsleuth run` turns it on unless --full.
    stop_after_window: bool = False
    # Record lightly (no stacks, no shapes) until the first step boundary, so that a run without any
    # boundary is analysed as one window. Costs ~10-20 us and ~1.7 KB per torch op run before the first
    # step (docs/run.md); off: such a run gets no report.
    fallback_window: bool = True

    def __post_init__(self):
        for name, least in (("wait", 0), ("warmup", 0), ("active", 1), ("after", 0), ("stack_steps", 0)):
            if getattr(self, name) < least:
                raise UsageError(f"--{name} must be at least {least}")

    @property
    def window(self) -> int:
        """Steps from the start until the recorded window is complete."""
        return self.wait + self.warmup + self.active

    @property
    def stacks_window(self) -> int:
        """Steps of the separate stacks window after the main one (none when the main one has stacks)."""
        return 0 if self.with_stack else self.stack_steps
