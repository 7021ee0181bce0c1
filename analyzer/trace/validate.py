"""Typed schemas for the parts of a trace's top level that the analysis reads besides its events
(which kineto.py decodes into Structs): the metadata `perfsleuth run` records (record/trace_metadata.py).
A value of the wrong type is never used: the section is dropped with a warning that says where."""

from __future__ import annotations

from typing import Annotated, Any, Optional, Union

import msgspec


class HostFacts(msgspec.Struct):
    cpu_count: Optional[int] = None
    affinity_cpus: Optional[int] = None
    torch_threads: Optional[int] = None
    torch_interop_threads: Optional[int] = None
    omp_num_threads: Optional[str] = None
    loadavg: Optional[list[float]] = None
    torch_version: Optional[str] = None
    accelerator: Optional[str] = None
    rank: Optional[int] = None
    world_size: Optional[int] = None


class LoaderFacts(msgspec.Struct):
    dataset: Optional[str] = None
    num_workers: Optional[int] = None
    batch_size: Optional[int] = None
    pin_memory: Optional[bool] = None
    persistent_workers: Optional[bool] = None
    prefetch_factor: Optional[int] = None
    collate_fn: Optional[str] = None


class CompileSection(msgspec.Struct):
    """`perfsleuth.compile` (record/compile_facts.py): torch.compile's account of a run. Its lists and
    tables must be lists and tables; what is inside an entry is read defensively where it is used."""

    version: int = 1
    steps: dict[str, list[Union[int, float, None]]] = msgspec.field(default_factory=dict)
    compiles: list[dict[str, Any]] = msgspec.field(default_factory=list)
    graph_breaks: list[dict[str, Any]] = msgspec.field(default_factory=list)
    counters: dict[str, Any] = msgspec.field(default_factory=dict)
    config: dict[str, Any] = msgspec.field(default_factory=dict)


class MemoryCategories(msgspec.Struct):
    parameter: Optional[int] = None
    gradient: Optional[int] = None
    optimizer_state: Optional[int] = None
    activation: Optional[int] = None
    input: Optional[int] = None
    temporary: Optional[int] = None
    other: Optional[int] = None


class MemoryKnown(msgspec.Struct):
    parameter_bytes: Optional[int] = None
    gradient_bytes: Optional[int] = None
    optimizer_state_bytes: Optional[int] = None


class MemoryRun(msgspec.Struct):
    """`perfsleuth.memory`: what `perfsleuth run` / `profile()` measured of memory (analysis/memory/)."""

    device: Optional[str] = None  # cpu | cuda:0 | ...
    source: Optional[str] = None  # how the categories were measured (export_memory_timeline, ...)
    peak_bytes: Optional[int] = None
    categories_at_peak: Optional[MemoryCategories] = None
    known: Optional[MemoryKnown] = None  # from the live model and optimizer
    cost: Optional[dict] = None
    unavailable: Optional[str] = None


class ModelFlops(msgspec.Struct):
    """`perfsleuth.model_flops`: the model's FLOPs for one step, counted by FlopCounterMode
    (record/model_flops.py)."""

    flops_per_step: Optional[Annotated[int, msgspec.Meta(ge=0)]] = None
    source: Optional[str] = None
    by_op: Optional[dict[str, int]] = None
    step_s: Optional[float] = None
    unprofiled_step_s: Optional[float] = None
    unavailable: Optional[str] = None


class RunMetadata(msgspec.Struct):
    """The trace's top-level `perfsleuth` object. Keys not listed here are kept as recorded (a newer
    perfsleuth may add some); the listed ones must have these types."""

    version: int = 1
    host: HostFacts = msgspec.field(default_factory=HostFacts)
    loaders: list[LoaderFacts] = msgspec.field(default_factory=list)
    memory_trace: Optional[str] = None  # the memory companion beside the trace (a file name)
    program: Optional[str] = None  # the script's file name or the module `perfsleuth run` ran


def run_metadata(value, warnings: list) -> dict:
    """The `perfsleuth` object when it matches RunMetadata, else {} (and a warning when it was there)."""
    if value is None:
        return {}
    if isinstance(value, dict) and value.get("memory") is not None:
        try:
            msgspec.convert(value["memory"], MemoryRun)
        except (msgspec.ValidationError, RecursionError) as exc:  # only the memory section goes
            warnings.append(f"the trace's perfsleuth memory metadata was ignored: {str(exc)[:200]}")
            value = {k: v for k, v in value.items() if k != "memory"}
    if isinstance(value, dict) and value.get("model_flops") is not None:
        try:
            msgspec.convert(value["model_flops"], ModelFlops)
        except (msgspec.ValidationError, RecursionError) as exc:  # only this section goes
            warnings.append(f"the trace's perfsleuth model_flops metadata was ignored: {str(exc)[:200]}")
            value = {k: v for k, v in value.items() if k != "model_flops"}
    try:
        msgspec.convert(value, RunMetadata)
    except (msgspec.ValidationError, RecursionError) as exc:
        warnings.append(f"the trace's perfsleuth metadata was ignored: {str(exc)[:200]}")
        return {}
    if "compile" in value:  # a section of its own: a bad one costs only itself
        try:
            msgspec.convert(value["compile"], CompileSection)
        except (msgspec.ValidationError, RecursionError) as exc:
            warnings.append(f"the trace's perfsleuth compile metadata was ignored: "
                            f"{str(exc)[:200].replace('$', 'compile', 1)}")
            value = {k: v for k, v in value.items() if k != "compile"}
    return value
