"""What fills memory at the peak of the memory window, by category (`perfsleuth run` and
`profile()`).
Two sources, each for what it knows best:

- **torch's memory profile** (the data behind `torch.profiler.profile.export_memory_timeline`): a
  data-flow graph over every tensor the window's ops touched, each (tensor, version) labelled
  parameter, optimizer state, input, temporary, activation, gradient, autograd detail or unknown,
  with allocation and free times. It needs `record_shapes`, `profile_memory` and `with_stack` (the
  memory window records all three, memory_window.py). Tensors that existed before the window
  (parameters, optimizer state) are in it as "pre-existing" when an op of the window uses them,
  their size from the recorded shapes, so they count on the CPU too, where the trace's `Total
  Allocated` starts at 0 when profiling starts. It gives the peak and the category split at it.
- **the live optimizers** (the ones `Optimizer.__init__` was seen constructing, step_hooks.py): the
  exact bytes of their parameters, gradients and state tensors (`known`), each storage counted once.

torch's labels are heuristics, and two of them are corrected with what is known exactly:

- a tensor *created inside* an `Optimizer.step` (Adam's `denom`, the `_foreach_` results) is a
  temporary of the optimizer, whatever data flow made it look like (torch 2.13 labels Adam's
  per-parameter temporaries "parameter" or "activation"); state tensors and gradients keep their
  label;
- no category holds more than the bytes of its tensors that exist: parameter bytes above the
  parameters' size, gradient bytes above the gradients', optimizer-state bytes above the state's,
  move to `temporary` (Lightning's closure-driven step: at its peak torch labelled a layer's
  gradient "gradient" twice, 547,920 bytes against 405,544 of gradients; a copy made while the
  original still exists, benchmarks/memory_categories.py).

Categories at the peak: parameter, gradient, optimizer_state, activation, input, temporary (torch's
temporary and its "autograd detail": the gradients of activations that backward makes and frees),
other (unlabelled). Torch is imported inside the functions only; private torch APIs are used under a
`try`, and a failure makes `categories_at_peak` null with the reason, never the user's run's
problem."""

from __future__ import annotations

import logging
from typing import Any, Iterable, Optional

log = logging.getLogger(__name__)

CATEGORY_KEYS = ("parameter", "gradient", "optimizer_state", "activation", "input", "temporary",
                 "other")
_TORCH_NAMES = {"PARAMETER": "parameter", "GRADIENT": "gradient",
                "OPTIMIZER_STATE": "optimizer_state",
                "ACTIVATION": "activation", "INPUT": "input", "TEMPORARY": "temporary",
                # gradients of activations inside backward; unlabelled: other
                "AUTOGRAD_DETAIL": "temporary"}
OPTIMIZER_STEP = "Optimizer.step#"  # torch's record_function around every Optimizer.step


def _storages(tensors: Iterable[Any]) -> int:
    """Bytes of the distinct storages under `tensors` (a tensor sharing another's storage counts
    once).
    """
    seen: dict = {}
    for t in tensors:
        try:
            storage = t.untyped_storage()
            seen.setdefault((str(t.device), storage.data_ptr()), int(storage.nbytes()))
        except Exception:  # a tensor subclass without a storage (meta, fake): not counted
            continue
    return sum(seen.values())


def known_bytes(optimizers: Iterable[Any]) -> Optional[dict]:
    """Exact bytes of the optimizers' parameters, their gradients (those that exist now) and their
    state tensors; None without an optimizer."""
    params: dict = {}
    state: list = []
    any_ = False
    for opt in optimizers:
        any_ = True
        for group in getattr(opt, "param_groups", ()):
            for p in group.get("params", ()):
                params[id(p)] = p
        for entry in getattr(opt, "state", {}).values():
            if isinstance(entry, dict):
                state += [v for v in entry.values() if _is_tensor(v)]
    if not any_:
        return None
    grads = [p.grad for p in params.values() if getattr(p, "grad", None) is not None]
    return {"parameter_bytes": _storages(params.values()), "gradient_bytes": _storages(grads),
            "optimizer_state_bytes": _storages(state)}


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def timeline_peak(prof: Any, device: str, known: Optional[dict]) -> tuple:
    """(peak bytes, {category: bytes at the peak}) on `device` from a finished profiler that
    recorded shapes, memory and stacks (see the module docstring for the corrections)."""
    import torch
    from torch.profiler._memory_profiler import Action, TensorKey

    profile = prof._memory_profile()
    steps = sorted((e.start_time_ns, e.end_time_ns) for e in profile._op_tree.dfs()
                   if e.name.startswith(OPTIMIZER_STEP))
    timeline = profile.timeline
    created_in_step = set()
    for t, action, (key, _), _ in timeline:
        if action == Action.CREATE and isinstance(key, TensorKey) and _inside(t, steps):
            created_in_step.add(key)
    target = torch.device(device)
    sizes = dict.fromkeys(CATEGORY_KEYS, 0)
    peak, at_peak, last_t = -1, dict(sizes), None

    def label(key, version) -> str:
        if not isinstance(key, TensorKey):
            return "other"
        category = profile._categories.get(key, version)
        name = _TORCH_NAMES.get(getattr(category, "name", ""), "other")
        if key in created_in_step and name not in ("optimizer_state", "gradient"):
            return "temporary"
        return name

    for t, action, (key, version), size in timeline:
        if key.device != target:
            continue
        # the level between two timestamps: a candidate for the peak
        if last_t is not None and t != last_t:
            peak, at_peak = _higher(peak, at_peak, sizes)
        last_t = t
        if action in (Action.PREEXISTING, Action.CREATE):
            sizes[label(key, version)] += int(size)
        elif action == Action.INCREMENT_VERSION:
            sizes[label(key, version)] -= int(size)
            sizes[label(key, version + 1)] += int(size)
        elif action == Action.DESTROY:
            sizes[label(key, version)] -= int(size)
    peak, at_peak = _higher(peak, at_peak, sizes)
    return max(peak, 0), _bounded(at_peak, known)


def _inside(t: int, ranges: list) -> bool:
    return any(start <= t <= end for start, end in ranges)


def _higher(peak: int, at_peak: dict, sizes: dict) -> tuple:
    total = sum(sizes.values())
    return (total, dict(sizes)) if total > peak else (peak, at_peak)


def _bounded(at_peak: dict, known: Optional[dict]) -> dict:
    """No category above the bytes its tensors have: the excess of parameter, gradient and optimizer
    state (known exactly from the live optimizers, read right after an optimizer step, when every
    gradient exists) is temporary."""
    out = {k: max(int(v), 0) for k, v in at_peak.items()}
    if known:
        for category, key in (("parameter", "parameter_bytes"), ("gradient", "gradient_bytes"),
                              ("optimizer_state", "optimizer_state_bytes")):
            excess = out[category] - int(known[key])
            if excess > 0 and known[key] > 0:
                out[category] -= excess
                out["temporary"] += excess
    return out


def device_of(cuda: bool) -> str:
    return "cuda:0" if cuda else "cpu"
