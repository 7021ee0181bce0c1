"""The library's front door: analyze a trace, a file or a directory of traces."""

from __future__ import annotations

import logging
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Optional, Union

from .analysis.attribution import attribute
from .analysis.steps import find_steps
from .analysis.tables import time_share, top_kernels, top_ops
from .analysis.verdict import decide
from .config import Config
from .errors import TraceError
from .report.model import Report, ReportSet
from .trace.hugepages import without_huge_pages
from .trace.model import Trace, find_trace_files, load_trace
from .trace.selection import memo

log = logging.getLogger(__name__)


def analyze_trace(trace: Trace, config: Optional[Config] = None) -> Report:
    with memo():  # each selection of events by kind is made once for the whole analysis
        return _analyze(trace, config or Config())


def _analyze(trace: Trace, config: Config) -> Report:
    steps = find_steps(trace)
    breakdown = attribute(trace, steps)
    verdict, reason = decide(time_share(breakdown), config)
    report = Report(trace=trace, steps=steps, breakdown=breakdown, verdict=verdict, verdict_reason=reason,
                    top_kernels=top_kernels(trace, steps, config.top_n), top_ops=top_ops(trace, steps, config.top_n))
    report.findings, forecast = _findings(report, config)
    if forecast:
        report.extra["forecast"] = forecast
    if config.hta:
        from .analysis.hta_adapter import hta_analyses

        report.extra.update(hta_analyses(trace, steps))
    return report


def _findings(report: Report, config: Config) -> tuple[list, dict]:
    """The rule engine: findings with forecasts, in order (docs/rules.md), and the report's forecast
    object (the replay's self-check, the combined forecast)."""
    from .engine.catalog import load_catalog
    from .engine.evaluate import evaluate
    from .engine.forecast import Forecasts, report_forecast
    from .facts.core import compute_facts
    from .facts.forecasting import make_forecaster

    rules = load_catalog(config.rule_paths, config.thresholds)
    facts = compute_facts(report.trace, report.steps, report.breakdown)
    forecasts = Forecasts(lambda: make_forecaster(facts.context, config.cpus), float(facts.values["step_us"]))
    findings = evaluate(rules, facts, forecasts)
    return findings, report_forecast(findings, forecasts)


def forecast_fix(path: Union[str, os.PathLike], model: str, params: Optional[dict] = None,
                 config: Optional[Config] = None) -> dict:
    """The forecast of one fix on one trace file, whether or not a rule fired: `model` is a forecast
    model (`perfsleuth.analysis.forecast.MODELS`, e.g. "dataloader-workers"), `params` sets the fix
    where the model allows it ({"workers": 1}). The finding's `forecast` object (docs/schema.md)."""
    from .facts.core import compute_facts
    from .facts.forecasting import make_forecaster

    config = config or Config()
    with without_huge_pages():
        trace = load_trace(path)
    with memo():
        steps = find_steps(trace)
        facts = compute_facts(trace, steps, attribute(trace, steps))
        return make_forecaster(facts.context, config.cpus).forecast(model, float(facts.values["step_us"]), params)


def analyze_file(path: Union[str, os.PathLike], config: Optional[Config] = None,
                 progress: Optional[Callable[[int, int], None]] = None, jobs: int = 1) -> Report:
    """One trace file; `jobs` > 1 decodes a large file's chunks in that many forked processes."""
    with without_huge_pages():
        return analyze_trace(load_trace(path, progress, jobs), config)


def _analyze_member(path: Path, config: Optional[Config]):
    """One file of a directory, in a worker process: a slim Report, or the problem."""
    try:
        return analyze_file(path, config).slim(), None
    except TraceError as exc:
        return None, exc.problem


def analyze_path(path: Union[str, os.PathLike], config: Optional[Config] = None,
                 progress: Optional[Callable[[int, int], None]] = None,
                 jobs: Optional[int] = None) -> Union[Report, ReportSet]:
    """A file gives a Report; a directory gives a ReportSet (a directory holding one trace gives its Report).

    `jobs` worker processes at most (default: the CPU count) analyse the files of a directory (one per
    rank/worker) in parallel, or decode the chunks of one large file in parallel. Pass jobs=1 from a
    process that must not fork (e.g. one that runs torch)."""
    p = Path(path)
    if not p.is_dir():
        return analyze_file(p, config, progress, jobs or os.cpu_count() or 1)
    files = find_trace_files(p)
    if not files:
        raise TraceError(p, "directory holds no trace files (*.json, *.json.gz)")
    jobs = max(1, min(len(files), jobs or os.cpu_count() or 1))
    if jobs == 1:
        results = [_analyze_member(f, config) for f in files]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_analyze_member, files, [config] * len(files)))
    result = ReportSet(path=str(p))
    for f, (report, problem) in zip(files, results):
        if report is None:
            log.warning("skipping %s: %s", f, problem)
            result.skipped.append((str(f), problem))
        else:
            result.reports.append(report)
    if not result.reports:
        first = result.skipped[0]
        raise TraceError(p, f"no readable trace in the directory (first: {first[0]}: {first[1]})")
    return result.reports[0] if len(result.reports) == 1 and not result.skipped else result
