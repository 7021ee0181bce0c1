"""Thin click commands over the library. Errors a user can cause: one line on stderr, exit code 2."""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import time
from pathlib import Path

import click

from ..errors import TraceError, UsageError
from ..version import __version__
from .output import (_Escaping, check_targets, emit, output_options, protect_inputs, say,  # noqa: F401
                     tolerate_output_encoding, write_files)

EXIT_USAGE = 2


def _fail(message: str) -> None:
    """The one line of a user error: a message that spans lines (an exception's text) stays one line."""
    from ..report.escape import terminal

    click.echo(f"perfsleuth: error: {terminal(message)}", err=True)
    sys.exit(EXIT_USAGE)


def user_errors(fn):
    """Turn the errors a user can cause into one clear line and exit code 2 (never a traceback);
    Ctrl-C, SIGTERM and SIGHUP into one line and 128 + the signal number (record/signals.py)."""
    from ..record.signals import as_interrupts, exit_code, signal_name

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            with as_interrupts():
                return fn(*args, **kwargs)
        except (TraceError, UsageError) as exc:
            _fail(str(exc))
        except MemoryError:
            _fail("out of memory")
        except RecursionError:
            _fail("input nested too deeply")
        except KeyboardInterrupt as exc:
            say(f"perfsleuth: interrupted ({signal_name(exc)})", err=True)
            sys.exit(exit_code(exc))

    return wrapper


class ProgressBar:
    """A progress bar on stderr, only when stderr is a terminal and the load has already taken
    `delay` seconds (short loads never flash one). The loader counts events or, for documents cut
    into byte ranges, bytes: only the ratio is shown."""

    def __init__(self, label: str, delay: float = 1.0, clock=time.monotonic):
        from ..report.escape import terminal

        self.label, self.delay, self.clock, self.bar = terminal(label), delay, clock, None
        self.start = clock()

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if done >= total or self.clock() - self.start < self.delay or not sys.stderr.isatty():
                return
            self.bar = click.progressbar(length=total, label=self.label, file=sys.stderr)
            self.bar.__enter__()
        self.bar.update(done - self.bar.pos)
        if done >= total:
            self.bar.__exit__(None, None, None)


class LazyGroup(click.Group):
    """A click group whose commands in `lazy` (name -> "module:command", relative to this package) are
    imported when they are used: `perfsleuth --version`, `rules` or `docs` never load `run` and what
    it imports (click's documented pattern for lazily loaded subcommands)."""

    def __init__(self, *args, lazy: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx) -> list:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx, name: str):
        if name in self.lazy:
            module, attr = self.lazy[name].split(":")
            return getattr(importlib.import_module(module, __package__), attr)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, lazy={"run": ".run:run_command"},
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="perfsleuth")
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv for debug).")
def main(verbose: int) -> None:
    """perfsleuth: find out why a PyTorch training run is slow, and what to change.

    \b
    Examples:
      perfsleuth analyze trace.pt.trace.json.gz
      perfsleuth analyze ./tb_logs/ --json report.json
      perfsleuth run train.py --lr 0.1      (needs PyTorch; analyze does not)
    `perfsleuth docs` lists the guides that come with perfsleuth; `perfsleuth rules SLUG`
    prints a rule's docs.
    """
    tolerate_output_encoding()
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler()
    handler.setFormatter(_Escaping("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])


@main.command(short_help="Analyze a recorded trace, or a directory of traces.")
@click.argument("path", type=click.Path())
@output_options
@click.option("--fail-on", "fail_on", multiple=True, metavar="NAMES",
              help="Exit 1 if the verdict or a finding is one of NAMES (comma-separated verdicts such as "
                   "sync-bound, or rule slugs such as item-sync; `perfsleuth rules` lists the slugs). "
                   "See `perfsleuth docs ci`.")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(path_type=Path), metavar="PATH",
              help="Extra rule file or folder of *.toml rules (repeatable). See `perfsleuth docs rules`.")
@click.option("--set", "sets", multiple=True, metavar="RULE.THRESHOLD=VALUE",
              help="Override a rule threshold, e.g. --set num-workers.min_share=0.05 (repeatable; "
                   "[tool.perfsleuth] in ./pyproject.toml is read too).")
@click.option("-j", "--jobs", type=click.IntRange(1), default=None,
              help="Worker processes for large traces and directories of traces [default: the CPU count].")
@click.option("--scheduler", metavar="ADDRESS",
              help="Read the traces of a directory on Dask: tcp://HOST:PORT (a running scheduler) or 'local' "
                   "(a LocalCluster of --jobs workers). Needs perfsleuth[dask]; see `perfsleuth docs ranks`.")
@click.option("--hta/--no-hta", default=False, show_default=True,
              help="Add HolisticTraceAnalysis's kernel breakdown, idle-time breakdown and launch statistics "
                   "to the JSON (needs `pip install traceinsight psutil`; see `perfsleuth docs hta`).")
@click.option("--details", "details", is_flag=True,
              help="For a directory: every trace's full report after the index (the index alone by default).")
@click.option("--verbose", "old_details", is_flag=True, hidden=True)  # --details' old name (-v is logging)
@click.option("--cpus", type=click.FloatRange(min=1), default=None, metavar="N",
              help="Cores of the machine the trace was recorded on, for the forecasts of DataLoader workers and "
                   "threads (that machine is then assumed otherwise idle) [default: what `perfsleuth run` recorded, "
                   "else unknown and said so; `perfsleuth docs forecast`].")
@click.option("--peak-tflops", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="TFLOPS",
              help="The device's compute peak in TFLOP/s, for the efficiency section's percentages "
                   "[default: the datasheet's dense peak of a known GPU, what `perfsleuth run` "
                   "measured on a CPU; `perfsleuth docs efficiency`].")
@click.option("--peak-arch", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="The device's peaks per precision and its memory bandwidth, as a TraceLens arch "
                   "JSON.")
@user_errors
def analyze(path: str, out_dir, json_path, html_path, markdown_path, force, fail_on=(), jobs=None, hta=False,
            rule_paths=(), sets=(), details=False, scheduler=None, cpus=None, old_details=False,
            peak_tflops=None, peak_arch=None) -> None:
    """Analyze a recorded trace (.json / .json.gz) or a directory of traces.

    \b
    Every microsecond of every step is attributed to one cause (dataloader, kernel,
    sync, transfer, host, communication, other) and the run gets a verdict.
    A directory (tensorboard_trace_handler output) gives one report per trace file:
    the terminal shows an index (one row per file), --details each full report,
    and for the ranks of one job a cross-rank report: stragglers, collectives,
    the job verdict (`perfsleuth docs ranks`). PATH may be a URL (s3://, gs://,
    hdfs://: the perfsleuth[s3|gcs|hdfs] extras).
    `perfsleuth docs attribution` explains the categories, `perfsleuth rules SLUG` a finding.
    """
    from ..api import analyze_path
    from ..config import Config
    from ..engine.settings import peak_settings, rule_settings
    from ..trace.cluster import check_scheduler
    from ..trace.sources import display_name
    from .gates import check_report, known_rule_slugs, parse_fail_on
    from .progress import FolderProgress

    if old_details:
        say("perfsleuth: analyze --verbose is now --details (-v before the command is more logging)", err=True)
        details = True
    check_scheduler(scheduler)
    protect_inputs(path)
    files = any((out_dir, json_path, html_path, markdown_path))  # the terminal shows no report links
    config = Config(hta=hta, cpus=cpus, report_links=files, **rule_settings(rule_paths, sets),
                    **peak_settings(peak_tflops, peak_arch))
    gates = parse_fail_on(fail_on, known_rule_slugs(config) if fail_on else None)
    check_targets(out_dir=out_dir, json_path=json_path, html_path=html_path, markdown_path=markdown_path,
                  force=force)
    if scheduler in (None, "local"):  # processes on this machine
        jobs = _jobs(jobs)
    folder = FolderProgress()  # a line per trace of a folder, and the folder's bar (on a terminal)
    try:
        result = analyze_path(path, config, progress=ProgressBar(f"reading {display_name(path)}"), jobs=jobs,
                              scheduler=scheduler, on_file=folder)
    except MemoryError:
        raise TraceError(path, "out of memory while analysing it (try -j 1, or a machine with more memory)") from None
    finally:
        folder.close()
    data = emit(result, out_dir=out_dir, json_path=json_path, html_path=html_path, markdown_path=markdown_path,
                force=force, details=details)
    exit_on_gate_failures(check_report(data, gates))


def _jobs(jobs):
    """-j capped to the CPUs this process may use, and said (each worker holds its share of a trace)."""
    from ..api import usable_cpus

    cpus = usable_cpus()
    if jobs is not None and jobs > cpus:
        say(f"perfsleuth: -j {jobs} is more than the {cpus} usable CPU(s): using {cpus}", err=True)
        return cpus
    return jobs


# Further commands: rules, docs, diff below; run in cli/run.py (imported when used).


@main.command("rules", short_help="List the rule catalog, or print one rule's docs.")
@click.argument("slug", required=False)
@click.option("--markdown", is_flag=True, help="Print the whole catalog as Markdown (rule docs, facts, tables).")
@click.option("--rules", "rule_paths", multiple=True, type=click.Path(path_type=Path), metavar="PATH",
              help="Include this rule file or folder (repeatable).")
@user_errors
def rules_command(slug, markdown, rule_paths) -> None:
    """List the rule catalog, or print one rule's docs.

    \b
    Examples:
      perfsleuth rules
      perfsleuth rules item-sync
    """
    from ..engine.catalog import load_catalog
    from ..engine.docs import catalog_markdown, find_rule, listing, rule_markdown
    from ..engine.settings import rule_settings

    rules = load_catalog(rule_settings(rule_paths)["rule_paths"])
    say(rule_markdown(find_rule(rules, slug)) if slug else catalog_markdown(rules) if markdown
               else listing(rules))


def exit_on_gate_failures(failures: list) -> None:
    """A tripped CI gate (docs/ci.md): one line on stderr, exit code 1. Outputs are written first."""
    from .gates import EXIT_GATE, failure_line

    if failures:
        say(failure_line(failures), err=True)
        sys.exit(EXIT_GATE)


@main.command("docs", short_help="List the guides, or print one.")
@click.argument("topic", required=False)
@user_errors
def docs_command(topic) -> None:
    """List the guides that come with perfsleuth, or print one (Markdown).

    \b
    Examples:
      perfsleuth docs
      perfsleuth docs run
    """
    from .guides import listing, read_topic

    click.echo(read_topic(topic) if topic else listing())


@main.command("diff", short_help="Compare two runs (traces or report.json files).")
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("head", type=click.Path(path_type=Path))
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Write the diff (schema perfsleuth/diff@1) to this file.")
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False),
              help="Write the diff as GitHub Markdown (a pull-request comment) to this file.")
@click.option("--force", is_flag=True, help="Overwrite existing files.")
@click.option("--fail-on-regression", "regression", multiple=True, metavar="PCT|CATEGORY:+Npp",
              help="Exit 1 if the median step time grew by more than PCT (10% or 0.1) and "
                   "by more than noise; CATEGORY:+Npp (e.g. dataloader:+10pp): if that "
                   "category's share of the step grew by more than N percentage points and its "
                   "time by more than noise. Categories are gated only when asked (repeatable, "
                   "or comma-separated).")
@click.option("--fail-on-memory-regression", "memory_regression", metavar="PCT",
              help="Exit 1 if a device's peak allocated memory grew by more than PCT (10% or 0.1), or a side has no "
                   "memory events.")
@user_errors
def diff_command(base: Path, head: Path, json_path, markdown_path, force, regression=(),
                 memory_regression=None) -> None:
    """Compare two runs: BASE and HEAD are traces or report.json files.

    \b
    Examples:
      perfsleuth diff main.pt.trace.json.gz pr.pt.trace.json.gz --markdown diff.md
      perfsleuth diff base/report.json head/report.json --fail-on-regression 10%
    Step time (median over steps, with a noise call), verdict, category shares, findings,
    and the kernels and ops that got slower or faster. The noise call and the gate:
    `perfsleuth docs ci`.
    """
    from ..config import Config
    from ..engine.settings import rule_settings
    from ..render.diff_view import check_diff_outputs, render_diff_terminal, write_diff_outputs
    from .diff import diff_paths
    from ..render.diff_view import differences_sentence
    from .gates import (check_regression, check_shares, gate_notes, parse_regressions,
                        parse_threshold)

    gates = parse_regressions(regression)
    mem_threshold = None if memory_regression is None else parse_threshold(memory_regression,
                                                                             "--fail-on-memory-regression")
    protect_inputs(base, head)
    check_diff_outputs(json_path, markdown_path, force)
    analysis = Config(**rule_settings())  # traces get the rules and thresholds `analyze` would use
    result = diff_paths(base, head, analysis=analysis)
    say(render_diff_terminal(result))
    for p in write_diff_outputs(result, json_path=json_path, markdown_path=markdown_path, force=force):
        say(f"wrote {p}")
    from ..render.memory_diff import memory_failures

    for note in gate_notes(result, gates):  # a pass within noise says so; ungated ones are named
        say(f"perfsleuth: {note}", err=True)
    failures = (check_regression(result, gates.step) + check_shares(result, gates.shares)
                + memory_failures(result.get("memory"), mem_threshold))
    if failures and result.get("differences"):  # the gate's line says what else differs (issue 37)
        failures.append(differences_sentence(result["differences"]))
    exit_on_gate_failures(failures)


if __name__ == "__main__":  # pragma: no cover
    main()
