"""What `perfsleuth run` writes, and how it fails without blaming the script (docs/robustness.md).

- `export_trace`: the trace, from inside torch's step callback; a failure there (a full disk, the
  folder gone) used to propagate into the script and read as "the script raised NotADirectoryError";
  now the trace goes to a temporary folder instead, and the error is perfsleuth's own.
- `export_raw` / `finish_trace`: the same in two halves, for the main trace of `run` and `profile()`: the
  JSON is exported when the recorded window ends (`trace.pt.trace.json`, a usable trace on its own should
  the run be killed before the end), and gzipped to its place a few unprofiled steps later with one more
  top-level key (`perfsleuth_final`: the step times measured since), added while it is copied.
- `snapshot` / `write_reports`: the report files after the run. The script may have written files of
  the same names into the output folder meanwhile (summary.md, report.json): those are never
  replaced, even with --force (which covers only files that were there before the run, unchanged);
  the report set then goes to a new folder beside them, and the caller says where.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import UsageError
from ..render.outputs import check_outputs, write_outputs


FINAL_KEY = "perfsleuth_final"  # top-level key: what `run` measured after the recorded window (step_clock.py)
KEEPERS: list = []  # the run's record/keep.Keeper: told of each trace put in place or removed


def _tell(what: str, path: Optional[Path] = None) -> None:
    for keeper in KEEPERS:
        getattr(keeper, what)(*([] if path is None else [path]))


def export_trace(prof, path: Path) -> tuple[Optional[Path], Optional[str]]:
    """(where the gzipped trace was written, or None; the problem with `path`, or None). Never raises."""
    return finish_trace(export_raw(prof, path))


@dataclass
class RawTrace:
    """A trace exported as JSON (`raw`), to be gzipped to `path` by `finish_trace`."""

    raw: Optional[Path]  # None: it could not be written anywhere
    path: Path
    prof: Any  # the profiler: exported again should `raw` be gone by then
    error: Optional[str] = None  # why `path` is not where the user asked for the trace


def raw_path(path: Path) -> Path:
    """Where the trace waits as JSON before it is gzipped: `trace.pt.trace.json` beside `trace.pt.trace.json.gz`,
    a name every trace reader (`perfsleuth analyze DIR` included) takes for a trace."""
    return path.with_name(path.name[:-3] if path.name.endswith(".gz") else path.name + ".json")


def _fallback(path: Path) -> Path:
    return Path(tempfile.mkdtemp(prefix="perfsleuth-")) / path.name


def export_raw(prof, path: Path) -> RawTrace:
    """Export the profiler's trace as JSON beside `path` (in a temporary folder when that fails). Never raises."""
    try:
        _export_json(prof, raw_path(path))
        _tell("keep", raw_path(path))
        return RawTrace(raw_path(path), path, prof)
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
    fallback = _fallback(path)
    try:
        _export_json(prof, raw_path(fallback))
    except Exception:
        return RawTrace(None, path, prof, f"could not write the trace to {path} ({why}); it is lost")
    return RawTrace(raw_path(fallback), fallback, prof,
                    f"could not write the trace to {path} ({why}); it was saved to {fallback} instead")


def finish_trace(raw: RawTrace, extra: Optional[dict] = None) -> tuple[Optional[Path], Optional[str]]:
    """Gzip the exported JSON to its place, `extra` added as the top-level `perfsleuth_final`, and remove the
    JSON: (where the trace is, or None; the problem, or None). When the JSON is gone or the place cannot be
    written, the profiler exports it again into a temporary folder. Never raises."""
    if raw.raw is None:
        return None, raw.error
    _tell("restore")  # the JSON, should the script have removed its run folder (record/keep.py)
    try:
        gzip_json(raw.raw, raw.path, extra)
        raw.raw.unlink(missing_ok=True)
        _tell("forget", raw.raw)
        return raw.path, raw.error
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
    fallback = _fallback(raw.path)
    try:
        write_trace(raw.prof, fallback, extra)
    except Exception:
        kept = f"; the JSON exported at the end of the recorded window is {raw.raw}" if raw.raw.is_file() else ""
        return None, f"could not write the trace to {raw.path} ({why}); it is lost{kept}"
    with contextlib.suppress(OSError):
        raw.raw.unlink(missing_ok=True)
    return fallback, f"could not write the trace to {raw.path} ({why}); it was saved to {fallback} instead"


def write_trace(prof, path: Path, extra: Optional[dict] = None) -> None:
    """Export a torch profiler's trace gzipped to `path`, atomically (a reader never sees half a trace)."""
    tmp = path.with_name(f".{path.name}.tmp.json")
    try:
        _export_json(prof, tmp)
        gzip_json(tmp, path, extra)
    finally:
        tmp.unlink(missing_ok=True)


def _export_json(prof, path: Path) -> None:
    """torch's JSON export, put in place whole (a run killed meanwhile leaves no half file under `path`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.part")
    try:
        prof.export_chrome_trace(str(part))
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)


def gzip_json(src: Path, path: Path, extra: Optional[dict] = None) -> None:
    """Gzip the JSON document `src` to `path` atomically; with `extra`, the document's top-level object gets
    one more key, `perfsleuth_final`, written before its closing brace as the bytes are copied."""
    part = path.with_name(f".{path.name}.part")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(src, "rb") as f, gzip.open(part, "wb", compresslevel=6) as dst:
            end = _object_end(f) if extra is not None else None
            if end is None:
                shutil.copyfileobj(f, dst, 1 << 20)
            else:
                left = end
                while left:
                    chunk = f.read(min(left, 1 << 20))
                    if not chunk:
                        raise OSError(f"{src}: shorter than it was a moment ago")
                    dst.write(chunk)
                    left -= len(chunk)
                dst.write(b',\n  "' + FINAL_KEY.encode() + b'": ' + json.dumps(extra).encode() + b"\n}\n")
        os.replace(part, path)  # a reader never sees half a trace
        _tell("keep", path)
    finally:
        part.unlink(missing_ok=True)


def _object_end(f) -> Optional[int]:
    """The offset of the closing brace of the JSON object in `f` (a non-empty one), or None; rewinds `f`."""
    size = f.seek(0, os.SEEK_END)
    start = max(0, size - 4096)
    f.seek(start)
    tail = f.read().rstrip(b" \t\r\n")
    f.seek(0)
    if not tail.endswith(b"}") or tail[:-1].rstrip(b" \t\r\n").endswith(b"{"):
        return None
    return start + len(tail) - 1


def user_traceback(exc: BaseException, formatter: Callable[[BaseException], str]) -> tuple[str, BaseException]:
    """(the script's traceback, the exception it shows). Formatting may be cut by a signal handler that
    raises: torch's SIGCHLD handler does when a DataLoader worker died, and its error is the real
    cause (the script's own error was the broken pipe to that worker). That error is then reported,
    chained to the first, rather than becoming perfsleuth's own traceback."""
    for _ in range(3):
        try:
            return formatter(exc), exc
        except Exception as cut:
            if cut.__context__ is None:
                cut.__context__ = exc
            exc = cut
    return "".join(traceback.format_exception_only(type(exc), exc)), exc


@contextlib.contextmanager
def quiet_child_signals():
    """Once the script has ended (raised, stopped, finished), SIGCHLD goes to its default for the block
    (restored afterwards): torch's DataLoader handler raises 'DataLoader worker exited unexpectedly' at
    whatever bytecode runs when a worker dies, which would otherwise land in perfsleuth's own code
    (reporting the script's error, stopping the profiler) and end the run with its traceback."""
    if not hasattr(signal, "SIGCHLD") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGCHLD, previous if previous is not None else signal.SIG_DFL)


def dead_worker_error(exc: BaseException, wait_s: float = 1.0) -> BaseException:
    """`exc`, or the error torch's SIGCHLD handler raises about a DataLoader worker that died (chained
    to `exc`) when one did: the script's own error is then often only the broken pipe to that worker,
    and the handler, quieted while perfsleuth reports, would have said what happened. A broken
    connection may arrive before the worker's exit is visible: then it is waited for up to `wait_s`."""
    handling = sys.modules.get("torch.utils.data._utils.signal_handling")
    if handling is None:
        return exc
    deadline = time.monotonic() + (wait_s if isinstance(exc, (ConnectionError, EOFError)) else 0.0)
    while True:
        try:
            handling._error_if_any_worker_fails()
        except RuntimeError as died:
            if died is not exc and died.__context__ is None:
                died.__context__ = exc
            return died
        except Exception:
            return exc
        if time.monotonic() >= deadline:
            return exc
        time.sleep(0.01)


def _identity(path: Path) -> Optional[tuple]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def targets(out_dir: Path, json_path, html_path, markdown_path) -> list:
    return [p for _, p in check_outputs(out_dir=out_dir, html=html_path, markdown=markdown_path,
                                        json_path=json_path, force=True)]


def snapshot(paths: list) -> dict:
    """What each target is before the run (None: absent)."""
    return {p: _identity(p) for p in paths}


def written_by_the_script(before: dict) -> list:
    """Targets that appeared or changed while the script ran."""
    return [p for p, ident in before.items() if _identity(p) != ident]


def write_reports(data: dict, before: dict, out_dir: Path, *, json_path, html_path, markdown_path,
                  force: bool) -> tuple[list, Optional[str]]:
    """(paths written, a note for the user or None). Files the script wrote are left alone: the whole
    set then goes to a new folder `perfsleuth-report[-N]` in `out_dir`."""
    clash = written_by_the_script(before)
    if not clash:
        return write_outputs(data, out_dir=out_dir, json_path=json_path, html=html_path, markdown=markdown_path,
                             force=True), None
    folder = _new_folder(out_dir / "perfsleuth-report")
    written = write_outputs(data, out_dir=folder)
    names = ", ".join(str(p) for p in clash)
    return written, f"the script wrote {names} during the run: left as it is; the report went to {folder}/"


def _new_folder(base: Path) -> Path:
    for n in range(1, 1000):
        folder = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise UsageError(f"{base}: no free folder name for the report")
