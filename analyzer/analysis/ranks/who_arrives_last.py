"""Who arrives last at the collectives, and whether consistently: the straggler test's first half
(docs/ranks.md, "Straggler, or jitter"). The second half, what its lateness costs and whether its
own work explains it, is in analysis/ranks/stragglers.py.

A rank's **lateness** in an instance is how much later than the other ranks it arrived: the median of
their durations minus its own (the ends coincide, so a shorter duration is a later arrival; no clock
is needed). Summed per steady step, it gives one number per step. A rank arrives last
**consistently** when

- it is the last arrival in more than half of the matched instances it takes part in (only
  instances whose ranks are all in the folder count), and
- its mean lateness per step exceeds `Config.straggler_noise` times the standard deviation of its
  lateness across the steps: it is late in a typical step by more than the step-to-step jitter.

On a machine where the ranks compete for cores, arrivals alternate: one rank is last in most
instances of one step and the other in the next, and neither passes. With fewer than two steps the
instances are the units.
"""

from __future__ import annotations

import numpy as np

from ...config import Config
from .collectives import Matched, Split


def lateness(m: Matched, usable: np.ndarray) -> np.ndarray:
    """Per instance and rank: the others' median duration minus the rank's own (NaN where the rank
    is not in it, the instance has fewer than two ranks, or is not `usable`). Each row is sorted once;
    the others' median skips the rank's own place in it."""
    dur = np.where(usable[:, None], m.duration, np.nan)
    rows, n = dur.shape
    out = np.full(dur.shape, np.nan)
    if not rows or n < 2:
        return out
    order = np.argsort(dur, axis=1, kind="stable")  # NaN last
    ranked = np.take_along_axis(dur, order, axis=1)
    place = np.empty_like(order)
    np.put_along_axis(place, order, np.arange(n)[None, :].repeat(rows, axis=0), axis=1)
    others = np.isfinite(dur).sum(axis=1, keepdims=True) - 1  # how many other ranks ran it
    lo, hi = (others - 1) // 2, others // 2  # the middle of the others' sorted durations
    median = (_pick(ranked, place, lo) + _pick(ranked, place, hi)) / 2.0
    ok = np.isfinite(dur) & (others >= 1)
    out[ok] = (median - dur)[ok]
    return out


def _pick(ranked: np.ndarray, place: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Per row and rank: the j-th smallest duration of the other ranks (the rank's own place skipped)."""
    j = np.broadcast_to(j, place.shape)
    return np.take_along_axis(ranked, np.clip(j + (j >= place), 0, place.shape[1] - 1), axis=1)


def consistency(m: Matched, s: Split, complete: np.ndarray, config: Config) -> list:
    """Per rank position: {last, of, unit, units, mean_ns, sd_ns, consistent} (docstring above)."""
    n = m.duration.shape[1]
    late = lateness(m, complete)
    steps = m.keys["step"].astype(str).to_numpy() if "step" in m.keys and len(m.keys) else np.empty(0, object)
    out = []
    for pos in range(n):
        mine = np.isfinite(late[:, pos])
        of = int(mine.sum())
        last = int((s.last[mine] == pos).sum()) if of else 0
        values = late[mine, pos]
        unit = "step"
        if len(set(steps[mine].tolist())) >= 2:
            per = _per_step(values, steps[mine])
        else:
            per, unit = values, "instance"
        mean = float(per.mean()) if len(per) else 0.0
        sd = float(per.std(ddof=1)) if len(per) >= 2 else 0.0
        ok = of > 0 and last * 2 > of and mean > 0 and mean > config.straggler_noise * sd
        out.append({"last": last, "of": of, "unit": unit, "units": int(len(per)), "mean_ns": mean, "sd_ns": sd,
                    "consistent": bool(ok)})
    return out


def _per_step(values: np.ndarray, steps: np.ndarray) -> np.ndarray:
    _, inverse = np.unique(steps, return_inverse=True)
    return np.bincount(inverse, weights=values)
