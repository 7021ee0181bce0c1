"""The report's `measurement`: step times measured with and without the profiler, and how far to trust them
(docs/run.md#measurement).

`perfsleuth run` and `profile()` time every step with a cheap clock, wall and process CPU time and (Linux)
the stepping thread's time in the run queue, and record the times in the trace (`perfsleuth.clock`, record/step_clock.py): the `wait` steps run before the
profiler starts and the `after` steps right after the recorded window (together, the unprofiled steps),
the `active` steps are the recorded ones. Here they become

    {"unprofiled_step_us": summary, "profiled_step_us": summary, "before": summary, "after": summary,
     "cpu_us": {"unprofiled": summary, "profiled": summary}, "queued_us": {the same},
     "overhead": profiled / unprofiled median,
     "distorted": bool, "busy": bool, "busy_reason": str, "preempted_steps": int, "others_cores": float,
     "steal_cores": float | None, "unprofiled_warmup_steps": int, "note": str}

with summary = {median, mad, p90, n, values}: the noise is the median absolute deviation, as pyperf reports
it, and "beyond noise" means further apart than `k_noise` robust sigmas (1.4826 MAD) and a share of the
median. Unprofiled steps in which torch.compile compiled are left out (`unprofiled_compile_steps` says how
many; `run` records them: record/compile_facts.py), and so are leading steps of each unprofiled half that are
far slower than the rest, with the rule of the steady state (`phases.py`); profiled steps count when their
ProfilerStep is steady in the trace.

Two different things make the profiled and unprofiled times disagree, and they call for different advice:

- **the machine was busy** (`busy`): steps that waited for a core (in the run queue, where measured; else
  steps of CPU work far above their group's wall time at their usual CPU time, or, on CPU-only runs, the
  profiled steps slower without more CPU time), other processes keeping the CPUs
  this run could use saturated (`others_cores`, machine.py), the steps before and after the window
  disagreeing beyond their spread, or profiled steps faster than unprofiled ones beyond noise (a profiler
  does not speed a program up). The numbers say nothing about the profiler: rerun on a quiet machine.
- **the profiler distorted the program** (`distorted`): only when the machine was not busy and the
  profiled steps are slower than the unprofiled ones by more than `max_distortion` and beyond the
  unprofiled steps' spread. The shares, the verdict and the savings then describe the profiled program.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .compiling import compiling_unprofiled
from .machine import others_load
from .phases import SteadyRule, leading_warmup
from .steps import Steps

BUSY = "the machine was busy during the run: rerun on a quiet machine, or with more steps"


@dataclass(frozen=True)
class MeasurementRule:
    max_distortion: float = 0.25  # profiled this much slower than unprofiled (and beyond noise): distorted
    k_noise: float = 3.0  # beyond noise: medians further apart than this many robust sigmas (1.4826 MAD) ...
    drift: float = 0.15  # ... and than this share of the faster median (the busy tests)
    cpu_share: float = 0.5  # a slower group whose CPU time rose by less than this share of its wall time: preempted
    min_preempted: int = 2  # single steps that waited for a core: from this many, the machine was busy
    min_others_cores: float = 0.5  # other processes kept at least this many cores busy (less /proc/stat's error) ...
    saturation: float = 0.9  # ... and, with this run, this share of the CPUs it could use: busy


def _number(v) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) and v >= 0 else None


def _column(values, n: int) -> list:
    return [_number(v) for v in values] if isinstance(values, list) and len(values) == n else [None] * n


def _steps(walls, cpus=None, queued=None, keep=None) -> list:
    """(wall µs, CPU µs or None, queued µs or None) of the steps with a valid wall time (those `keep` marks);
    the CPU and queued times only when their lists match the wall times'."""
    if not isinstance(walls, list):
        return []
    rows = zip(walls, _column(cpus, len(walls)), _column(queued, len(walls)), keep or [True] * len(walls))
    return [(w, c, q) for w, c, q, k in ((_number(w), c, q, k) for w, c, q, k in rows) if w and k]


def _uncompiled(walls, compiled: list) -> Optional[list]:
    """`_steps`' keep: the steps torch.compile did not compile in (None: keep all)."""
    if not any(compiled) or not isinstance(walls, list):
        return None
    return [not (i < len(compiled) and compiled[i]) for i in range(len(walls))]


def _summary(values) -> Optional[dict]:
    if values is None or not len(values):
        return None
    v = np.asarray(values, dtype=np.float64)
    med = float(np.median(v))
    return {"median": round(med, 3), "mad": round(float(np.median(np.abs(v - med))), 3),
            "p90": round(float(np.percentile(v, 90)), 3), "n": int(v.size), "values": [round(float(x), 3) for x in v]}


def _steady(rows: list) -> tuple[list, int]:
    """The steps less their leading warm-up steps, and how many were left out."""
    if not rows:
        return [], 0
    lead = leading_warmup(np.asarray([r[0] for r in rows], np.float64), np.zeros(len(rows)), SteadyRule())
    return rows[lead:], lead


def _steady_profiled(clock: dict, steps: Steps) -> list:
    """The clock's profiled steps whose ProfilerStep is a steady step of the trace (all of them when the names
    cannot be matched)."""
    walls, names = clock.get("profiled_us"), clock.get("profiled_steps")
    cpus, queued = clock.get("profiled_cpu_us"), clock.get("profiled_queued_us")
    if not isinstance(walls, list):
        return []
    if not isinstance(names, list) or len(names) != len(walls) or "phase" not in steps.frame:
        return _steps(walls, cpus, queued)
    phase = dict(zip(steps.frame["name"].astype(str), steps.frame["phase"]))
    if not any(str(n) in phase for n in names):
        return _steps(walls, cpus, queued)
    return _steps(walls, cpus, queued, [phase.get(str(n)) == "steady" for n in names])


class _Group:
    """The wall, CPU and queued times of one group of steps (before, after, unprofiled, profiled); CPU and
    queued are None unless every step has them."""

    def __init__(self, rows: list):
        self.wall = np.asarray([r[0] for r in rows], np.float64)
        self.cpu, self.queued = (np.asarray([r[i] for r in rows], np.float64) if rows and all(
            r[i] is not None for r in rows) else None for i in (1, 2))

    @property
    def n(self) -> int:
        return int(self.wall.size)

    def med(self, cpu: bool = False) -> float:
        return float(np.median(self.cpu if cpu else self.wall))

    def sigma(self, cpu: bool = False) -> float:
        v = self.cpu if cpu else self.wall
        return 1.4826 * float(np.median(np.abs(v - np.median(v))))

    @property
    def computes(self) -> bool:
        """Its steps are mostly CPU work (CPU time at least half the wall time): more wall time at the same CPU
        time then means waiting for a core, not for data or a device."""
        return self.cpu is not None and self.n > 0 and self.med(cpu=True) >= 0.5 * self.med()


def _slower(x: _Group, y: _Group, rule: MeasurementRule) -> bool:
    """x's steps are slower than y's beyond noise: by more than k robust sigmas of either and `drift`."""
    if x.n < 2 or y.n < 2:
        return False
    gap = x.med() - y.med()
    return gap > max(rule.k_noise * max(x.sigma(), y.sigma()), rule.drift * y.med())


def _without_cpu(x: _Group, y: _Group, rule: MeasurementRule) -> bool:
    """x is slower than y, and its CPU time rose by less than `cpu_share` of the wall time: it waited."""
    if x.cpu is None or y.cpu is None:
        return False
    return x.med(cpu=True) - y.med(cpu=True) < rule.cpu_share * (x.med() - y.med())


def _preempted(g: _Group, rule: MeasurementRule) -> int:
    """Steps of `g` that waited for a core: `drift` of their time or more in the run queue where the system
    measured it; else, for steps of CPU work, far longer than the group's median at no more than its usual
    CPU time."""
    if g.queued is not None:
        return int((g.queued >= rule.drift * g.wall).sum())
    if not g.computes or g.n < 3:
        return 0
    w, c = g.med(), g.med(cpu=True)
    usual_cpu = g.cpu <= c + max(rule.k_noise * g.sigma(cpu=True), rule.drift * c)
    late = g.wall - w > max(rule.k_noise * g.sigma(), rule.drift * w)
    return int((usual_cpu & late).sum())


def _ms(us: float) -> str:
    return f"{us / 1e3:.2f} ms"


def _busy_reasons(before: _Group, after: _Group, un: _Group, pr: _Group, load: Optional[dict], device: bool,
                  rule: MeasurementRule) -> tuple[list, int]:
    """(why the machine was busy, in words with the numbers; steps that waited for a core). `device`: the run
    used a GPU, whose profiling costs time the host's CPU time does not show."""
    reasons = []
    if load and load.get("cpus"):
        others, own = load["others_cores"], load["own_cores"] if load["own_cores"] is not None else 1.0
        if others - load["resolution"] >= rule.min_others_cores and others + own >= rule.saturation * load["cpus"]:
            cpus = f"{load['cpus']:g} CPU{'s' if load['cpus'] != 1 else ''}"
            steal = load.get("steal_cores") or 0.0  # no process of this machine took those: said apart
            who = ("the hypervisor (the VM's steal time: its CPUs given to other machines)" if steal >= 0.5 * others
                   else f"other processes and the hypervisor (steal time: {steal:.2f})" if steal >= load["resolution"]
                   else "other processes")
            reasons.append(f"{who} kept {others:.2f} of the {cpus} this run could use busy during the recorded "
                           f"window (this run: {own:.2f})")
    preempted = sum(_preempted(g, rule) for g in (before, after, pr))
    if preempted >= rule.min_preempted:
        how = (f"spent {rule.drift:.0%} or more of their time waiting for a core (the run queue)"
               if pr.queued is not None or un.queued is not None else
               "took far longer than the others at their usual CPU time: they waited for a core")
        reasons.append(f"{preempted} of {before.n + after.n + pr.n} steps {how}")
    for x, y in ((before, after), (after, before)):
        if _slower(x, y, rule):
            cpu = (f", at about the same CPU time ({_ms(before.med(True))} and {_ms(after.med(True))}): the slower "
                   f"ones waited for a core" if _without_cpu(x, y, rule) else "")
            reasons.append(f"the unprofiled steps before the profiled window (median {_ms(before.med())}) and after it "
                           f"({_ms(after.med())}) differ beyond their spread{cpu}")
            break
    queued = pr.queued is not None and un.queued is not None
    if _slower(pr, un, rule) and (
            float(np.median(pr.queued)) - float(np.median(un.queued)) >= rule.cpu_share * (pr.med() - un.med())
            if queued else not device and un.computes and _without_cpu(pr, un, rule)):
        why = (f"waiting for a core {_ms(float(np.median(pr.queued)))} of it" if queued else
               f"at about the same CPU time ({_ms(pr.med(True))} and {_ms(un.med(True))}): they waited for a core, "
               f"the profiler's own cost is CPU time")
        reasons.append(f"the profiled steps took {_ms(pr.med())} against {_ms(un.med())} without the profiler, {why}")
    if _slower(un, pr, rule):
        reasons.append(f"the profiled steps were faster than the unprofiled ones ({pr.med() / un.med():.2f}x, "
                       f"{_ms(pr.med())} against {_ms(un.med())}): a profiler does not speed a program up")
    return reasons, preempted


def _distortion_advice(run_metadata: dict) -> str:
    schedule = run_metadata.get("schedule") if isinstance(run_metadata.get("schedule"), dict) else {}
    larger = "larger steps (a bigger batch, fewer and larger ops) shrink the profiler's per-op cost"
    stacks, shapes = bool(schedule.get("with_stack")), bool(schedule.get("record_shapes"))
    # input shapes are what the efficiency section and the batching forecast read: not advised away
    needed = "input shapes add to it too, but the efficiency section and the loop-batching forecast need them"
    if stacks:
        return ("record the window without Python stacks (the default), or with larger steps"
                + (f"; {needed}" if shapes else ""))
    return f"{larger}; {needed}" if shapes else larger


def measure(run_metadata: dict, steps: Steps, rule: MeasurementRule = MeasurementRule()) -> Optional[dict]:
    """The measurement for a trace recorded by perfsleuth (None for other traces)."""
    clock = run_metadata.get("clock") if isinstance(run_metadata, dict) else None
    if not isinstance(clock, dict) or run_metadata.get("role") == "stacks":  # a stacks companion measures nothing
        return None
    b_keep, a_keep = (_uncompiled(clock.get(f"{key}_us"), compiling_unprofiled(run_metadata, phase))
                      for key, phase in (("unprofiled", "wait"), ("after", "after")))
    b_rows, b_lead = _steady(_steps(*(clock.get(f"unprofiled{k}_us") for k in ("", "_cpu", "_queued")), keep=b_keep))
    a_rows, a_lead = _steady(_steps(*(clock.get(f"after{k}_us") for k in ("", "_cpu", "_queued")), keep=a_keep))
    before, after = _Group(b_rows), _Group(a_rows)
    un, pr = _Group(b_rows + a_rows), _Group(_steady_profiled(clock, steps))
    load = others_load(run_metadata)
    host = run_metadata.get("host") if isinstance(run_metadata.get("host"), dict) else {}
    out = {"unprofiled_step_us": _summary(un.wall), "profiled_step_us": _summary(pr.wall),
           "before": _summary(before.wall), "after": _summary(after.wall),
           "cpu_us": {"unprofiled": _summary(un.cpu), "profiled": _summary(pr.cpu)},
           "queued_us": {"unprofiled": _summary(un.queued), "profiled": _summary(pr.queued)},
           "overhead": None, "distorted": False, "busy": False, "busy_reason": None, "preempted_steps": 0,
           "others_cores": load["others_cores"] if load else None,
           "steal_cores": load.get("steal_cores") if load else None, "unprofiled_warmup_steps": b_lead + a_lead}
    device = host.get("accelerator") in ("cuda", "rocm")
    reasons, out["preempted_steps"] = _busy_reasons(before, after, un, pr, load, device, rule)
    n_compiled = sum(keep.count(False) for keep in (b_keep, a_keep) if keep)
    if n_compiled:
        out["unprofiled_compile_steps"] = n_compiled  # torch.compile's steps are no measure of the program's step
    if not un.n or not pr.n:
        out["note"] = ("no profiled step was timed" if un.n else
                       f"every unprofiled step compiled ({n_compiled}, torch.compile): no unprofiled step time to "
                       f"compare with (record more --wait or --after steps)" if n_compiled else
                       "no unprofiled step was timed (the schedule's --wait and --after leave none)")
        if reasons:
            out["busy"], out["busy_reason"] = True, "; ".join(reasons)
        return out
    ratio = pr.med() / un.med()
    out["overhead"] = round(ratio, 3)
    numbers = f"overhead {ratio:.2f}x: {_ms(pr.med())} profiled, {_ms(un.med())} without the profiler"
    if reasons:
        out["busy"], out["busy_reason"] = True, "; ".join(reasons)
        out["note"] = f"{BUSY} ({out['busy_reason']}; {numbers})"
        return out
    spread = rule.k_noise * un.sigma()
    if ratio - 1.0 > rule.max_distortion and pr.med() - un.med() > spread:
        out["distorted"] = True
        out["note"] = (f"profiling slowed the steps {ratio:.2f}x, beyond their noise (median {_ms(pr.med())} "
                       f"profiled, {_ms(un.med())} ± {_ms(spread)} without the profiler): the shares, the verdict "
                       f"and the savings describe the profiled program; {_distortion_advice(run_metadata)}")
    return out
