"""What the machine and the loaders were, recorded by `perfsleuth run` and `perfsleuth.profile()` into the
trace itself (torch.profiler's `add_metadata_json`, top-level key `perfsleuth`), so that `analyze` of
the same file later knows them too: a trace alone says nothing about free cores or loader settings.

    "perfsleuth": {"version": 1,
                   "host": {"cpu_count", "affinity_cpus", "torch_threads", "torch_interop_threads",
                            "omp_num_threads", "loadavg", "torch_version", "accelerator", "rank", "world_size",
                            "local_world_size"},
                   "loaders": [{"dataset", "num_workers", "batch_size", "pin_memory", "persistent_workers",
                                "prefetch_factor", "collate_fn"}, ...]}

`trace/model.py` reads it back as `Trace.run_metadata` (an empty dict for other traces). Torch is
imported inside the functions only.
"""

from __future__ import annotations

import os
from typing import Any, Optional

METADATA_KEY = "perfsleuth"
METADATA_VERSION = 1


def host_facts(rank: Optional[int] = None, world_size: Optional[int] = None) -> dict:
    import torch

    try:
        affinity: Optional[int] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        affinity = None
    try:
        load: Optional[list] = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    accelerator = "cuda" if torch.cuda.is_available() else "cpu"
    if accelerator == "cuda" and getattr(torch.version, "hip", None):
        accelerator = "rocm"
    return {"cpu_count": os.cpu_count(), "affinity_cpus": affinity, "torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "loadavg": load,
            "torch_version": torch.__version__, "accelerator": accelerator, "rank": rank, "world_size": world_size,
            "local_world_size": _env_int("LOCAL_WORLD_SIZE")}


def _env_int(name: str) -> Optional[int]:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _name(obj: Any) -> Optional[str]:
    if obj is None:
        return None
    return getattr(obj, "__qualname__", None) or type(obj).__qualname__


def loader_facts(loader: Any) -> dict:
    """The settings of one torch DataLoader that bear on loading speed."""
    return {"dataset": type(loader.dataset).__qualname__, "num_workers": int(loader.num_workers),
            "batch_size": loader.batch_size, "pin_memory": bool(loader.pin_memory),
            "persistent_workers": bool(loader.persistent_workers), "prefetch_factor": loader.prefetch_factor,
            "collate_fn": _name(loader.collate_fn)}


def remember_loader(seen: list, loader: Any) -> None:
    """Add the loader's settings to `seen` unless the same settings are there (one entry per epoch
    would grow without end). The loader is not kept: a loop that iterates a temporary DataLoader drops it."""
    try:
        facts = loader_facts(loader)
    except Exception:  # a DataLoader subclass without these attributes: nothing to record
        return
    if facts not in seen:
        seen.append(facts)


def metadata(host: dict, loaders: list) -> dict:
    return {"version": METADATA_VERSION, "host": host, "loaders": list(loaders)}
