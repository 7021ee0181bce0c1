"""Every default in one place. Library functions take a `Config`; nothing repeats a default."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

# The report@1 categories, in their JSON order (docs/schema.md): defined here once, for the analysis,
# the renderers and diff alike. This module imports nothing heavy, so the renderers stay light.
CATEGORIES = ("dataloader", "kernel", "sync", "transfer", "host", "communication", "other")
STALL_CATEGORIES = ("dataloader", "sync", "transfer", "host", "communication")


# Memory (analysis/memory/): rows of the ops tables (at the peak, never freed), and the note said when a trace
# holds no allocator events.
MEMORY_TOP_OPS = 5
MEMORY_UNAVAILABLE = "record with profile_memory=True (or use perfsleuth run)"

# The HTML report's timeline of one steady step (report/timeline.py, docs/schema.md#timeline): at
# most this many events; events shorter than this fraction of the step are merged per lane and
# category; lanes this deep.
TIMELINE_MAX_EVENTS = 800
TIMELINE_MERGE_FRACTION = 1 / 1000  # under a pixel of the page's 830
TIMELINE_MAX_DEPTH = 8
TIMELINE_MAX_NAME = 300  # characters of an event name kept in the JSON


def _default_material() -> dict:
    # A stall is "material" from this share of step time on. Host overhead gets a higher bar: some
    # CPU time with the device idle is normal in eager PyTorch (launches, Python), and a run whose
    # kernels fill most of the step is kernel-bound with host overhead as a finding, not the verdict.
    return {"dataloader": 0.10, "sync": 0.10, "transfer": 0.10, "communication": 0.10, "host": 0.30}


@dataclass(frozen=True)
class Config:
    material_share: dict = field(default_factory=_default_material)
    # Below this kernel share the device is idle most of the step: the largest stall is the verdict
    # even when no single stall reaches its material share.
    min_kernel_share: float = 0.5
    top_n: int = 15  # rows in the top kernels / top ops tables
    # Rule engine (docs/rules.md): extra rule files or folders of *.toml, and threshold overrides
    # keyed RULE.THRESHOLD, e.g. {"num-workers.min_share": 0.05}.
    rule_paths: tuple = ()
    thresholds: dict = field(default_factory=dict)
    # HolisticTraceAnalysis's kernel / idle-time / launch analyses on the parsed trace (docs/hta.md).
    # Opt-in: it adds 25-45 % to a run and needs the `hta` extra.
    hta: bool = False
    # Cross-rank analysis (analysis/ranks/stragglers.py, docs/ranks.md): a rank is a straggler, and the job
    # straggler-bound, when the other ranks wait for it this share of the job's step time or more and
    # it spends this share more than the median rank outside communication (a rank that is last by
    # the chance order of arrival has no such excess). Communication-bound uses
    # material_share["communication"] on the critical rank's exposed communication.
    straggler_share: float = 0.10
    # ... and only when it arrives last consistently (analysis/ranks/who_arrives_last.py): last in more than half of
    # the matched collectives, with a mean lateness per step above this many standard deviations of
    # its lateness across the steps. Otherwise the arrivals alternate: jitter, not a straggler.
    straggler_noise: float = 1.0
    # Traces of one job overlap in time up to the clock offset between their hosts; a larger offset
    # (from their windows, or from matching their collectives) means they are not one job (analysis/ranks/jobs.py).
    max_clock_offset_s: float = 60.0
    # A send and its recv without a named peer pair by end time: within this share of the shorter
    # duration on the aligned clocks, and only when each is the other's only candidate (analysis/ranks/p2p.py).
    p2p_end_tolerance: float = 0.10
    # Cores of the machine a trace was recorded on, for forecasts about DataLoader workers and threads
    # (`analyze --cpus N`); None: what `perfsleuth run` recorded in the trace, else unknown and said so.
    cpus: Optional[float] = None
    # A run's stacks companion (source lines, trace/companion.py) is loaded only for findings that cite source
    # lines, and only when it is no larger on disk than the main trace or than this (a small run's companion,
    # with Python stacks, is often many times its main trace and still loads in well under a second).
    companion_free_bytes: int = 4 << 20
    # ... and for what fills an in-process DataLoader (dataloader-slow's cause, facts/loader.py)
    # when the loader waits at least this share of the step (num-workers' min_share: it loads
    # the lines then anyway)
    companion_loader_share: float = 0.05
    # Compute efficiency (docs/efficiency.md): the device's peak when the user gives it -- one TFLOP/s
    # figure for every precision (`--peak-tflops`), and/or a TraceLens arch JSON (`--peak-arch`,
    # already read: a dict). None: the datasheet table for a known GPU, the peak `perfsleuth run`
    # measured on a CPU, else none.
    peak_tflops: Optional[float] = None
    peak_arch: Optional[dict] = None
    efficiency_top_n: int = 20  # op groups listed in the report's efficiency section
    # The HTML's way into the trace: each top kernel's launching op and source line, and the timeline of
    # the median steady step (report/launches.way_in), in report.json, the HTML and the Markdown. The
    # terminal shows neither: `analyze` without report files leaves them out (issue 35 item 5).
    report_links: bool = True


@dataclass(frozen=True)
class Limits:
    """What one input may cost before perfsleuth refuses it with one line naming the file
    (docs/robustness.md). Real traces stay far inside every bound."""

    # A .json.gz that inflates to more than this many times its compressed size is refused once
    # `inflate_ratio_from` bytes are out (real traces: 7-25x; a stream of zeros or spaces: ~1000x).
    inflate_ratio: int = 100
    inflate_ratio_from: int = 64 << 20
    # A document larger than this share of the machine's memory cannot be analysed (the analysis
    # needs about 1.4x the document): refused while inflating, before memory runs out.
    memory_share: float = 0.5
    # The rule engine, per rule and trace: loop iterations plus calls, wall time, characters of a
    # rendered message or fix, and the longest string or list an expression may build.
    rule_steps: int = 200_000
    rule_seconds: float = 2.0
    rule_output_chars: int = 65_536
    rule_sequence: int = 1_000_000
    # A remote trace (an fsspec URL): reaching it and its first answer (connect, list, open), and then each
    # further piece of it, within these seconds; pieces of `remote_piece` bytes (trace/sources.py).
    remote_connect_s: float = 30.0
    remote_stall_s: float = 60.0
    remote_piece: int = 4 << 20


LIMITS = Limits()
