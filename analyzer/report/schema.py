"""report@1 as a typed schema (msgspec Structs): what a program that READS a report (diff, a CI gate)
may rely on. A report.json from disk, or a dict handed to the library, is checked here once, at the
boundary; afterwards no field needs checking again. Keys the reader does not use are dropped.

Numbers are bounded: µs values and counts in [0, 1e15] (31 years), shares in [0, 1].
"""

from __future__ import annotations

from typing import Annotated, Optional

import msgspec

from ..config import CATEGORIES
from ..errors import TraceError, UsageError
from .model import SCHEMA, SET_SCHEMA

Micros = Annotated[float, msgspec.Meta(ge=0, le=1e15)]
Signed = Annotated[float, msgspec.Meta(ge=-1e15, le=1e15)]
Share = Annotated[float, msgspec.Meta(ge=0, le=1)]
Speedup = Annotated[float, msgspec.Meta(ge=0, le=1e15)]  # step before / step after


class TraceDoc(msgspec.Struct):
    path: Optional[str] = None
    device: Optional[str] = None
    device_type: Optional[str] = None
    program: Optional[str] = None


# One field per category (config.CATEGORIES), so that a message names the bad one: `$.steps[0].time_us.host`.
PerCategoryUs = msgspec.defstruct("PerCategoryUs", [(c, Optional[Micros], None) for c in CATEGORIES])
PerCategoryShare = msgspec.defstruct("PerCategoryShare", [(c, Optional[Share], None) for c in CATEGORIES])


class StepDoc(msgspec.Struct):
    duration_us: Micros
    name: Optional[str] = None
    start_us: Optional[Signed] = None
    time_us: PerCategoryUs = msgspec.field(default_factory=PerCategoryUs)
    phase: Optional[str] = None  # warmup | steady | partial | compile; None (older reports): steady


class StepTimesDoc(msgspec.Struct):
    values: list[Micros] = []


class MeasurementDoc(msgspec.Struct):
    """What diff reads of `measurement`: the step times measured without the profiler."""

    unprofiled_step_us: Optional[StepTimesDoc] = None


class SummaryDoc(msgspec.Struct):
    time_share: PerCategoryShare = msgspec.field(default_factory=PerCategoryShare)


class ForecastDoc(msgspec.Struct):
    """A finding's forecast (docs/forecast.md): numbers null where there is none; kind absent in reports
    written before issue 24 (then: "forecast" when speedup is a number, else "none")."""

    speedup: Optional[Speedup] = None
    low: Optional[Speedup] = None
    high: Optional[Speedup] = None
    saving_us: Optional[Signed] = None
    kind: Optional[str] = None  # forecast | none | unreliable
    model: Optional[str] = None
    reason: Optional[str] = None


class TriedDoc(msgspec.Struct):
    """One setting `--verify` tried for a finding (issue 40): measured, or why not."""

    variant: str
    fix: Optional[str] = None
    params: dict = {}
    status: Optional[str] = None  # measured | not tried | stopped | failed | too few pairs
    speedup: Optional[Speedup] = None
    low: Optional[Speedup] = None
    high: Optional[Speedup] = None
    pairs: Optional[Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]] = None
    outcome: Optional[str] = None


class PeakDoc(msgspec.Struct):
    """The peak memory of a fix that frees it (verify/peaks.py): median of the A and B windows."""

    measure: str  # rss_bytes | cuda_allocated_bytes
    baseline_bytes: SignedBytes
    variant_bytes: SignedBytes
    change_bytes: Optional[SignedBytes] = None
    change: Optional[Signed] = None
    what: Optional[str] = None
    pairs: list[list[SignedBytes]] = []


class VerifiedDoc(msgspec.Struct):
    """A fix measured by `perfsleuth run --verify` (issue 25): the best setting tried (issue 40)."""

    speedup: Speedup
    low: Optional[Speedup] = None
    high: Optional[Speedup] = None
    saving_us: Optional[Signed] = None
    pairs: Optional[Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]] = None
    outcome: Optional[str] = None  # faster | no gain | slower | noise
    variant: Optional[str] = None
    params: Optional[dict] = None  # the best setting's parameters ({"num_workers": 2})
    tried: list[TriedDoc] = []  # every setting tried for the finding, in the order of its parameter
    peak: Optional[PeakDoc] = None  # a fix that frees memory: its measured peak


class CeilingDoc(msgspec.Struct):
    """What the fix could buy at most (the rule's own saving expression); never a finding's number."""

    saving_us: Optional[Signed] = None
    speedup: Optional[Speedup] = None
    basis: Optional[str] = None


class FindingDoc(msgspec.Struct):
    rule: str
    title: Optional[str] = None
    category: Optional[str] = None
    severity: Optional[str] = None
    severity_from: Optional[str] = None  # measured | forecast | rule (absent before issue 24)
    forecast: Optional[ForecastDoc] = None
    verified: Optional[VerifiedDoc] = None
    ceiling: Optional[CeilingDoc] = None
    # Reports written before issue 24 held the ceiling here (and in `bound`); read, never written.
    estimated_saving_us: Optional[Signed] = None
    estimated_speedup: Optional[Speedup] = None


class RowDoc(msgspec.Struct):
    name: str
    total_us: Optional[Micros] = None
    count: Optional[Micros] = None


class EfficiencyDoc(msgspec.Struct):
    """The compute-efficiency numbers diff compares (docs/schema.md#efficiency)."""

    flops_per_step: Optional[Annotated[float, msgspec.Meta(ge=0)]] = None
    step_flops_per_s: Optional[Annotated[float, msgspec.Meta(ge=0)]] = None
    hfu: Optional[Annotated[float, msgspec.Meta(ge=0)]] = None
    mfu: Optional[Annotated[float, msgspec.Meta(ge=0)]] = None
    model_flops_per_step: Optional[Annotated[float, msgspec.Meta(ge=0)]] = None
    precision: Optional[str] = None
    peak_name: Optional[str] = None
    peak_flops_per_s: Optional[Annotated[float, msgspec.Meta(ge=0)]] = None


class ReportDoc(msgspec.Struct):
    verdict: str
    steps: Annotated[list[StepDoc], msgspec.Meta(min_length=1)]
    schema: str = SCHEMA
    steps_source: Optional[str] = None
    trace: TraceDoc = msgspec.field(default_factory=TraceDoc)
    summary: SummaryDoc = msgspec.field(default_factory=SummaryDoc)
    findings: list[FindingDoc] = []
    top_kernels: list[RowDoc] = []
    top_ops: list[RowDoc] = []
    warnings: list[str] = []
    measurement: Optional[MeasurementDoc] = None
    efficiency: Optional[EfficiencyDoc] = None
    memory: Optional[MemoryDoc] = None  # absent in reports written before issue 35
    memory_unavailable: Optional[str] = None


Bytes = Annotated[int, msgspec.Meta(ge=0, le=1 << 62)]
SignedBytes = Annotated[int, msgspec.Meta(ge=-(1 << 62), le=1 << 62)]


class MemoryStepDoc(msgspec.Struct):
    step: Optional[str] = None
    peak_allocated_bytes: Optional[Bytes] = None
    end_allocated_bytes: Optional[Bytes] = None


class MemoryCategoriesDoc(msgspec.Struct):
    parameter: Bytes = 0
    gradient: Bytes = 0
    optimizer_state: Bytes = 0
    activation: Bytes = 0
    input: Bytes = 0
    temporary: Bytes = 0
    other: Bytes = 0


class MemoryDeviceDoc(msgspec.Struct):
    """One device of `memory` (docs/schema.md#memory); levels "relative" on the CPU."""

    device: str
    peak_allocated_bytes: Bytes
    peak_reserved_bytes: Optional[Bytes] = None
    capacity_bytes: Optional[Bytes] = None
    growth_bytes_per_step: Optional[SignedBytes] = None
    levels: Optional[str] = None  # absolute | relative
    steps: list[MemoryStepDoc] = []
    categories_at_peak: Optional[MemoryCategoriesDoc] = None


class MemoryDoc(msgspec.Struct):
    source: str = "trace"  # trace | run (the categories at the peak come from the run)
    devices: list[MemoryDeviceDoc] = []


class _Kind(msgspec.Struct):
    schema: Optional[str] = None


_KIND = msgspec.json.Decoder(_Kind)


def schema_of(raw: bytes) -> Optional[str]:
    """The top-level "schema" of a JSON object document wherever the key is (a report re-saved with
    sorted keys has it past its first kilobytes); None when there is none or it is not a string."""
    try:
        return _KIND.decode(raw).schema
    except (msgspec.DecodeError, RecursionError):
        return None


def checked(report, where) -> dict:
    """`report` (a dict, or the JSON text of one) as a valid report@1 dict holding only the keys a
    reader uses. Raises UsageError for another perfsleuth schema, TraceError for anything invalid,
    naming `where` and the first bad field."""
    try:
        data = msgspec.json.decode(report) if isinstance(report, (bytes, bytearray, memoryview)) else report
    except msgspec.DecodeError as exc:
        raise TraceError(where, f"not valid JSON ({exc})") from None
    except RecursionError:
        raise TraceError(where, "JSON nested too deeply") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema == SET_SCHEMA:
        reports = data.get("reports")
        n = len(reports) if isinstance(reports, list) else 0
        raise UsageError(f"{where}: is a report set ({n} traces); diff compares one report with one report")
    if schema is not None and schema != SCHEMA:
        raise UsageError(f"{where}: schema {str(schema)[:80]!r} is not {SCHEMA!r}")
    try:
        return msgspec.to_builtins(msgspec.convert(data, ReportDoc))
    except msgspec.ValidationError as exc:
        raise TraceError(where, f"not a valid perfsleuth report ({exc})") from None
    except RecursionError:
        raise TraceError(where, "not a valid perfsleuth report (nested too deeply)") from None
