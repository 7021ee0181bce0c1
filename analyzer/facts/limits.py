"""Facts about what a trace cannot show (issue 37, item 3): a device whose activity it does not hold
(a graph capture included: trace/devices.py), first calls recorded instead of steady steps (launch
calls that load their kernel's code take milliseconds, not microseconds), and stretches of a step
with no event at all."""

from __future__ import annotations

import numpy as np

from ..analysis import intervals as iv
from ..trace.model import RUNTIME
from ..trace.names import name_mask
from .common import Context

SLOW_LAUNCH_NS = 1_000_000  # a launch this long loads its kernel's code: a first call (warm: µs)
FIRST_CALL_SHARE = 0.25  # first calls fill this share of the step: start-up, not steady state
_LAUNCH_WORDS = ("LaunchKernel", "LaunchCooperativeKernel", "ModuleLoad", "runFunction")

LIMIT_FACTS = {
    "device_unread": ("bool", "the trace holds none of its device's activity, or only a graph "
                              "capture (trace/devices.py): the device's share of the step is "
                              "unknown"),
    "first_call_launches_per_step": ("count/step", "launch calls of 1 ms or more (a warm launch "
                                                   "takes microseconds: these load their code)"),
    "first_call_us_per_step": ("us/step", "time in those launch calls per step"),
    "first_call_share": ("share", "first_call_us_per_step / step_us"),
    "first_calls": ("bool", f"first calls fill at least {FIRST_CALL_SHARE:.0%} of the step: the "
                            "trace records start-up (warm-up), not steady steps"),
    "longest_gap_us": ("us", "the longest stretch of a steady step that holds no event at all "
                             "(charged to `other`)"),
}


def limit_facts(ctx: Context) -> tuple[dict, dict]:
    rt = ctx.kind(RUNTIME)
    slow = rt["dur"].to_numpy(np.int64) >= SLOW_LAUNCH_NS
    if slow.any():  # the names of the slow calls only (a million-event trace has few)
        slow[slow] = name_mask(rt["name"][slow], lambda n: any(w in n for w in _LAUNCH_WORDS))
    slow_rt = rt[slow]
    slow_ns = iv.total(iv.merge(slow_rt["ts"].to_numpy(np.int64),
                                slow_rt["end"].to_numpy(np.int64)))
    share = ctx.share(slow_ns)
    gaps = ctx.breakdown.signals.get("as_other")
    longest = int((gaps[1] - gaps[0]).max()) if gaps is not None and len(gaps[0]) else 0
    return {
        "device_unread": bool(ctx.trace.unread_device),
        "first_call_launches_per_step": ctx.per_step(int(slow.sum())),
        "first_call_us_per_step": ctx.per_step_us(slow_ns),
        "first_call_share": share,
        "first_calls": bool(share >= FIRST_CALL_SHARE),
        "longest_gap_us": round(longest / 1000.0, 3),
    }, {}
