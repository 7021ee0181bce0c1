"""The forecast models' registry and what a model reads: `@model("name")` registers a function
`(inputs, plan, variant) -> assumptions` in `MODELS`; `Inputs` is what it reads (the trace, the
replayed timeline, the machine, the window's host ops); `NoForecast` is how it says no. The models
(forecast/models/) import this module and nothing here imports them back: forecaster.py imports
every model, so `MODELS` is the full registry once it is imported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import pandas as pd

from ...trace.model import ANNOTATION, CPU_OP, PYTHON, Trace
from ...trace.names import name_mask
from ...trace.selection import of_kind
from .. import intervals as iv
from ..machine import Machine
from .plan import Plan
from .timeline import Timeline


class NoForecast(Exception):
    """No model is good enough for this fix on this trace; the message says why."""


@dataclass
class Inputs:
    """What models read: the trace, the replayed timeline, the machine, the window's host ops."""

    trace: Trace
    tl: Timeline
    machine: Machine
    all_steps: pd.DataFrame  # every step the facts use (durations for models that need them)
    node_class: Optional[Callable] = None  # Timeline -> {"family": array, "dtype": array} per device node
    params: dict = field(default_factory=dict)  # settings of the fix, e.g. {"workers": 1} (defaults: the rule's)
    compute_capability: Optional[float] = None  # the device's, inferred where the trace lists none
    machine_busy: str = ""  # why the run found the machine busy (machine_busy_reason); '' if not
    # an in-process loader's cause and its share of the loader's time, from the stacks window,
    # when the trace has no python stacks of its own (facts/loader.py join_split); else None
    loader_split: Optional[dict] = None
    _cache: dict = field(default_factory=dict)

    def cached(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def ops(self) -> pd.DataFrame:
        """Host ops and annotations that start in the window, times relative to it (ns)."""
        def make():
            ev = of_kind(self.trace.events, CPU_OP, ANNOTATION)
            w0, w1 = self.tl.w0, self.tl.w0 + int(self.tl.steps["host_end"].iloc[-1]) + 1
            sel = ev[(ev["ts"].to_numpy() >= w0) & (ev["ts"].to_numpy() < w1)]
            return pd.DataFrame({"ts": (sel["ts"].to_numpy() - w0).astype(np.float64),
                                 "end": (sel["end"].to_numpy() - w0).astype(np.float64),
                                 "name": sel["name"].astype(str).to_numpy(), "kind": sel["kind"].to_numpy(),
                                 "pid": sel["pid"].to_numpy(), "tid": sel["tid"].to_numpy(),
                                 "in_type": sel["in_type"].astype(str).to_numpy()})
        return self.cached("ops", make)

    @property
    def main_ops(self) -> pd.DataFrame:
        """`ops` of the main thread: the thread of the step annotations, else the busiest one."""
        def make():
            ops = self.ops
            steps = ops[self.name_starts("ProfilerStep#")]
            cpu = ops[ops["kind"].to_numpy() == CPU_OP]
            if len(steps):
                main = (steps["pid"].iloc[0], steps["tid"].iloc[0])
            elif len(cpu):
                main = cpu.assign(d=cpu["end"] - cpu["ts"]).groupby(["pid", "tid"])["d"].sum().idxmax()
            else:
                return ops.iloc[:0]
            return ops[(ops["pid"] == main[0]) & (ops["tid"] == main[1])]
        return self.cached("main_ops", make)

    @property
    def frames(self) -> pd.DataFrame:
        """Python frames (python_function events) of the main thread in the window (ts, end, name; relative
        ns): empty unless the trace was recorded with stacks."""
        def make():
            ev = of_kind(self.trace.events, PYTHON)
            main = self.main_ops
            if ev.empty or main.empty:
                return pd.DataFrame({"ts": [], "end": [], "name": []})
            w0, w1 = self.tl.w0, self.tl.w0 + int(self.tl.steps["host_end"].iloc[-1]) + 1
            ts = ev["ts"].to_numpy()
            sel = ev[(ts >= w0) & (ts < w1) & (ev["tid"].to_numpy() == main["tid"].iloc[0])
                     & (ev["pid"].to_numpy() == main["pid"].iloc[0])]
            return pd.DataFrame({"ts": (sel["ts"].to_numpy() - w0).astype(np.float64),
                                 "end": (sel["end"].to_numpy() - w0).astype(np.float64),
                                 "name": sel["name"].astype(str).to_numpy()})
        return self.cached("frames", make)

    def spans(self, prefix: str) -> iv.Intervals:
        """Merged spans of the window's ops/annotations whose name starts with `prefix`."""
        hit = self.ops[self.name_starts(prefix)]
        return iv.merge(hit["ts"].to_numpy(np.int64), hit["end"].to_numpy(np.int64))

    def name_starts(self, prefix) -> np.ndarray:
        """Per row of `ops`: its name starts with `prefix` (a string or a tuple of them)."""
        names = self.cached("op_names", lambda: self.ops["name"].astype("category"))  # each name tested once
        return name_mask(names, lambda name: name.startswith(prefix))

    def classes(self) -> dict:
        """Per device node: kernel family and dtype (from the facts layer), or unknowns."""
        def make():
            if self.node_class is None or self.tl.n_nodes == 0:
                n = self.tl.n_nodes
                return {"family": np.full(n, "other", object), "dtype": np.full(n, "unknown", object)}
            return self.node_class(self.tl)
        return self.cached("classes", make)


MODELS: dict = {}


def model(name: str):
    """Register a forecast model: f(inputs, plan, variant) -> assumptions dict (edits the plan)."""
    def deco(fn: Callable[[Inputs, Plan, str], Optional[dict]]):
        MODELS[name] = fn
        return fn
    return deco
