"""What event names mean. Classification runs once per distinct name (categorical codes), never per event."""

from __future__ import annotations

import re
from typing import Callable, Optional

import numpy as np
import pandas as pd

SYNC_CALLS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaCtxSynchronize",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipCtxSynchronize",
})
ITEM_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
# Copy APIs that block the host whatever the memory kind.
BLOCKING_COPY_CALLS = frozenset({
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol",
    "cuMemcpy", "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2",
    "hipMemcpy", "hipMemcpyWithStream", "hipMemcpy2D", "hipMemcpyHtoD", "hipMemcpyDtoH",
})
DATALOADER_PREFIXES = ("enumerate(DataLoader)#", "enumerate(DataPipe)#")
OWN_SPAN = "perfsleuth#step"  # `run`/`profile()` mark the profiler's step and their own bookkeeping with it
_MEMCPY = re.compile(r"^Memcpy (\w+)(?: \((\w+) -> (\w+)\))?")
_COMM = re.compile(r"nccl|rccl|c10d::|gloo:|record_param_comms", re.IGNORECASE)
_MEMORY_KERNEL = re.compile(r"^(Memcpy|Memset)\b")
# A collective's kind from its span (`gloo:all_reduce`, `nccl:_all_gather_base`) or its kernel
# (`ncclKernel_AllReduce_RING_LL_Sum_float(...)`, `ncclDevKernel_AllGather_RING_LL(...)`, RCCL's).
_BACKEND_SPAN = re.compile(r"^(?:nccl|rccl|gloo|mpi|ucc|xccl):(\w+)")
_COMM_KERNEL = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)


def parse_memcpy(name: str) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """'Memcpy HtoD (Pageable -> Device)' -> ('HtoD', 'Pageable', 'Device')."""
    m = _MEMCPY.match(name)
    if not m:
        return None, None, None
    return m.group(1), m.group(2), m.group(3)


def is_comm(name: str) -> bool:
    return bool(_COMM.search(name))


def collective_kind(name: str) -> Optional[str]:
    """'gloo:all_reduce' and 'ncclKernel_AllReduce_RING_LL_Sum_float(...)' -> 'allreduce'; None when
    the name is no collective span or kernel. ('_all_gather_base' -> 'allgatherbase'.)"""
    m = _BACKEND_SPAN.match(name) or _COMM_KERNEL.match(name)
    return m.group(1).replace("_", "").lower() if m else None


def is_memory_kernel(name: str) -> bool:
    return bool(_MEMORY_KERNEL.match(name))


def is_copy_call(name: str) -> bool:
    """A runtime call that copies memory (cudaMemcpyAsync, hipMemcpyWithStream, cuMemcpyHtoD, ...)."""
    return "memcpy" in name.lower()


def is_dataloader(name: str) -> bool:
    return name.startswith(DATALOADER_PREFIXES)


def used_categories(names: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(codes of the rows, the codes that occur): a selection of a categorical column keeps every
    category of the whole trace (300,000 distinct ProfilerStep#N names in a long trace), so work per
    category is done only for the ones its rows use."""
    codes = names.cat.codes.to_numpy()
    present = np.bincount(codes.astype(np.int64) + 1, minlength=len(names.cat.categories) + 1)[1:] > 0
    return codes, np.flatnonzero(present)


def name_mask(names, predicate: Callable[[str], bool]) -> np.ndarray:
    """Evaluate `predicate` once per distinct name the rows use, map back to rows (a missing name
    matches nothing). `names`: a categorical Series, or any Series or array of str (factorized first)."""
    if not (isinstance(names, pd.Series) and isinstance(names.dtype, pd.CategoricalDtype)):
        codes, uniques = pd.factorize(np.asarray(names, dtype=object))
        names = pd.Series(pd.Categorical.from_codes(codes, categories=pd.Index(uniques, dtype=object)))
    codes, used = used_categories(names)
    hit = np.zeros(len(names.cat.categories) + 1, dtype=bool)  # the last entry: missing names (-1)
    hit[used] = [bool(predicate(c)) for c in names.cat.categories.take(used).tolist()]
    return hit[codes]
