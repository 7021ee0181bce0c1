"""Thin click commands over the library. Errors a user can cause: one line on stderr, exit code 2."""

from __future__ import annotations

import functools
import json
import logging
import sys
from pathlib import Path

import click

from .errors import TraceError, UsageError
from .version import __version__

EXIT_USAGE = 2


def _fail(message: str) -> None:
    click.echo(f"perfsleuth: error: {message}", err=True)
    sys.exit(EXIT_USAGE)


def user_errors(fn):
    """Turn the errors a user can cause into one clear line and exit code 2 (never a traceback)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (TraceError, UsageError) as exc:
            _fail(str(exc))
        except MemoryError:
            _fail("out of memory while analysing the trace")

    return wrapper


def output_options(fn):
    """The report outputs shared by `analyze` and `run`."""
    fn = click.option("--force", is_flag=True, help="Overwrite existing report files.")(fn)
    fn = click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False),
                      help="Write the Markdown summary (for pull requests) to this file.")(fn)
    fn = click.option("--html", "html_path", type=click.Path(dir_okay=False),
                      help="Write the self-contained HTML report to this file.")(fn)
    fn = click.option("--json", "json_path", type=click.Path(dir_okay=False),
                      help="Write the JSON report (schema perfsleuth/report@1) to this file.")(fn)
    fn = click.option("-o", "--out-dir", type=click.Path(file_okay=False),
                      help="Write report.html, summary.md and report.json into this folder.")(fn)
    return fn


def emit(result, *, out_dir=None, json_path=None, html_path=None, markdown_path=None, force=False) -> None:
    """Print the terminal summary and write the requested report files."""
    from .terminal import render_terminal

    data = result.to_dict()
    reports = data["reports"] if "reports" in data else [data]
    for i, rep in enumerate(reports):
        if i:
            click.echo("")
        click.echo(render_terminal(rep))
    for s in data.get("skipped", []):
        click.echo(f"warning: skipped {s['path']}: {s['problem']}", err=True)
    written = write_files(data, out_dir=out_dir, json_path=json_path, html_path=html_path,
                          markdown_path=markdown_path, force=force)
    for p in written:
        click.echo(f"wrote {p}")


def write_files(data: dict, *, out_dir, json_path, html_path, markdown_path, force) -> list:
    if not any((out_dir, json_path, html_path, markdown_path)):
        return []
    try:
        from .outputs import write_outputs
    except ImportError:  # renderers not built yet: JSON only
        write_outputs = None
    if write_outputs is None:
        if html_path or markdown_path or out_dir:
            raise UsageError("HTML/Markdown reports are not available in this build")
        path = Path(json_path)
        if path.exists() and not force:
            raise UsageError(f"{path} exists; use --force to overwrite")
        path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        return [path]
    return write_outputs(data, out_dir=out_dir, html=html_path, markdown=markdown_path, json_path=json_path,
                         force=force)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="perfsleuth")
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv for debug).")
def main(verbose: int) -> None:
    """perfsleuth: find out why a PyTorch training run is slow, and what to change.

    \b
    Examples:
      perfsleuth analyze trace.pt.trace.json.gz
      perfsleuth analyze ./tb_logs/ --json report.json
    """
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@output_options
@user_errors
def analyze(path: Path, out_dir, json_path, html_path, markdown_path, force) -> None:
    """Analyze a recorded trace (.json / .json.gz) or a directory of traces.

    \b
    Every microsecond of every step is attributed to one cause (dataloader, kernel,
    sync, transfer, host, communication, other) and the run gets a verdict.
    A directory (tensorboard_trace_handler output) gives one report per trace file.
    """
    from .api import analyze_path

    result = analyze_path(path)
    emit(result, out_dir=out_dir, json_path=json_path, html_path=html_path, markdown_path=markdown_path,
         force=force)


# Further commands register here (rules, run, diff).


if __name__ == "__main__":  # pragma: no cover
    main()
