"""Write a report@1 dict to disk: report.html, summary.md, report.json; atomically, never clobbering.

Every output is rendered before the first byte is written, every target is checked before any file
is replaced, and each file goes to a temporary file in its own folder first and is then moved into
place with `os.replace` (atomic on POSIX and Windows), so a reader sees the old file or the new one,
never half of one.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from ..errors import UsageError

FILE_MODE = 0o644  # what a report file gets, whatever the temporary file was created with


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
    """
    targets = check_outputs(out_dir=out_dir, html=html, markdown=markdown, json_path=json_path, force=force)
    contents = [(path, _RENDERERS[kind](report)) for kind, path in targets]
    written = []
    for path, text in contents:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
        written.append(path)
    return written


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
    seen: dict[Path, str] = {}
    for kind, path in targets:
        key = path.resolve()
        if key in seen:
            raise UsageError(f"{path}: asked for twice (as {seen[key]} and {kind} output)")
        seen[key] = kind
        if path.is_dir():
            raise UsageError(f"{path}: is a directory; give a file name for the {kind} output")
    if out_dir is not None:
        d = Path(out_dir)
        if d.exists() and not d.is_dir():
            raise UsageError(f"{d}: exists and is not a directory")
        if d.is_dir() and any(d.iterdir()) and not force:
            raise UsageError(f"{d}: exists and is not empty; use --force to overwrite")
    for _, path in targets:
        if path.exists() and not force:
            raise UsageError(f"{path}: exists; use --force to overwrite")


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` through a temporary file in the same folder and `os.replace`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def to_json(report: dict) -> str:
    """report@1 as JSON text: indent 2, NaN and infinities as null, never as `NaN`."""
    return json.dumps(json_safe(report), indent=2, allow_nan=False, ensure_ascii=False) + "\n"


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


def _render_html(report: dict) -> str:
    from .html import render_html

    return render_html(report)


def _render_markdown(report: dict) -> str:
    from .markdown import render_markdown

    return render_markdown(report)


_RENDERERS: dict[str, Callable[[dict], str]] = {"html": _render_html, "markdown": _render_markdown, "json": to_json}
