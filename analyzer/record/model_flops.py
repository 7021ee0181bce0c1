"""The model's FLOPs for one step, counted by torch's `FlopCounterMode` (torch.utils.flop_counter) on
one real step of the script, for the report's MFU (docs/efficiency.md#mfu).

When: with `record_shapes` (the efficiency section needs shapes; without them there is no section to
put MFU in), right after the recorded window's unprofiled `after` steps and before the memory
window: one step of its own, entered at one step boundary and left at the next, so that neither the
analysed steps nor the timed unprofiled ones carry its cost. The counter is a Python dispatch mode:
every op of that step passes through Python once; its cost is that step's wall time against the
median unprofiled step (`cost`).

What it counts: the ops in FlopCounterMode's registry (matmuls, convolutions, attention: forward and
backward as they ran), not elementwise, normalisation or reductions: the model's FLOPs as MFU defines
them (PaLM, appendix B), against the hardware's count the trace gives (HFU: every modelled op). Its
registry has no formula for the recurrent layers a CPU runs as one op (`aten::mkldnn_rnn_layer`: nn.LSTM
on the CPU would count 0): those get perfsleuth's (analysis/efficiency/rnn.py, checked against
FlopCounterMode on the same LSTM's matmul path), and `by_op` shows them by name.

When it cannot: torch.compile ran in the steps (its compiled kernels do not pass through the
dispatcher the counter watches: a count would be of what runs eagerly, not of the step), the run
ended before or inside the step, or the counter failed: `unavailable` says why, and MFU is null.

The trace's `perfsleuth_final` metadata carries it (record/trace_metadata.py):

    "model_flops": {"flops_per_step": int | null, "source": "torch.utils.flop_counter.FlopCounterMode",
                    "by_op": {"aten.mm": int, ...}, "step_s": float | null,
                    "unprofiled_step_s": float | null, "unavailable": null | "why"}
"""

from __future__ import annotations

import logging
import statistics
import time
from typing import Any, Callable, Optional

log = logging.getLogger(__name__)

SOURCE = "torch.utils.flop_counter.FlopCounterMode"
TOP_OPS = 12  # the op kinds kept in `by_op`


def blank(unavailable: Optional[str]) -> dict:
    """The `model_flops` metadata with nothing counted: every key, `unavailable` saying why."""
    return {"flops_per_step": None, "source": SOURCE, "by_op": None, "step_s": None,
            "unprofiled_step_s": None, "unavailable": unavailable}


class FlopsStep:
    """One step under FlopCounterMode: `main_done()` once the window and its `after` steps are over
    (the count starts at that boundary), `step()` at the next boundary (it ends there), `final()` the
    metadata. `enabled` False: nothing is counted (`reason` says why)."""

    def __init__(self, enabled: bool, reason: str, compiled: Callable[[], bool],
                 plain_steps: Callable[[], list]):
        self.enabled, self.reason = enabled, reason
        self.compiled, self.plain_steps = compiled, plain_steps
        self._counter: Any = None
        self._t0 = 0.0
        self.result: Optional[dict] = None
        self.reached = False  # the boundary where the count would start was reached

    @property
    def pending(self) -> bool:
        return self._counter is not None

    def main_done(self) -> bool:
        """The window and its `after` steps are over: start counting at this boundary; True when
        the count runs (the next boundary ends it)."""
        self.reached = True
        if not self.enabled or self.result is not None:
            return False
        if self.compiled():
            self.result = blank("not counted: torch.compile ran in this run's steps, and its "
                                "compiled kernels bypass the dispatcher FlopCounterMode counts at")
            return False
        try:
            from torch.utils.flop_counter import FlopCounterMode

            counter = FlopCounterMode(display=False, custom_mapping=rnn_formulas())
            counter.__enter__()
        except Exception as exc:  # a torch without it, or one that changed it
            self.result = blank(f"FlopCounterMode could not start: {type(exc).__name__}: {exc}")
            return False
        self._counter, self._t0 = counter, time.perf_counter()
        return True

    def step(self) -> bool:
        """The boundary after the counted step: stop and keep the count; True (the count is over)."""
        self._stop(complete=True)
        return True

    def finish(self) -> None:
        """The run ended: a count still running is dropped (the step did not complete)."""
        if self._counter is not None:
            self._stop(complete=False)

    def _stop(self, complete: bool) -> None:
        counter, self._counter = self._counter, None
        if counter is None:
            return
        step_s = time.perf_counter() - self._t0
        try:
            counter.__exit__(None, None, None)
            flops = int(counter.get_total_flops())
            by_op = {str(k): int(v) for k, v in counter.get_flop_counts().get("Global", {}).items()}
        except Exception as exc:  # never the user's run's problem
            log.warning("model FLOPs: FlopCounterMode failed: %s", exc)
            self.result = blank(f"FlopCounterMode failed: {type(exc).__name__}: {exc}")
            return
        if not complete:
            self.result = blank("the run ended inside the step FlopCounterMode counted")
            return
        top = dict(sorted(by_op.items(), key=lambda kv: -kv[1])[:TOP_OPS])
        plain = self.plain_steps()
        self.result = {"flops_per_step": flops, "source": SOURCE, "by_op": top,
                       "step_s": round(step_s, 6),
                       "unprofiled_step_s": (round(statistics.median(plain) / 1e6, 6)
                                             if plain else None),
                       "unavailable": None if flops else
                       "FlopCounterMode counted no FLOPs in the step (no matmul, convolution or "
                       "attention ran in it)"}

    def final(self) -> dict:
        """`model_flops` for the main trace's metadata."""
        if self.result is not None:
            return self.result
        if not self.enabled:
            return blank(self.reason)
        return blank("the run ended before the step FlopCounterMode counts (it follows the "
                     "recorded window and its after steps)")


def rnn_formulas() -> dict:
    """FlopCounterMode formulas for the ops rnn.py models and its registry lacks ({} when torch has
    none of them)."""
    import torch

    from ..analysis.efficiency import rnn

    def formula(op: str):
        def flops(*args, out_shape=None, **kwargs) -> int:
            dims = [list(a) if isinstance(a, torch.Size) else [] for a in args]
            got = rnn.rnn_layer(op, dims, [4 if d else 0 for d in dims])  # bytes unused here
            return got[0] if got else 0

        return flops

    return {getattr(torch.ops.aten, op): formula(op) for op in rnn.OPS if hasattr(torch.ops.aten, op)}


def schedule(session: Any) -> FlopsStep:
    """The FLOPs step of a run.ProfileSession (with record_shapes and `RunConfig.count_flops`)."""
    from .step_clock import AFTER, WAIT

    c = session.config
    enabled = bool(c.record_shapes and c.count_flops)
    reason = ("not counted: shapes were not recorded (--record-shapes)" if not c.record_shapes
              else "not counted (count_flops off)")
    # the first wait step warms up (as memory_window's cost)
    return FlopsStep(enabled, reason, compiled=lambda: bool(session._compile.facts()),
                     plain_steps=lambda: (session.step_clock.values(WAIT)[1:]
                                          + session.step_clock.values(AFTER)))
