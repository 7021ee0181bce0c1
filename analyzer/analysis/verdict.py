"""From the category shares to one verdict (see docs/attribution.md#verdict)."""

from __future__ import annotations

from ..config import STALL_CATEGORIES, Config

VERDICTS = ("dataloader-bound", "kernel-bound", "sync-bound", "transfer-bound", "host-bound",
            "communication-bound")


def decide(share: dict, config: Config) -> tuple[str, str]:
    """Return (verdict, one-sentence reason). Kernel time is useful work: a run is kernel-bound
    unless a stall takes a material share of the step, or kernels fill less than half of it."""
    stalls = {c: share.get(c, 0.0) for c in STALL_CATEGORIES}
    worst = max(stalls, key=lambda c: (stalls[c], -STALL_CATEGORIES.index(c)))
    kernel = share.get("kernel", 0.0)
    material = {c: s for c, s in stalls.items() if s >= config.material_share[c]}
    if material:
        top = max(material, key=lambda c: (material[c], -STALL_CATEGORIES.index(c)))
        return f"{top}-bound", (f"{top} takes {material[top]:.0%} of step time "
                                f"(material from {config.material_share[top]:.0%}); kernels {kernel:.0%}")
    if kernel < config.min_kernel_share and stalls[worst] > 0:
        return f"{worst}-bound", (f"kernels fill only {kernel:.0%} of step time (under "
                                  f"{config.min_kernel_share:.0%}); the largest stall is {worst} at {stalls[worst]:.0%}")
    return "kernel-bound", (f"kernels take {kernel:.0%} of step time and no stall reaches its material share; "
                            f"largest stall: {worst} {stalls[worst]:.0%}")
