"""What a command prints and writes: every terminal line through `say` (names from traces escaped, an
encoding that cannot show a character tolerated), log lines escaped alike, the report options shared by
`analyze` and `run`, and the report files (written before the terminal text; inputs never written over)."""

from __future__ import annotations

import logging
import os
import sys

import click


def say(text: str, err: bool = False) -> None:
    """Print to the terminal: control characters escaped and bidi controls shown (newlines kept).
    Every line perfsleuth prints goes through here: file names and trace names are data."""
    from ..report.escape import terminal

    click.echo(terminal(text, keep_newlines=True), err=err)


def tolerate_output_encoding() -> None:
    """An output encoding that cannot show every character (PYTHONIOENCODING=cp1252, an ISO-8859 locale,
    Windows' redirected output) prints "?" for those characters instead of ending with UnicodeEncodeError:
    perfsleuth's text has "×", "µ", "▲" and names from traces have anything."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and (getattr(stream, "encoding", "") or "").lower().replace("-", "") != "utf8":
            try:
                reconfigure(errors="replace")
            except (ValueError, OSError):  # a closed or detached stream: nothing to print to anyway
                pass


class _Escaping(logging.Formatter):
    """Log lines are terminal output too (they carry file names and rule text)."""

    def format(self, record: logging.LogRecord) -> str:
        from ..report.escape import terminal

        return terminal(super().format(record), keep_newlines=True)


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


def emit(result, *, out_dir=None, json_path=None, html_path=None, markdown_path=None, force=False,
         details=False) -> dict:
    """Print the terminal summary (for a directory: the index, and every report with `details`; then
    the cross-rank report when the traces are the ranks of one job) and write the requested report
    files; the report dict (made once: `to_dict` of a large report is not cheap)."""
    from ..render.ranks_text import render_ranks_terminal
    from ..render.terminal import render_terminal, render_terminal_set, shown_path

    data = result if isinstance(result, dict) else result.to_dict()
    # the files first: nothing the terminal does (an encoding that cannot show a name) costs the report
    written = write_files(data, out_dir=out_dir, json_path=json_path, html_path=html_path,
                          markdown_path=markdown_path, force=force)
    say(render_terminal_set(data, details=details) if "reports" in data else render_terminal(data))
    cross = render_ranks_terminal(data)
    if cross:
        say("\n" + cross)
    for s in data.get("skipped", []):
        say(f"warning: skipped {shown_path(s['path'])}: {s['problem']}", err=True)
    for p in written:
        say(f"wrote {p}")
    return data


def write_files(data: dict, *, out_dir, json_path, html_path, markdown_path, force) -> list:
    from ..render.outputs import write_outputs

    if not any((out_dir, json_path, html_path, markdown_path)):
        return []
    return write_outputs(data, out_dir=out_dir, html=html_path, markdown=markdown_path, json_path=json_path,
                         force=force)


def protect_inputs(*paths) -> None:
    """The inputs (a trace and its stacks and memory companions, a folder's traces, diff's reports,
    run's script) can never be written over, --force or not (render/safe_write.protect)."""
    from ..render.safe_write import protect
    from ..trace.companion import companion_name, memory_name
    from ..trace.sources import SUFFIXES

    found = []
    for p in map(str, paths):
        if os.path.isdir(p):
            found += [os.path.join(d, n) for d, _, names in os.walk(p) for n in names if n.endswith(SUFFIXES)]
        else:
            folder, name = os.path.dirname(p), os.path.basename(p)
            found += [p, os.path.join(folder, companion_name(name)),
                      os.path.join(folder, memory_name(name))]
    protect(found)


def check_targets(*, out_dir, json_path, html_path, markdown_path, force) -> None:
    """Refuse to overwrite before minutes of analysis, not after."""
    from ..render.outputs import check_outputs

    check_outputs(out_dir=out_dir, html=html_path, markdown=markdown_path, json_path=json_path, force=force)
