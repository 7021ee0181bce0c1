"""Every default of `perfsleuth run --verify`, once (docs/run.md#verify-measure-the-fixes): how many A/B
pairs, how long a window is, its warm-up, and the time budget that follows from them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ..errors import UsageError

LEFTOVER_GRACE_S = 1.0  # what a window left running: SIGTERM, SIGKILL after this long (child.py)


@dataclass(frozen=True)
class VerifyConfig:
    """Defaults of the experiments. A window = warm-up steps (not timed) + `steps` timed steps."""

    pairs: int = 3  # A B pairs per experiment; fewer only when asked for explicitly (--verify-pairs)
    steps: Optional[int] = None  # timed steps per window; None: from the measured step time (below)
    window_s: float = 1.0  # ... enough steps for about this long a timed window,
    min_steps: int = 5  # ... at least this many
    max_steps: int = 40  # ... at most this many (the script must run lead + 2 x pairs x window steps)
    warmup: int = 2  # steps after a switch inside one process, not timed
    lead: int = 3  # steps at the start of each process before its first window (start-up, first batches)
    budget_s: Optional[float] = None  # None: derived from the plan (default_budget), within the two below
    min_budget_s: float = 60.0
    max_budget_s: float = 600.0
    budget_margin: float = 1.5  # the default budget is the plan's estimated cost times this
    startup_guess_s: float = 3.0  # a process's start-up (imports, the script's set-up) before one is measured
    compile_guess_s: float = 60.0  # what torch.compile of the top module may take, in the estimate of its cost
    compile: bool = False  # --verify-compile: also try torch.compile of the top module

    def __post_init__(self):
        if self.pairs < 1:
            raise UsageError("--verify-pairs must be at least 1")
        if self.steps is not None and self.steps < 1:
            raise UsageError("--verify-steps must be at least 1")
        if self.budget_s is not None and not (self.budget_s > 0 and math.isfinite(self.budget_s)):
            raise UsageError("--verify-budget must be a positive number of seconds")

    def steps_for(self, step_us: Optional[float]) -> int:
        """Timed steps per window: `steps`, else about `window_s` of steps of the measured length."""
        if self.steps is not None:
            return self.steps
        if not step_us or step_us <= 0:
            return self.min_steps
        return int(min(self.max_steps, max(self.min_steps, math.ceil(self.window_s * 1e6 / step_us))))

    def budget_for(self, estimate_s: float) -> float:
        """The time budget: --verify-budget, else the plan's estimate with a margin, kept within the bounds."""
        if self.budget_s is not None:
            return float(self.budget_s)
        return float(min(self.max_budget_s, max(self.min_budget_s, estimate_s * self.budget_margin)))
