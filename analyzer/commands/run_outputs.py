"""What `perfsleuth run` writes, and how it fails without blaming the script (docs/robustness.md).

- `export_trace`: the trace, from inside torch's step callback; a failure there (a full disk, the
  folder gone) used to propagate into the script and read as "the script raised NotADirectoryError";
  now the trace goes to a temporary folder instead, and the error is perfsleuth's own.
- `snapshot` / `write_reports`: the report files after the run. The script may have written files of
  the same names into the output folder meanwhile (summary.md, report.json): those are never
  replaced, even with --force (which covers only files that were there before the run, unchanged);
  the report set then goes to a new folder beside them, and the caller says where.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Optional

from ..errors import UsageError
from ..report.outputs import check_outputs, write_outputs


def export_trace(prof, path: Path) -> tuple[Optional[Path], Optional[str]]:
    """(where the gzipped trace was written, or None; the problem with `path`, or None). Never raises."""
    try:
        write_trace(prof, path)
        return path, None
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
    fallback = Path(tempfile.mkdtemp(prefix="perfsleuth-")) / path.name
    try:
        write_trace(prof, fallback)
    except Exception:
        return None, f"could not write the trace to {path} ({why}); it is lost"
    return fallback, f"could not write the trace to {path} ({why}); it was saved to {fallback} instead"


def write_trace(prof, path: Path) -> None:
    """Export a torch profiler's trace gzipped to `path`, atomically (a reader never sees half a trace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.json")
    part = path.with_name(f".{path.name}.part")
    try:
        prof.export_chrome_trace(str(tmp))
        with open(tmp, "rb") as src, gzip.open(part, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(part, path)  # a reader never sees half a trace
    finally:
        tmp.unlink(missing_ok=True)
        part.unlink(missing_ok=True)


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
