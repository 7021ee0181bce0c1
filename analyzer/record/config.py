"""Every profiling default of `perfsleuth run` and `perfsleuth.profile()`, once: the schedule, what the
analysed window records, the stacks window after it (docs/run.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping, Optional

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
    # Steps recorded with profile_memory (and shapes and stacks, which torch's memory categories need) in a
    # window of their own after the `after` steps: the peak, what fills it, growth per step (memory_window.py).
    # 3: a growing level needs three step ends to be seen. 0 (`--no-memory`): no memory window.
    memory_steps: int = 3
    # torch's memory profile (the categories at the peak) costs about 1-2.5 ms per recorded op and allocation event
    # on a loaded 2-core machine (many_params: 44,000 events, 34 s; LBFGS with 20 closure calls a step: 82,000,
    # 145 s; a 3-step window of a small MLP: 1,400, 1-2 s). Over this many events the categories are not computed,
    # and `memory.unavailable` says so (the memory trace and the optimizers' exact bytes stay).
    # Python function events (with_stack) are not counted: they cost it next to nothing
    # (memory_window._events).
    memory_categories_events: int = 30_000
    # With record_shapes: one step after the `after` steps (before the memory window) counted by torch's
    # FlopCounterMode, the model's FLOPs per step for MFU (model_flops.py). Its cost: one step with every op
    # through a Python dispatch mode, timed and recorded.
    count_flops: bool = True
    # The device's peak for the report's efficiency section, as `analyze --peak-tflops / --peak-arch` (or
    # [tool.perfsleuth]) give it (engine/settings.peak_settings: the arch file already read). Given, this CPU's
    # peak is not measured (cpu_peak.py).
    peak_tflops: Optional[float] = None
    peak_arch: Optional[dict] = field(default=None, hash=False)
    # End the user's code once the window is recorded. Off for `perfsleuth.profile()`: a library never cuts
    # a training run short unless asked. `perfsleuth run` turns it on unless --full.
    stop_after_window: bool = False
    # Record lightly (no stacks, no shapes) until the first step boundary, so that a run without any
    # boundary is analysed as one window. Costs ~10-20 us and ~1.7 KB per torch op run before the first
    # step (docs/run.md); off: such a run gets no report.
    fallback_window: bool = True
    # `perfsleuth run --measure N`: N unprofiled steps timed, split by `split` into `wait` before the window and
    # `after` after it; by default 8 are (`wait` less the start-up step, which is never timed, plus `after`). On CI (the CI environment variable set, as GitHub Actions,
    # GitLab CI and most others do) it is this many: `diff` compares the unprofiled steps, and with 3-4 of them one slow
    # step of a noisy runner widens the noise band past any regression (docs/ci.md#noise-how-a-change-is-called).
    measure_ci = 20  # a class constant, not a field: only the CLI reads it

    @staticmethod
    def split(measure: int) -> tuple:
        """(wait, after) that time `measure` unprofiled steps, half before the window and half after it: `wait`
        counts the script's start-up too (the step before the first boundary, never timed)."""
        if measure < 2:
            raise UsageError("--measure must be at least 2 (steps before and after the window)")
        return measure // 2 + 1, measure - measure // 2

    @classmethod
    def measured(cls, wait: int, after: int) -> int:
        """Unprofiled steps timed with this `wait` and `after` (the inverse of `split`)."""
        return max(wait - 1, 0) + after

    def __post_init__(self):
        for name, least in (("wait", 0), ("warmup", 0), ("active", 1), ("after", 0), ("stack_steps", 0),
                            ("memory_steps", 0)):
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


def on_ci(env: Mapping = os.environ) -> bool:
    """The CI environment variable is set (GitHub Actions, GitLab CI, CircleCI, Travis, Buildkite, ... set
    CI=true); "", "0", "false" and "no" mean not."""
    return env.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unprofiled_steps(measure: Optional[int], wait: Optional[int], after: Optional[int],
                     env: Mapping = os.environ) -> tuple:
    """(wait, after) from `run`'s options: --measure N splits N steps; --wait and --after set each half; with none
    of them, RunConfig's defaults, or `measure_ci` steps on CI."""
    if measure is not None and (wait is not None or after is not None):
        raise UsageError("--measure sets both --wait and --after: give --measure, or --wait and --after")
    if measure is None and wait is None and after is None and on_ci(env):
        measure = RunConfig.measure_ci
    if measure is not None:
        return RunConfig.split(measure)
    return (RunConfig.wait if wait is None else wait), (RunConfig.after if after is None else after)
