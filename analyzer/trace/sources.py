"""Where trace files come from: local paths (read by kineto.read_file with mmap/pread, the fast path)
or fsspec URLs (`s3://`, `gs://`, `hdfs://`, `memory://`, `zip://member::path`, ...).

A URL is read within the limits a local file has (docs/robustness.md): a `local://` / `file://` file goes
through the local reader itself (regular files only: a FIFO or /dev/zero is refused, never read); a local
file inside a chained URL (`zip://t.json::file:///x.zip`) must be a regular file too; elsewhere only an
entry fsspec calls a file is read, at most a share of the machine's memory, a zip member at most
`Limits.inflate_ratio` times its compressed size (once past `inflate_ratio_from`), gzip, bz2 and xz
inflated later by the same bounded code as local files. Reaching the file (connect, list, open) has
`Limits.remote_connect_s` and each further piece `remote_stall_s`: a server that accepts and never
answers is one line, not a hang. fsspec is imported only for URLs; the remote filesystems are optional
extras (`perfsleuth[s3]`, `[gcs]`, `[hdfs]`: docs/ranks.md).
"""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path
from typing import Callable, Optional

from ..config import LIMITS
from ..errors import TraceError
from . import files

SUFFIXES = (".json", ".json.gz", ".json.bz2", ".json.xz")
_EXTRA = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "hdfs": "hdfs", "webhdfs": "hdfs"}
_LOCAL = ("file", "local")


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


def _within(url: str, seconds: float, what: str, fn: Callable):
    """`fn()` in a helper thread, waited for `seconds`: a server that never answers costs that long, then one
    line (the thread is left to the end of the process: a blocked call cannot be taken back)."""
    box: queue.Queue = queue.Queue(1)

    def run() -> None:
        try:
            box.put((True, fn()))
        except BaseException as exc:  # noqa: BLE001  handed to the caller
            box.put((False, exc))

    threading.Thread(target=run, name="perfsleuth-remote", daemon=True).start()
    try:
        ok, value = box.get(timeout=seconds)
    except queue.Empty:
        raise TraceError(url, f"no answer within {seconds:g} s while {what} (an unreachable or silent "
                              "server?)") from None
    if not ok:
        raise value
    return value


def _local_parts(url: str) -> None:
    """Each local file a chained URL reads (`zip://t.json::file:///x.zip`) must be a regular file: a FIFO or a
    device would be opened and read by fsspec without any of the local checks."""
    for part in url.split("::")[1:]:
        proto, sep, rest = part.partition("://")
        if not sep or proto in _LOCAL:
            target = rest if sep else part
            files.open_regular(Path(target)).close()


def _connect(url: str) -> tuple:
    """(filesystem, path): the local files of a chained URL checked first, the connection within its deadline."""
    _local_parts(url)
    return _within(url, LIMITS.remote_connect_s, "connecting", lambda: _filesystem(url))


def read_url(url: str):
    """The file as stored (gzip, bz2, xz left compressed): a local one as kineto.read_file gives it, a remote one
    as bytes, within the limits in the module docstring."""
    fs, path = _connect(url)
    if set(_LOCAL) & set(fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)) and "::" not in url:
        from .kineto import read_file

        return read_file(Path(path))
    try:
        info = _within(url, LIMITS.remote_connect_s, "asking for the file", lambda: fs.info(path))
        kind = info.get("type")
        if kind == "directory":
            raise TraceError(url, "is a directory (use analyze_path for directories)")
        if kind != "file":
            what = "an entry of no known type" if kind is None else f"a {kind} entry"
            raise TraceError(url, f"is {what}, not a regular file")
        raw = _read(url, fs, path, info)
    except FileNotFoundError:
        raise TraceError(url, "no such file or directory") from None
    except TraceError:
        raise
    except (OSError, ValueError, RuntimeError) as exc:
        raise TraceError(url, f"cannot read file ({exc})") from None
    if not raw:
        raise TraceError(url, "empty file")
    return raw


def _read(url: str, fs, path: str, info: dict) -> bytes:
    """The file's bytes, piece by piece, each within `remote_stall_s`, bounded as the module docstring says."""
    ceiling, size, packed = files.max_document_bytes(), info.get("size"), info.get("compress_size")
    if isinstance(size, int):
        files.check_size(url, size, ceiling)
    if isinstance(packed, int) and isinstance(size, int):
        files.check_inflated(url, size, packed, ceiling)  # a zip member: its stored and inflated sizes
    fh = _within(url, LIMITS.remote_connect_s, "opening the file", lambda: fs.open(path, "rb"))
    out = bytearray()
    try:
        while True:
            piece = _within(url, LIMITS.remote_stall_s, f"reading (after {len(out):,} bytes)",
                            lambda: fh.read(LIMITS.remote_piece))
            if not piece:
                return bytes(out)
            out += piece
            if isinstance(packed, int):
                files.check_inflated(url, len(out), packed, ceiling)
            files.check_size(url, len(out), ceiling)
    finally:
        try:
            fh.close()
        except Exception:  # noqa: BLE001  a broken connection: nothing to keep
            pass


def find_url_traces(url: str) -> Optional[list]:
    """The trace files under a directory URL, as URLs in sorted order; None when `url` is no directory."""
    fs, path = _connect(url)

    def listing():
        if not fs.isdir(path):
            if not fs.exists(path):
                raise TraceError(url, "no such file or directory")
            return None
        return fs.find(path)

    try:
        found = _within(url, LIMITS.remote_connect_s, "listing the directory", listing)
    except OSError as exc:
        raise TraceError(url, f"cannot list the directory ({exc})") from None
    if found is None:
        return None
    return [fs.unstrip_protocol(p) for p in sorted(found) if p.endswith(SUFFIXES)]


def display_name(path) -> str:
    return os.path.basename(str(path).rstrip("/")) or str(path)
