"""What a `perfsleuth run` came to: the outcome (exit code, the one line for stderr, the report) and the
analysis of the trace it recorded. record/session.py runs the script; this says what happened."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from . import ranks as run_ranks
from .config import RunConfig

EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OUTPUT = 1, 130, 2

WHOLE_RUN_WARNING = ("no step boundary was seen (no optimizer.step(), DataLoader batch, repeated model call or "
                     "prof.step()): everything profiled is analysed as one window, recorded without Python stacks "
                     "or input shapes")


@dataclass
class RunOutcome:
    """What happened: the report (None when there is none, or on ranks other than 0) and why."""

    out_dir: Path
    trace_path: Path
    exit_code: Any = 0  # an int, or a SystemExit code passed through as is
    report: Any = None
    message: Optional[str] = None  # one plain line about what happened, for stderr
    user_traceback: Optional[str] = None  # the script's own traceback, our frames removed
    steps: int = 0
    profiled_steps: int = 0
    rank: Optional[int] = None
    whole_run: bool = False  # no step boundary: the trace is the whole run, one window
    warnings: list = field(default_factory=list)
    signal: Optional[str] = None  # SIGINT, SIGTERM or SIGHUP when the run was interrupted
    export_error: Optional[str] = None  # the trace could not be written where asked (see ProfileSession)
    stopped_at: Optional[str] = None  # where the script was when stopped after the window ("train.py:57 in closure")
    rival_at: Optional[str] = None  # where the script started its own torch.profiler (record/other_profilers.py), if it did


def conclude(o: RunOutcome, ended: str, window_done: bool, config: RunConfig) -> None:
    """Exit code, the one-line message, and the report when there is something to analyze."""
    have = (o.profiled_steps > 0 or o.whole_run) and o.trace_path.is_file()
    where = f"; partial trace kept: {o.trace_path}" if o.trace_path.is_file() else ""
    seen = f"{o.steps} step(s) seen, profiling starts at step {config.wait + config.warmup + 1}"
    if ended == "raised":
        o.exit_code = EXIT_FAILED
        when = "after the profiled window" if window_done else (
            f"during the profiled window ({o.profiled_steps} of {config.active} steps recorded)" if have
            else f"before any profiled step completed ({seen}){where}")
        o.message = f"{o.message} {when}"
    elif ended == "interrupted":  # the exit code is 128 + the signal (run_script)
        how = f"interrupted ({o.signal})" if o.signal and o.signal != "SIGINT" else "interrupted"
        o.message = (f"{how}: the report covers the {o.profiled_steps} profiled step(s) collected" if have
                     else f"{how} before any profiled step completed ({seen}){where}")
    elif ended == "exited" and not have and o.steps:
        o.message = f"the script exited (code {o.exit_code}) before any profiled step completed ({seen})"
    elif ended == "finished" and not have:
        o.exit_code = EXIT_FAILED
        light = config.fallback_window and config.wait > 0  # then a run without steps had its light recording
        what = (f"the script ended before any profiled step completed ({seen})" if o.steps
                else "the script ran no torch operation to profile" if light else "the script saw no step boundary")
        o.message = (f"no report: {what}. Steps come from optimizer.step(), DataLoader batches or a repeated "
                     f"model call; lower --wait/--warmup, or call prof.step() (perfsleuth docs run)")
    elif ended == "stopped":
        at = f" at {o.stopped_at}" if o.stopped_at else ""
        o.message = (f"stopped the script after step {o.steps} (profiled {o.profiled_steps}){at}; --full runs it "
                     f"to the end")
    if o.rival_at:  # perfsleuth stopped profiling there; the script's error, if any, comes after
        covers = (f"the report covers the {o.profiled_steps} profiled step(s) recorded before it" if have
                  else "nothing profiled to report")
        line = (f"the script starts its own torch.profiler at {o.rival_at}: perfsleuth stopped profiling there (one "
                f"profiler per process), {covers}; remove the script's profiler to profile it with perfsleuth run, or "
                f"analyse the script's own trace with perfsleuth analyze")
        o.message = f"{line}; {o.message}" if ended == "raised" else line
    if o.whole_run:
        o.warnings.append(WHOLE_RUN_WARNING)
        if o.exit_code in (0, None):
            o.message = "no step boundary in the script: the report covers the whole run as one window"
    elif not window_done:
        o.warnings.append(f"the run ended inside the active window ({o.profiled_steps} of {config.active} steps): "
                          f"the last step is partial")
    if o.rank not in (None, 0) and o.exit_code in (0, None):
        o.message = None  # rank 0 speaks for a healthy run
    if o.export_error:  # perfsleuth's failure, said as such; never the script's
        o.message = o.export_error + (f"; {o.message}" if o.message else "")
        if o.exit_code in (0, None):
            o.exit_code = EXIT_OUTPUT
    if have and o.rank in (None, 0):
        own = analyze(o.trace_path.absolute(), o.warnings, config)
        o.report, note = run_ranks.with_other_ranks(own, o.trace_path.absolute(), o.warnings)
        o.message = "; ".join(m for m in (o.message, note) if m) or None


def os_exit_line(code, site: Optional[dict], steps: int, profiled: int, kept: Optional[Path]) -> str:
    """What perfsleuth says when the script calls os._exit(): the process ends at once, so there is no report;
    what was recorded is kept (written just before), and the line says where and how to analyse it."""
    import shlex

    at = f" at {site['file']}:{site['line']}" if site else ""
    what = (f"the trace of the {profiled} profiled step(s) is kept: {kept}; analyse it with: perfsleuth analyze "
            f"{shlex.quote(str(kept))}" if kept else "nothing profiled was kept")
    return f"perfsleuth: the script called os._exit({code}){at} at step {steps}: the process ends now, without a report; {what}"


def analyze(trace_path: Path, warnings: Sequence[str] = (), run: Optional[RunConfig] = None):
    """The report of a run's trace; `run`'s peak (--peak-tflops, --peak-arch) for its efficiency section."""
    from ..api import analyze_path
    from ..config import Config

    given = run is not None and (run.peak_tflops is not None or run.peak_arch is not None)
    config = Config(peak_tflops=run.peak_tflops, peak_arch=run.peak_arch) if given else None
    report = analyze_path(trace_path, config, jobs=1)  # no fork from a process running torch
    if WHOLE_RUN_WARNING in warnings:  # says the same as the analysis's whole-trace warning, and why
        report.steps.warnings[:] = [w for w in report.steps.warnings if "analysed as one window" not in w]
    report.steps.warnings.extend(warnings)
    return report
