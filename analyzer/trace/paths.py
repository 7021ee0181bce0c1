"""Which trace files a path names: one file, or the trace files of a directory or URL prefix (one
per rank or worker), with the folders that could not be listed. api.analyze_path analyses them."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

from ..errors import TraceError
from . import sources


@dataclass
class Named:
    """`file`: the one trace file a path names (a str for a URL), else None and `files` (with
    `root`, the directory or prefix, and `unlisted`: (folder, problem) of folders not listed)."""

    file: Union[str, Path, None] = None
    remote: bool = False  # `file` is a URL: read by one process
    files: list = field(default_factory=list)
    unlisted: list = field(default_factory=list)
    root: Union[str, Path] = ""


def _is_dir(p: Path) -> bool:
    try:
        return stat.S_ISDIR(os.stat(p).st_mode)
    except OSError:
        return False  # reading it as a file says what is wrong


def named_files(path: Union[str, os.PathLike]) -> Named:
    """What `path` names (a local path or an fsspec URL: sources.py); a directory without traces
    is a TraceError."""
    path = sources.local_path(os.fspath(path))
    unlisted: list = []
    if sources.is_url(path):
        files = sources.find_url_traces(path)
        if files is None:
            return Named(file=path, remote=True)
    else:
        path = Path(path)
        if not _is_dir(path):
            return Named(file=path)
        from .model import scan_trace_files

        files, unlisted = scan_trace_files(path)
    if not files and not unlisted:
        raise TraceError(path, "directory holds no trace files (*.json, *.json.gz)")
    return Named(files=files, unlisted=unlisted, root=path)
