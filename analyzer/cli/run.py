"""The `run` command (`perfsleuth run [--verify] TARGET ...`), loaded by the group in cli/main.py when used.

Its own module because the command grew past what cli.py can hold under the 400-line rule: the
profiled run (record/session.py), then with --verify the experiments that measure the fixes
(verify/experiment.py), then the report.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import click

from ..errors import UsageError
from .main import user_errors
from .output import emit, output_options, protect_inputs, say
from ..record.config import RunConfig, unprofiled_steps
from ..verify.config import VerifyConfig


def verify_options(fn):
    """--verify and its settings (docs/run.md#verify-measure-the-fixes)."""
    fn = click.option("--verify-compile", is_flag=True,
                      help="With --verify: also try torch.compile of the top module (its compile time is reported "
                           "apart, as warm-up).")(fn)
    fn = click.option("--verify-budget", type=click.FloatRange(min=1), default=None, metavar="SECONDS",
                      help="With --verify: stop starting experiments after this long [default: the plan's estimated "
                           f"cost x {VerifyConfig.budget_margin:g}, from the measured step time, at least "
                           f"{VerifyConfig.min_budget_s:.0f} s, at most {VerifyConfig.max_budget_s:.0f} s].")(fn)
    fn = click.option("--verify-steps", type=click.IntRange(1), default=None, metavar="N",
                      help="With --verify: timed steps per window [default: about "
                           f"{VerifyConfig.window_s:g} s of steps, {VerifyConfig.min_steps}-{VerifyConfig.max_steps}].")(fn)
    fn = click.option("--verify-pairs", type=click.IntRange(1), default=None, metavar="N",
                      help=f"With --verify: baseline/variant pairs per fix [default: {VerifyConfig.pairs}; fewer "
                           "only if you ask: the spread of fewer pairs says little].")(fn)
    fn = click.option("--verify", is_flag=True,
                      help="After the report, measure each fix perfsleuth can apply without editing the script "
                           "(DataLoader workers, threads, optimizer flags, ...): the script runs again, baseline and "
                           "variant alternating, without the profiler. See `perfsleuth docs run`.")(fn)
    return fn


def verify_config(verify, pairs, steps, budget, compile_) -> VerifyConfig:
    given = [name for name, v in (("--verify-pairs", pairs), ("--verify-steps", steps), ("--verify-budget", budget),
                                  ("--verify-compile", compile_ or None)) if v is not None]
    if given and not verify:
        raise UsageError(f"{given[0]} needs --verify")
    return VerifyConfig(pairs=pairs or VerifyConfig.pairs, steps=steps, budget_s=budget, compile=bool(compile_))


@click.command("run", short_help="Profile a training script unchanged, and report.",
               context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-m", "module", is_flag=True, help="TARGET is a module, run like `python -m TARGET`.")
@click.option("--measure", type=click.IntRange(2), default=None, metavar="N",
              help="Unprofiled steps to time, half before the recorded window and half after it: the step time "
                   "`perfsleuth diff` compares (with few, one slow step widens its noise band) [default: "
                   f"{RunConfig.measured(RunConfig.wait, RunConfig.after)} (--wait {RunConfig.wait}, whose first step "
                   f"is the script's start-up and not timed, --after {RunConfig.after}); {RunConfig.measure_ci} when "
                   "the CI environment variable is set].")
@click.option("--wait", type=click.IntRange(0), default=None, metavar="N",
              help=f"Steps run before profiling, timed without the profiler (the unprofiled step time) [default: "
                   f"{RunConfig.wait}].")
@click.option("--warmup", type=click.IntRange(0), default=RunConfig.warmup, show_default=True,
              help="Steps traced and discarded (profiler start-up).")
@click.option("--active", type=click.IntRange(1), default=RunConfig.active, show_default=True,
              help="Steps recorded and analyzed.")
@click.option("--after", type=click.IntRange(0), default=None, metavar="N",
              help="Steps run after the recorded window, timed without the profiler (with --wait's: the baseline) "
                   f"[default: {RunConfig.after}].")
@click.option("--no-stack", is_flag=True,
              help="No Python stacks at all: skips the short stacks window after the analysed one, so findings "
                   "carry no source lines.")
@click.option("--no-shapes", is_flag=True,
              help="No input shapes and dtypes in the stacks window either (the analysed window never records them).")
@click.option("--record-shapes", is_flag=True,
              help="Input shapes and dtypes in the analysed window too: the report's compute "
                   "efficiency (FLOPs, roofline; `perfsleuth docs efficiency`). Costs up to +50 % on "
                   "tiny ops.")
@click.option("--peak-tflops", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="TFLOPS",
              help="The device's compute peak in TFLOP/s, for the efficiency section's percentages, as for "
                   "`analyze` [default: [tool.perfsleuth] peak_tflops, the datasheet's dense peak of a known "
                   "GPU, else this CPU's, measured once per machine].")
@click.option("--peak-arch", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="The device's peaks per precision and its memory bandwidth, as a TraceLens arch JSON "
                   "(as for `analyze`).")
@click.option("--no-memory", is_flag=True,
              help=f"No memory window: the {RunConfig.memory_steps} steps recorded with profile_memory (and stacks "
                   "and shapes) after the window, for the peak and what fills it, are skipped.")
@click.option("--full", is_flag=True, help="Run the script to its end (unprofiled after the window).")
@click.option("--no-fallback-window", "no_fallback", is_flag=True,
              help="Record nothing before the first step (faster when the script runs many torch ops before "
                   "it, e.g. preprocessing); a script without any step then gets no report.")
@verify_options
@output_options
@click.argument("target")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@user_errors
def run_command(target, script_args, module, measure, wait, warmup, active, after, no_stack, no_shapes, no_memory, full,
                no_fallback,
                out_dir, json_path, html_path, markdown_path, force, verify=False, verify_pairs=None, verify_steps=None,
                verify_budget=None, verify_compile=False, record_shapes=False, peak_tflops=None,
                peak_arch=None) -> None:
    """Profile a training script unchanged and report (perfsleuth options go before TARGET).

    \b
    Examples:
      perfsleuth run train.py --lr 0.1
      perfsleuth run --active 10 -o prof/ -m mypkg.train --config base.yaml
    The report and the trace go to ./perfsleuth-out/<script>-<time>/ (or -o DIR). The script
    stops once wait + warmup + active + after steps, then 2 with Python stacks for source lines,
    are done, and says so; --full lets it finish. Every step is timed with and
    without the profiler; `perfsleuth diff` compares the unprofiled ones (--measure N,
    20 on CI: enough for a regression gate to trip). Steps come from optimizer.step(),
    DataLoader batches or the repeated outermost model call; a script with none is
    analysed whole, as one window. Needs PyTorch.
    With --verify, the fixes it can apply without editing the script are then measured: the
    script runs again, baseline and variant alternating, without the profiler (its side effects
    repeat); each finding gets "measured 1.41x (1.35-1.52x, 3 pairs)".
    Where steps come from, exit codes, what profiling costs: `perfsleuth docs run`.
    """
    from ..trace.companion import companion_name, memory_name
    from ..record import runner
    from ..record import outputs as run_outputs, paths as run_paths
    from .progress import PhaseLine
    from ..record.target import require_torch, resolve_target

    from ..engine.settings import peak_settings

    wait, after = unprofiled_steps(measure, wait, after)
    peaks = peak_settings(peak_tflops, peak_arch)  # a bad peak file: one line, before the script runs
    config = RunConfig(wait=wait, warmup=warmup, active=active, after=after,
                       stack_steps=0 if no_stack else RunConfig.stack_steps, stack_shapes=not no_shapes,
                       memory_steps=0 if no_memory else RunConfig.memory_steps,
                       stop_after_window=not full, fallback_window=not no_fallback,
                       record_shapes=record_shapes, **peaks)
    checks = verify_config(verify, verify_pairs, verify_steps, verify_budget, verify_compile)
    job = resolve_target(target, script_args, module)
    folder = Path(out_dir) if out_dir else run_paths.default_out_dir(job.stem)
    if job.path is not None:
        protect_inputs(job.path)  # --json train.py --force never replaces the script
    run_paths.check_outputs(folder, (json_path, html_path, markdown_path), force)  # before the script runs
    before = run_outputs.snapshot(run_outputs.targets(folder, json_path, html_path, markdown_path))
    phases = PhaseLine()  # on stderr, when stdout and stderr are a terminal
    # at once, before importing torch (seconds); then the session's phases (issue 37)
    phases("starting", f"{job.program}; importing PyTorch")
    require_torch()
    finishing = late_signals(folder)
    outcome = runner.run_script(job, config, folder, on_phase=phases if phases.enabled else None, finishing=finishing)
    interrupted = None
    with finishing.holding():
        if outcome.user_traceback:
            click.echo(outcome.user_traceback, err=True, nl=False)  # the script's own, as Python prints it
        if outcome.report is not None and outcome.export_error:  # the trace is in a temporary folder: reports too
            folder, json_path, html_path, markdown_path = outcome.trace_path.parent, None, None, None
            before = run_outputs.snapshot(run_outputs.targets(folder, None, None, None))
    if outcome.report is not None and verify and finishing.pending is None:
        interrupted = _verify(outcome, job, folder, checks)  # its own way with signals: what was measured is kept
    with finishing.holding():
        if outcome.report is not None:
            data = emit(outcome.report, out_dir=None)
            written, note = run_outputs.write_reports(data, before, folder, json_path=json_path, html_path=html_path,
                                                      markdown_path=markdown_path, force=force)
            stacks = outcome.trace_path.with_name(companion_name(outcome.trace_path.name))
            for p in [*written, outcome.trace_path]:
                say(f"wrote {p}")
            if stacks.is_file():
                say(f"wrote {stacks} (Python stacks, for source lines)")
            memory = outcome.trace_path.with_name(memory_name(outcome.trace_path.name))
            if memory.is_file():
                say(f"wrote {memory} (memory: allocations over {config.memory_steps} steps)")
            if note:
                say(f"perfsleuth: {note}", err=True)
        if outcome.message:
            say(f"perfsleuth: {outcome.message}", err=True)
        if finishing.pending is not None:
            kept = "the report was finished first" if outcome.report is not None else "no report"
            say(f"perfsleuth: interrupted ({signal.Signals(finishing.pending).name}) after the script: {kept}",
                err=True)
    sys.exit(finishing.exit_code or interrupted or outcome.exit_code)


def late_signals(folder: Path):
    """What a signal does once the script is over (signals.Finishing): the first is said with where the trace is
    and how to analyse it, and the report is finished; a second stops the analysis, saying the same."""
    import shlex

    from ..record.signals import Finishing

    def kept() -> str:
        trace = finishing.trace
        if trace is None:
            return f"the output folder is {folder}"
        return f"the trace is kept: {trace}; to analyse it: perfsleuth analyze {shlex.quote(str(trace))}"

    def first(name: str) -> None:
        say(f"perfsleuth: {name}: finishing the report first ({kept()}); {name} again stops now", err=True)

    def second(name: str) -> None:
        say(f"perfsleuth: {name} again: the report is not finished; {kept()}", err=True)

    finishing = Finishing(first, second)
    return finishing


def _verify(outcome, job, folder: Path, config: VerifyConfig):
    """Measure the report's fixes (verify/experiment.py); the exit code of an interruption, else None."""
    from ..verify.experiment import under_torchrun, verify_report

    def progress(line: str) -> None:
        say(f"perfsleuth: {line}", err=True)

    if under_torchrun():
        progress("verify: not run: --verify runs the script alone, not under torchrun")
    elif outcome.exit_code not in (0, None) or outcome.whole_run:
        why = "the script had no step boundary" if outcome.whole_run else "the profiled run did not end cleanly"
        progress(f"verify: not run: {why}")
    else:
        if config.pairs < VerifyConfig.pairs:
            pairs = "1 pair" if config.pairs == 1 else f"{config.pairs} pairs"
            progress(f"verify: {pairs} per fix, as asked: fewer than {VerifyConfig.pairs}, the "
                     "spread says little")
        return verify_report(outcome.report, job, folder, config, progress)
    return None
