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
# A Python frame as the profiler names it: `train.py(57): train_step` (built-ins are `<built-in ...>`).
PY_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.+)$")
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


# --- torch.compile (docs/compile.md). Names from torch 2.13's _dynamo/_inductor sources, checked against
# the traces in fixtures/traces/compile: `dynamo_timed(key)` records "<key> (dynamo_timed)" and, for the
# chromium phase events, "<phase>" around it; "<phase>_data: k=v, compile_id=F/C" annotations carry the ids.
DYNAMO_TIMED_SUFFIX = " (dynamo_timed)"
CACHE_LOOKUP = "TorchDynamo Cache Lookup"  # every call of a frame dynamo watches: the guards are evaluated
COMPILED_REGION_PREFIX = "Torch-Compiled Region: "  # "Torch-Compiled Region: 0/1": compiled code of frame 0 runs
COMPILED_GRAPH = "CompiledFunction"  # AOTAutograd's forward graph runs (CompiledFunctionBackward: its backward)
# One compilation, outermost first: dynamo's frame compile, the lazy backward compile.
COMPILE_ROOTS = frozenset({"dynamo", "entire_frame_compile", "entire_backward_compile",
                           "_compile.compile_inner" + DYNAMO_TIMED_SUFFIX, "backward._backward_impl" + DYNAMO_TIMED_SUFFIX})
# The parts of a compilation (the split), by the chromium phase or dynamo_timed key of the event.
COMPILE_PARTS = ("guards", "inductor", "aot", "backend", "dynamo")  # priority: the first that covers a moment
_COMPILE_PART_KEYS = {
    "guards": ("build_guards",),
    "inductor": ("inductor_compile", "compile_fx_inner", "compile_fx.<locals>.fw_compiler_base",
                 "compile_fx.<locals>.bw_compiler", "compile_file", "CUDAGraphNode.record", "cudagraphify.get_container"),
    "aot": ("create_aot_dispatcher_function", "aot_collect_metadata", "aot_trace_joint_graph"),
    "backend": ("backend_compile", "OutputGraph.call_user_compiler", "entire_backward_compile", "backward._backward_impl"),
    "dynamo": ("bytecode_tracing",),
}
CUDAGRAPH_RECORD = "CUDAGraphNode.record"  # cudagraph trees record (and re-record) a graph
CUDAGRAPH_LAUNCH = frozenset({"cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch"})
_COMPILE_ID = re.compile(r"_data: (?:.*, )?compile_id=(!\d+/)?(\d+)/(\d+)")
_REGION_ID = re.compile(r"^Torch-Compiled Region: (?:!\d+/)?(\d+)/(\d+)")


def compile_part(name: str) -> Optional[str]:
    """'bytecode_tracing' or 'bytecode_tracing (dynamo_timed)' -> 'dynamo'; None when no part names it."""
    key = name[: -len(DYNAMO_TIMED_SUFFIX)] if name.endswith(DYNAMO_TIMED_SUFFIX) else name
    return next((part for part, keys in _COMPILE_PART_KEYS.items() if key in keys), None)


def is_compile_event(name: str) -> bool:
    """An event that lies inside torch.compile's compilation (not the compiled code running): the
    dynamo_timed ranges, the chromium phase events around them and their `_data` annotations."""
    return (name.endswith(DYNAMO_TIMED_SUFFIX) or name in COMPILE_ROOTS or compile_part(name) is not None
            or bool(_COMPILE_ID.search(name)) or name.startswith("compile_attempt_"))


def compile_id(name: str) -> Optional[tuple]:
    """'entire_frame_compile_data: fn_name=_compile.compile_inner, compile_id=0/7' -> (0, 7): frame 0's
    eighth compilation (the first is 0/0; compiled autograd's '!1/0/7' -> (0, 7)). None otherwise."""
    m = _COMPILE_ID.search(name)
    return (int(m.group(2)), int(m.group(3))) if m else None


def region_id(name: str) -> Optional[tuple]:
    """'Torch-Compiled Region: 0/1' -> (0, 1); None for other names."""
    m = _REGION_ID.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None
