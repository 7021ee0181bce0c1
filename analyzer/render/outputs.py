"""Write a report@1 dict to disk: report.html, summary.md, report.json; as a set, never clobbering.

Every output is rendered before the first byte is written and every target is checked first; the
files are then put in place together by `safe_write.write_set` (a staging folder beside them, placed
with signals held back, rolled back on failure; never over a device node or a file another process
wrote meanwhile).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable

import msgspec

from ..errors import UsageError
from . import safe_write
from ..report.escape import json_text


def write_outputs(
    report: dict,
    *,
    out_dir: str | os.PathLike | None = None,
    html: str | os.PathLike | None = None,
    markdown: str | os.PathLike | None = None,
    json_path: str | os.PathLike | None = None,
    force: bool = False,
) -> list[Path]:
    """Write the requested outputs; return their paths in the order written.

    `out_dir` writes report.html, summary.md and report.json into that folder (created if needed).
    An existing file, or an existing non-empty `out_dir`, is a UsageError unless `force` is true.
    A failure to write (a full disk, a read-only folder) is a UsageError too, and leaves every old
    file as it was.
    """
    targets = check_outputs(out_dir=out_dir, html=html, markdown=markdown, json_path=json_path, force=force)
    contents = [(path, _render_html(report, str(path.parent)) if kind == "html"
                 else _RENDERERS[kind](report)) for kind, path in targets]
    return safe_write.write_set(contents, force, kinds=[kind for kind, _ in targets])


def check_outputs(*, out_dir=None, html=None, markdown=None, json_path=None, force=False) -> list[tuple[str, Path]]:
    """Raise the UsageError `write_outputs` would raise, before any work (a CLI can call this
    before a long analysis); return the (kind, path) pairs that would be written."""
    targets = _targets(out_dir, html, markdown, json_path)
    _check(targets, out_dir, force)
    return targets


def _targets(out_dir, html, markdown, json_path) -> list[tuple[str, Path]]:
    targets: list[tuple[str, Path]] = []
    if out_dir is not None:
        d = Path(out_dir)
        targets += [("html", d / "report.html"), ("markdown", d / "summary.md"), ("json", d / "report.json")]
    for kind, p in (("html", html), ("markdown", markdown), ("json", json_path)):
        if p is not None:
            targets.append((kind, Path(p)))
    return targets


def _check(targets: list[tuple[str, Path]], out_dir, force: bool) -> None:
    if out_dir is not None:
        d = Path(out_dir)
        try:
            is_dir = os.path.isdir(d)
            if os.path.lexists(d) and not is_dir:
                raise UsageError(f"{d}: exists and is not a directory")
            if is_dir and any(os.scandir(d)) and not force:
                raise UsageError(f"{d}: exists and is not empty; use --force to overwrite")
        except OSError as exc:
            raise UsageError(f"{d}: cannot use as the output folder ({exc.strerror or exc})") from None
    safe_write.check_targets(targets, force)


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` as a set of one (safe_write.write_set), replacing a regular file."""
    safe_write.write_set([(Path(path), text)], force=True)


def _plain(value: Any) -> Any:
    """What msgspec cannot encode itself: numpy values (their Python form), paths, anything else as text."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


_ENCODER = msgspec.json.Encoder(enc_hook=_plain)


def to_json(report: dict) -> str:
    """report@1 as JSON text: indent 2, NaN and infinities as null, never as `NaN`; bidi controls
    \\u-escaped. msgspec encodes in C without copying the dict first: the stdlib's indenting encoder
    (pure Python) took 1.3 GB for a report of 300,000 steps (docs/robustness.md)."""
    return json_text(msgspec.json.format(_ENCODER.encode(report), indent=2).decode("utf-8")) + "\n"


def json_safe(value: Any) -> Any:
    """A copy of `value` that the stdlib json writes strictly: non-finite floats become None,
    tuples lists, numpy scalars and arrays plain Python, paths and other objects strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "tolist"):  # numpy scalars and arrays, without importing numpy
        return json_safe(value.tolist())
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def _render_html(report: dict, base: str | None = None) -> str:
    """A report's page, or a report set's (an index, then a section per trace, within a size
    budget). `base`: the page's folder, which the trace paths it shows are relative to."""
    if "reports" in report:
        from .set_page import render_set_html

        return render_set_html(report, base)
    from .html import render_html

    return render_html(report, base)


def _render_markdown(report: dict) -> str:
    from .markdown import render_markdown

    return render_markdown(report)


_RENDERERS: dict[str, Callable[[dict], str]] = {"html": _render_html, "markdown": _render_markdown, "json": to_json}
