"""The library's front door: analyze a trace, a file or a directory of traces."""

from __future__ import annotations

import importlib
import logging
import os
import re
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence, Union

from .config import Config
from .errors import TraceError, UsageError
from .trace.hugepages import without_huge_pages
from .trace import cluster, paths, reading, sources

if TYPE_CHECKING:
    from .report.model import Report, ReportSet
    from .trace.model import Trace

log = logging.getLogger(__name__)

# What analysing a trace imports (pandas with the stages): imported by load_analysis, so that a large
# trace's decoding workers are forked without it while this process imports it (analyze_file).
ANALYSIS_MODULES = ("trace.model", "trace.selection", "analysis.attribution", "analysis.ranks.summary",
                    "analysis.steps", "analysis.tables", "analysis.verdict", "report.model", "engine.catalog",
                    "engine.evaluate", "engine.explain", "engine.forecast", "engine.reconsider", "facts.core",
                    "facts.forecasting", "facts.stacks", "analysis.forecast.forecaster",
                    "analysis.efficiency.words", "report.timeline", "report.launches")


def load_analysis() -> None:
    """Import the analysis, and compile what every analysis evaluates of each built-in rule (whether it
    applies, its condition). Each once: later calls cost nothing."""
    for name in ANALYSIS_MODULES:
        importlib.import_module(f".{name}", __package__)
    from .engine.catalog import load_catalog

    for rule in load_catalog():  # the cached built-in rules: analyses without --rules or --set use these
        rule.compiled["applies"], rule.compiled["condition"]  # noqa: B018


def __getattr__(name: str):  # Report, ReportSet, Trace, load_trace: imported when asked for
    homes = {"Report": "report.model", "ReportSet": "report.model", "Trace": "trace.model", "load_trace": "trace.model"}
    if name in homes:
        return getattr(importlib.import_module(f".{homes[name]}", __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def analyze_trace(trace: Trace, config: Optional[Config] = None) -> Report:
    from .trace.selection import memo

    with memo():  # each selection of events by kind is made once for the whole analysis
        return _analyze(trace, config or Config())


def _analyze(trace: Trace, config: Config) -> Report:
    from .analysis.attribution import attribute
    from .analysis.ranks.summary import summarize_rank
    from .analysis.steps import find_steps
    from .analysis.tables import time_share, top_kernels, top_ops
    from .analysis.verdict import decide, degree, device_word, verdict_text
    from .report.model import Report

    steps = find_steps(trace)
    breakdown = attribute(trace, steps)
    share = time_share(breakdown)
    gpu = _on_gpu(trace, breakdown)
    verdict, reason = decide(share, config, gpu, unread=trace.unread_device)
    report = Report(trace=trace, steps=steps, breakdown=breakdown, verdict=verdict, verdict_reason=reason,
                    top_kernels=top_kernels(trace, steps, config.top_n), top_ops=top_ops(trace, steps, config.top_n),
                    degree=degree(verdict, share),
                    verdict_text=verdict_text(verdict, share, gpu, device_word(trace.device_type)))
    _findings(report, config, share, gpu)
    report.rank_summary = summarize_rank(trace, report.breakdown, report.verdict)
    if config.hta:
        from .analysis.hta_adapter import hta_analyses

        report.extra.update(hta_analyses(trace, steps))
    return report


def _findings(report: Report, config: Config, share: dict, gpu: bool) -> None:
    """Rule engine hook: findings with the forecasts of their fixes, in order (docs/rules.md), the
    report's forecast object (the replay's self-check, the combined forecast), the verdict checked
    against the forecasts (engine/reconsider.py), the rules that could not be checked, the host-time
    explanation and the device generation."""
    from .engine.catalog import load_catalog
    from .engine.evaluate import evaluate, not_checked
    from .engine.explain import host_time
    from .engine.forecast import Forecasts, report_forecast
    from .facts.core import compute_facts
    from .facts.efficiency import efficiency_section
    from .facts.forecasting import make_forecaster
    from .facts.memory import memory_of
    from .facts.stacks import Companion

    rules = load_catalog(config.rule_paths, config.thresholds)
    facts = compute_facts(report.trace, report.steps, report.breakdown, _user_peak(config))
    # the compute-efficiency section (docs/efficiency.md)
    report.extra.update(efficiency_section(facts, config.efficiency_top_n))
    memory = memory_of(facts.context)  # the report's memory section (analysis/memory/)
    report.memory, report.memory_unavailable = memory.section, memory.unavailable
    # perfsleuth run's stacks window, lazily; a memory companion already read is not read again
    loaded = (memory.trace, memory.steps) if memory.trace is not report.trace else None
    companion = Companion(report.trace, config.companion_free_bytes, loaded)
    companion.join_dtypes(facts)  # only where a rule's condition reads them (GEMM time on a GPU)
    companion.join_loader(facts, config.companion_loader_share)  # what fills an in-process loader
    forecasts = Forecasts(lambda: make_forecaster(facts.context, config.cpus, facts.values),
                          float(facts.values["step_us"]), facts)
    report.findings = evaluate(rules, facts, forecasts)
    from .report.launches import sources_from, way_in

    if config.report_links:
        way_in(report, facts.context)  # kernel -> op -> line, the step's timeline: the HTML's way in
    _join_lines(report, rules, facts, companion)
    if config.report_links:
        sources_from(report, companion)  # the kernels' lines, from the stacks window when it was loaded
    forecast = report_forecast(report.findings, forecasts)
    if forecast:
        report.extra["forecast"] = forecast
    _check_verdict(report, config, share, gpu)
    _efficiency_degree(report)
    report.not_checked = not_checked(rules, facts, report.findings)
    report.host_time = host_time(report.verdict, report.findings, facts)
    report.generation = {"name": facts.values["device_generation"] or None,
                         "compute_capability": facts.values["device_compute_capability"] or None,
                         "source": facts.values["device_generation_source"]}


def _efficiency_degree(report: Report) -> None:
    """A kernel-bound verdict says how close the kernels come to the device: 'kernel-bound: ...;
    at 31% of the H100 SXM's dense bf16 peak: matmuls 62% of roofline, ...'
    (analysis/efficiency/words.py)."""
    from .analysis.efficiency.words import verdict_clause

    clause = verdict_clause(report.extra.get("efficiency"))
    if report.verdict == "kernel-bound" and clause:
        report.verdict_text = f"{report.verdict_text}; {clause}" if report.verdict_text else clause


def _user_peak(config: Config) -> Optional[dict]:
    from .analysis.efficiency.peaks import user_peak

    return user_peak(config.peak_tflops, config.peak_arch)


def _on_gpu(trace: Trace, breakdown) -> bool:
    return bool(breakdown.has_device and trace.device_type in ("cuda", "rocm", "mtia"))


def _check_verdict(report: Report, config: Config, share: dict, gpu: bool) -> None:
    """The verdict from the shares (analysis/verdict.decide), checked against the findings' numbers
    (engine/reconsider.py): report.verdict, verdict_reason, verdict_text, degree, verdict_ruled_out."""
    from .analysis.verdict import decide, device_word
    from .engine.reconsider import reconsider

    verdict, reason = decide(share, config, gpu, unread=report.trace.unread_device)
    checked = reconsider(verdict, reason, share, report.findings, config, gpu,
                         device_word(report.trace.device_type))
    report.verdict, report.verdict_reason, report.verdict_text = checked.verdict, checked.reason, checked.text
    report.degree, report.verdict_ruled_out = checked.degree, checked.ruled_out
    report.verdict_notes = checked.notes
    from .analysis.memory import out_of_memory_text

    oom = out_of_memory_text(report.memory)  # an out-of-memory trace says so first (rules/memory.toml)
    if oom:
        report.verdict_text = f"{oom} {report.verdict_text}".strip()


def recheck(report: Report, config: Optional[Config] = None) -> Report:
    """After `verified` measurements (perfsleuth run --verify) are attached to `report.findings`: each
    finding rated again and the findings ordered by their numbers (engine/evaluate.order: a measured
    speed-up decides severity and rank), and the verdict checked again against them. Needs the full
    report (not slim)."""
    from .engine.evaluate import order

    config = config or Config()
    report.findings = order(report.findings)
    _check_verdict(report, config, report.time_share, _on_gpu(report.trace, report.breakdown))
    return report


def _join_lines(report: Report, rules: list, facts, companion) -> None:
    """Source lines from the stacks companion, loaded only when a finding cites a location table that is
    empty (facts/stacks.py): those findings' message, fix and locations are rendered again with them."""
    from .engine.catalog import TABLES
    from .engine.evaluate import evaluate_rule

    by_slug = {r.slug: r for r in rules}
    sites = [t for t in TABLES if t.endswith("_sites")]

    def cites(rule) -> set:  # the table its locations come from, and the tables its templates name
        return {t for t in sites if t == rule.locations or re.search(rf"\b{t}\b", rule.message + rule.fix)}

    need = [f for f in report.findings if f.get("rule") in by_slug
            and any(not facts.tables.get(t) for t in cites(by_slug[f["rule"]]))]
    if need and companion.join_lines(facts):
        for f in need:
            again = evaluate_rule(by_slug[f["rule"]], facts)
            if again is not None:
                f.update({k: again[k] for k in ("message", "fix", "locations")})
    if companion.note:
        report.trace.warnings.append(companion.note)


def forecast_fix(path: Union[str, os.PathLike], model: str, params: Optional[dict] = None,
                 config: Optional[Config] = None) -> dict:
    """The forecast of one fix on one trace file, whether or not a rule fired: `model` is a forecast
    model (`perfsleuth.analysis.forecast.forecaster.MODELS`, e.g. "dataloader-workers"), `params` sets the fix
    where the model allows it ({"workers": 1}). The finding's `forecast` object (docs/schema.md)."""
    from .analysis.attribution import attribute
    from .analysis.steps import find_steps
    from .facts.core import compute_facts
    from .facts.forecasting import make_forecaster
    from .trace.model import load_trace
    from .trace.selection import memo

    config = config or Config()
    with without_huge_pages():
        trace = load_trace(path)
    with memo():
        steps = find_steps(trace)
        facts = compute_facts(trace, steps, attribute(trace, steps))
        forecaster = make_forecaster(facts.context, config.cpus, facts.values)
        return forecaster.forecast(model, float(facts.values["step_us"]), params)


def analyze_file(path: Union[str, os.PathLike], config: Optional[Config] = None,
                 progress: Optional[Callable[[int, int], None]] = None, jobs: int = 1) -> Report:
    """One trace file; `jobs` > 1 decodes a large file's chunks in that many forked processes, forked
    before the analysis is imported: this process imports it while they decode."""
    with without_huge_pages():
        decoded = reading.read_events(path, progress, jobs, idle=load_analysis)
        from .trace.model import build_trace

        return analyze_trace(build_trace(*decoded), config)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; the CPU count where that is unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def capped_jobs(jobs: Optional[int]) -> int:
    """`jobs` worker processes, at most one per usable CPU (default: one per usable CPU)."""
    return max(1, min(jobs or usable_cpus(), usable_cpus()))


def _analyze_member(path: Path, config: Optional[Config]):
    """THE per-file function of a fan-out over files (process pool, -j 1, other executors): (slim
    Report, None), or (None, the problem in one line). Whatever goes wrong with one file is that file's
    problem, so the other files still get their reports. A UsageError (a bad rule file or option) is
    no file's problem: it propagates and ends the run with its one line."""
    try:
        return analyze_file(path, config).slim(), None
    except TraceError as exc:
        return None, exc.problem
    except UsageError:
        raise
    except MemoryError:
        return None, "out of memory while analysing it"
    except RecursionError:
        return None, "nested too deeply to analyse"
    except Exception as exc:  # a bug of ours on this file: said, logged with its traceback, not fatal
        log.debug("analysing %s failed", path, exc_info=True)
        text = " ".join(str(exc).split())[:200]
        return None, f"internal error ({type(exc).__name__}: {text}); please report it with the trace"


OnFile = Callable[[str, Optional["Report"], Optional[str], int, int], None]


def _fan_out(files: list, config: Optional[Config], jobs: int, scheduler: Optional[str] = None,
             on_file: Optional[OnFile] = None) -> list:
    """_analyze_member over `files`, results in order: here, in `jobs` processes, or on Dask
    (trace/cluster.py). `on_file(path, report, problem, done, total)` is called in this thread as each
    file finishes, in the order they finish. A file whose worker died (the OOM killer) costs only that
    file: with the process pool, the files the broken pool left are retried each in a process of its
    own, so only the culprit is skipped."""
    results: list = [None] * len(files)
    done = [0]

    def finished(i: int, result: tuple) -> None:
        results[i] = result
        done[0] += 1
        if on_file is not None:
            on_file(str(files[i]), result[0], result[1], done[0], len(files))

    with cluster.executor(scheduler, jobs) as pool:
        if pool is None:
            for i, f in enumerate(files):
                finished(i, _analyze_member(f, config))
            return results
        futures = {pool.submit(_analyze_member, f, config): i for i, f in enumerate(files)}
        for future in as_completed(futures):
            i = futures[future]
            try:
                finished(i, future.result())
            except UsageError:
                raise
            except BrokenProcessPool:
                pass
            except Exception as exc:  # Dask: a worker lost (KilledWorker), a task cancelled
                finished(i, (None, f"the worker analysing it failed ({type(exc).__name__})"))
    for i, f in enumerate(files):
        if results[i] is None:
            finished(i, _alone(f, config))
    return results


def _alone(path: Path, config: Optional[Config]) -> tuple:
    with ProcessPoolExecutor(max_workers=1) as pool:
        try:
            return pool.submit(_analyze_member, path, config).result()
        except BrokenProcessPool:
            return None, "the process analysing it died (out of memory?)"


def analyze_path(path: Union[str, os.PathLike], config: Optional[Config] = None,
                 progress: Optional[Callable[[int, int], None]] = None,
                 jobs: Optional[int] = None, scheduler: Optional[str] = None,
                 on_file: Optional[OnFile] = None) -> Union[Report, ReportSet]:
    """A file gives a Report; a directory gives a ReportSet (a directory holding one trace gives its Report).

    `jobs` worker processes at most (default, and at most: the usable CPUs) analyse the files of a
    directory (one per rank/worker) in parallel, or decode the chunks of one large file in parallel.
    Pass jobs=1 from a process that must not fork (e.g. one that runs torch). `scheduler` runs the
    files of a directory on Dask instead ("local", or the tcp:// address of a running scheduler:
    trace/cluster.py). Paths may be fsspec URLs (s3://, gs://, hdfs://, memory://, ...: trace/sources.py).
    `on_file`: called as each file of a directory finishes (see _fan_out), for progress."""
    cluster.check_scheduler(scheduler)
    named = paths.named_files(path)  # which files the path names (trace/paths.py)
    if named.file is not None:
        return analyze_file(named.file, config, progress, 1 if named.remote else capped_jobs(jobs))
    return analyze_files(named.files, config, jobs, scheduler, root=str(named.root), unlisted=named.unlisted,
                         on_file=on_file)


def analyze_files(files: Sequence, config: Optional[Config] = None, jobs: Optional[int] = None,
                  scheduler: Optional[str] = None, root: str = "", unlisted: Sequence = (),
                  on_file: Optional[OnFile] = None) -> Union[Report, ReportSet]:
    """Several trace files (the ranks of one job, usually): one slim Report each, read in parallel
    (see analyze_path for `jobs` and `scheduler`), grouped into jobs by what the traces say
    (analysis/ranks/jobs.py), and a cross-rank report over each job of two or more traces
    (analysis/ranks/collectives.py, analysis/ranks/stragglers.py); why traces were split or left out is in the set's
    warnings.
    `unlisted`: (folder, problem) of folders that could not be listed, reported as skipped."""
    from .report.model import ReportSet

    files = list(files)
    jobs = max(1, min(len(files), (jobs or usable_cpus()) if scheduler else capped_jobs(jobs)))
    load_analysis()  # once, here: the processes forked to read the files inherit it
    results = _fan_out(files, config, jobs, scheduler, on_file)
    result = ReportSet(path=sources.absolute(root) if root else root)  # absolute, as each report's trace path
    for f, (report, problem) in zip(files, results):
        if report is None:
            log.info("skipping %s: %s", f, problem)  # the CLI lists ReportSet.skipped once
            result.skipped.append((sources.absolute(f), problem))
        else:
            result.reports.append(report)
    result.skipped += [(sources.absolute(f), problem) for f, problem in unlisted]
    if not result.reports:
        first = result.skipped[0]
        raise TraceError(root, f"no readable trace in the directory (first: {first[0]}: {first[1]})")
    if len(result.reports) == 1 and not result.skipped:
        return result.reports[0]
    from .analysis.ranks.jobs import group_jobs  # the cross-rank analysis: only for several traces
    from .analysis.ranks.stragglers import analyze_ranks

    config = config or Config()
    summaries = [r.rank_summary for r in result.reports]
    grouping = group_jobs(summaries, config)
    result.warnings += grouping.warnings
    result.jobs = [analyze_ranks([summaries[i] for i in job], config) for job in grouping.jobs]
    result.cross = result.jobs[0] if len(result.jobs) == 1 else None
    return result
