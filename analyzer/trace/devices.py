"""Which device a trace's activity comes from, and the device activity perfsleuth does not read.

- CUDA and ROCm kernels, copies and sets are read as such (model.py's categories).
- MTIA: `mtia_ccp_events` are its device events, read like kernels (`refine_kinds`: a `dma*` request is a
  copy, a stream's `event_record` / `event_wait` is no work), `mtia_runtime` its runtime; the device type is
  `mtia`, named from deviceProperties or "MTIA".
- Activity that is not read (`UNREAD_CATEGORIES`: the CUPTI range profiler's
  `cuda_profiler_range`), a trace that launches device work without any device event, or one that
  lists GPUs (deviceProperties) and holds no device activity at all: `unread` says which device's
  events are missing, the report says so, and the verdict is `device-unread` (analysis/verdict.py):
  host op time is never passed off as kernel time (analysis/attribution.py charges it to the host).
- A trace of CUDA/HIP graph *capture* (`cudaStreamBeginCapture` ... with next to no device time: the
  captured kernels do not run while captured): `unread` says so too (issue 37), rather than
  HOST-BOUND from the host's capture work.
"""

from __future__ import annotations

import re
from typing import Optional

import numpy as np

MTIA_CATEGORY = "mtia_ccp_events"
_MTIA_COPY, _MTIA_NOT_WORK = ("dma",), frozenset({"event_wait", "event_record"})
UNREAD_CATEGORIES = {"cuda_profiler_range": "CUPTI profiler ranges (cuda_profiler_range), which hold no kernels: "
                                            "the trace was recorded with the CUPTI range profiler"}
WATCHED = (MTIA_CATEGORY, *UNREAD_CATEGORIES)
_HIP = re.compile(r"^hip[A-Z]")
_LAUNCH = re.compile(r"Launch|runFunction|Memcpy|Memset|cuGraph|hipGraph", re.IGNORECASE)


def categories_seen(cats: list) -> dict:
    """{category: events} of the device categories read apart, in one chunk's categories (cheap: list.count in C)."""
    return {cat: cats.count(cat) for cat in WATCHED if cat in cats}


def refine_kinds(kind: np.ndarray, cats: list, names: np.ndarray, memcpy: int, other: int) -> None:
    """MTIA device events by name, in place: a DMA request is a copy, a stream's event record or wait is no work."""
    for i in np.flatnonzero(np.array([c == MTIA_CATEGORY for c in cats], dtype=bool)).tolist():
        name = names[i]
        if name.startswith(_MTIA_COPY):
            kind[i] = memcpy
        elif name in _MTIA_NOT_WORK:
            kind[i] = other


def device_type(trace, header, has_device_work: bool, runtime_names) -> str:
    """cuda | rocm | mtia | other | cpu."""
    if trace.device_categories.get(MTIA_CATEGORY) and has_device_work:
        return "mtia"
    if header.roctracer_version is not None or header.hip_runtime_version is not None or any(
        _HIP.match(n) for n in runtime_names
    ):
        return "rocm"
    if any(n.startswith("cu") for n in runtime_names) or any(
        "nvidia" in d.name.lower() or "tesla" in d.name.lower() for d in trace.devices
    ):
        return "cuda" if has_device_work or len(runtime_names) else "cpu"
    if any(d.name.lower().startswith(("amd", "instinct")) for d in trace.devices) and has_device_work:
        return "rocm"
    if has_device_work:
        return "other"
    return "cpu"


_CAPTURE = re.compile(r"StreamBeginCapture")
CAPTURE_DEVICE_SHARE = 0.05  # a capture trace: its device events fill less than this of its span


def capture(ev, runtime_names, runtime_kind: int, device_kinds: tuple) -> int:
    """Graph captures begun (`cudaStreamBeginCapture`, `hipStreamBeginCapture`) in a trace whose
    device events fill under CAPTURE_DEVICE_SHARE of its span: a capture, not graphs replayed (0
    otherwise)."""
    if not any(_CAPTURE.search(str(n)) for n in runtime_names):
        return 0
    counts = ev.loc[ev["kind"] == runtime_kind, "name"].value_counts()  # per distinct name
    begun = int(sum(n for name, n in counts.items() if _CAPTURE.search(str(name))))
    dev = ev[ev["kind"].isin(device_kinds)]
    span = int(ev["end"].max() - ev["ts"].min()) if len(ev) else 0
    device_ns = int(dev["dur"].sum()) if len(dev) else 0
    return begun if span > 0 and device_ns < CAPTURE_DEVICE_SHARE * span else 0


def unread(trace, has_device_work: bool, runtime_names, launches: int,
           captures: int = 0) -> Optional[str]:
    """What the trace says of a device whose activity it does not hold (None when there is nothing
    to say)."""
    device = trace.device_name or {"cuda": "a CUDA GPU", "rocm": "a ROCm GPU"}.get(
        trace.device_type, "a device")
    graph = "HIP" if trace.device_type == "rocm" else "CUDA"
    if captures:
        return (f"the trace records a {graph} graph capture on {device} ({captures:,} capture"
                f"{'s' if captures != 1 else ''} begun, next to no device time): captured kernels "
                f"do not run while they are captured, so where a replayed step's time goes on the "
                f"device is not in the trace, and no verdict is drawn from the host's capture work "
                f"(profile steps that replay the graph)")
    if has_device_work:
        return None
    kinds = [f"{trace.device_categories[c]:,} {what}" for c, what in UNREAD_CATEGORIES.items()
             if trace.device_categories.get(c)]
    if not kinds and not launches and trace.devices:
        return (f"the trace lists {device} but holds none of its activity (no kernel, copy or "
                f"launch call): only the host's ops were recorded, so the device's share of the "
                f"step is unknown and no verdict is drawn from host op time (record with the "
                f"device's activity on: ProfilerActivity.CUDA)")
    if not kinds and not launches:
        return None
    calls = f" ({launches:,} launch and copy calls)" if launches else ""
    held = f"; it holds {'; '.join(kinds)}" if kinds else ""
    return (f"the trace launches work on {device}{calls} but holds none of the device's activity{held}: the device's "
            f"time is not read, so its share of the step is unknown and no verdict is drawn from host op time (record "
            f"with the device's activity on: ProfilerActivity.CUDA)")


def launch_calls(ev, runtime_kind: int) -> int:
    """Runtime calls that launch or copy (cudaLaunchKernel, cudaMemcpyAsync, hipLaunchKernel, runFunction, ...)."""
    names = ev.loc[ev["kind"] == runtime_kind, "name"]
    cats = names.cat.remove_unused_categories()
    counts = cats.value_counts()
    return int(sum(n for name, n in counts.items() if _LAUNCH.search(str(name))))
