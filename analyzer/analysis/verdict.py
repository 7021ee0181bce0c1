"""From the category shares to one verdict (see docs/attribution.md#verdict)."""

from __future__ import annotations

from ..config import STALL_CATEGORIES, Config

VERDICTS = ("dataloader-bound", "kernel-bound", "sync-bound", "transfer-bound", "host-bound",
            "communication-bound", "device-unread")
UNREAD = "device-unread"  # the trace launches device work it holds no activity of (trace/devices.py): no verdict
# The job verdict of one job's ranks when a rank holds the others up (analysis/ranks/stragglers.py, docs/ranks.md).
STRAGGLER_BOUND = "straggler-bound"


def decide(share: dict, config: Config, gpu: bool = True, exclude: tuple = (), unread: str = None) -> tuple[str, str]:
    """Return (verdict, one-sentence reason). Kernel time is useful work: a run is kernel-bound
    unless a stall takes a material share of the step, or kernels fill less than half of it. Without
    a GPU the `kernel` category is op compute, and the reason says "ops". Stall categories in `exclude`
    are not candidates (their removal is forecast to buy nothing: engine/reconsider.py). `unread`: what the trace
    says of a device whose activity it does not hold; then the verdict is `device-unread`, never one drawn from
    host op time."""
    if unread:
        return UNREAD, unread
    work = "kernels" if gpu else "ops"
    stalls = {c: share.get(c, 0.0) for c in STALL_CATEGORIES if c not in exclude}
    kernel = share.get("kernel", 0.0)
    if not stalls:
        return "kernel-bound", f"{work} take {kernel:.0%} of step time; no stall is left to blame"
    worst = max(stalls, key=lambda c: (stalls[c], -STALL_CATEGORIES.index(c)))
    material = {c: s for c, s in stalls.items() if s >= config.material_share[c]}
    if material:
        top = max(material, key=lambda c: (material[c], -STALL_CATEGORIES.index(c)))
        return f"{top}-bound", (f"{top} takes {material[top]:.0%} of step time "
                                f"(material from {config.material_share[top]:.0%}); {work} {kernel:.0%}")
    if kernel < config.min_kernel_share and stalls[worst] > 0:
        return f"{worst}-bound", (f"{work} fill only {kernel:.0%} of step time (under "
                                  f"{config.min_kernel_share:.0%}); the largest stall is {worst} at {stalls[worst]:.0%}")
    return "kernel-bound", (f"{work} take {kernel:.0%} of step time and no stall reaches its material share; "
                            f"largest stall: {worst} {stalls[worst]:.0%}")


# How bound: the share of the step the verdict's category takes (issue 15). A stall of 10-20 % is
# "moderate", above that "high"; below 10 % (a verdict by default, when kernels fill under half the
# step and no stall is material) "low".
DEGREES = ((0.20, "high"), (0.10, "moderate"), (0.0, "low"))
_ADVERB = {"low": "slightly ", "moderate": "moderately ", "high": ""}


def verdict_share(verdict: str, share: dict) -> float:
    return float(share.get(verdict.removesuffix("-bound"), 0.0))


def degree(verdict: str, share: dict):
    if verdict == UNREAD:
        return None
    s = verdict_share(verdict, share)
    return next(name for bound, name in DEGREES if s >= bound)


def device_word(device_type: str) -> str:
    """What to call the device (issue 37: an MTIA is not "the GPU"): GPU for CUDA and ROCm, MTIA,
    else device."""
    return {"cuda": "GPU", "rocm": "GPU", "mtia": "MTIA"}.get(str(device_type), "device")


def _what(category: str, pct: str, gpu: bool, device: str = "GPU") -> str:
    return {
        "dataloader": f"{pct} of each step waits for data",
        "sync": f"{pct} of each step the host waits for the {device} to finish queued work",
        "transfer": f"{pct} of each step goes to copies between host and {device}",
        "host": (f"{pct} of each step the {device} waits for the host (Python, op dispatch, "
                 "launches)" if gpu
                 else f"{pct} of each step is Python and framework code outside ops"),
        "communication": f"{pct} of each step waits for collectives with no compute alongside",
        "kernel": f"kernels run {pct} of each step" if gpu else f"ops compute {pct} of each step",
    }.get(category, f"{pct} of each step is {category}")


def verdict_text(verdict: str, share: dict, gpu: bool, device: str = "GPU") -> str:
    """'moderately dataloader-bound: 14% of each step waits for data; kernels 83%'."""
    if verdict == UNREAD:
        return "device-unread: the device's activity is not in the trace: where each step's time goes on it is unknown"
    category = verdict.removesuffix("-bound")
    pct = f"{verdict_share(verdict, share):.0%}"
    words = f"{_ADVERB[degree(verdict, share)]}{verdict}: {_what(category, pct, gpu, device)}"
    if category != "kernel":
        words += f"; {'kernels' if gpu else 'ops'} {share.get('kernel', 0.0):.0%}"
    return words
