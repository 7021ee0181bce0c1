"""Where trace files come from: local paths (read by kineto.read_file with mmap/pread, the fast path)
or fsspec URLs (`s3://`, `gs://`, `hdfs://`, `memory://`, ...), read whole into memory.

A remote file is read once into bytes and decoded like a local one (gzip detected by content), so a
worker's memory is bounded by one trace. fsspec is imported only for URLs; the remote filesystems
are optional extras (`perfsleuth[s3]`, `[gcs]`, `[hdfs]`: docs/ranks.md).
"""

from __future__ import annotations

import os
from typing import Optional

from ..errors import TraceError

SUFFIXES = (".json", ".json.gz")
_EXTRA = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "hdfs": "hdfs", "webhdfs": "hdfs"}


def is_url(path) -> bool:
    """A `protocol://...` string other than a local `file://` one."""
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def absolute(path) -> str:
    """A local path made absolute (a report read later, from another folder, names the right file);
    a URL as it is."""
    path = os.fspath(path)
    return path if is_url(path) else os.path.abspath(path)


def local_path(path) -> str:
    """`file:///x/y` -> `/x/y`; anything else unchanged."""
    return path[len("file://"):] if isinstance(path, str) and path.startswith("file://") else path


def _filesystem(url: str):
    try:
        from fsspec.core import url_to_fs

        return url_to_fs(url)
    except ImportError as exc:
        proto = url.split("://", 1)[0]
        hint = f" (pip install 'perfsleuth[{_EXTRA[proto]}]')" if proto in _EXTRA else ""
        raise TraceError(url, f"cannot read {proto}:// paths: {exc}{hint}") from None
    except ValueError as exc:  # fsspec: "Protocol not known"
        raise TraceError(url, f"cannot read this URL: {exc}") from None


def read_url(url: str) -> bytes:
    """The file's bytes, as stored (gzip left compressed)."""
    fs, path = _filesystem(url)
    try:
        if fs.isdir(path):
            raise TraceError(url, "is a directory (use analyze_path for directories)")
        with fs.open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise TraceError(url, "no such file or directory") from None
    except TraceError:
        raise
    except OSError as exc:
        raise TraceError(url, f"cannot read file ({exc})") from None
    if not raw:
        raise TraceError(url, "empty file")
    return raw


def find_url_traces(url: str) -> Optional[list]:
    """The trace files under a directory URL, as URLs in sorted order; None when `url` is no directory."""
    fs, path = _filesystem(url)
    try:
        if not fs.isdir(path):
            if not fs.exists(path):
                raise TraceError(url, "no such file or directory")
            return None
        found = fs.find(path)
    except OSError as exc:
        raise TraceError(url, f"cannot list the directory ({exc})") from None
    return [fs.unstrip_protocol(p) for p in sorted(found) if p.endswith(SUFFIXES)]


def display_name(path) -> str:
    return os.path.basename(str(path).rstrip("/")) or str(path)
