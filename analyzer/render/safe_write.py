"""Put a set of report files in place: all of them or none, never over a device, never over a file
someone else wrote meanwhile, private files kept private (docs/robustness.md).

- `check_targets` before any work: every target is a regular file (or absent) in a folder that can be
  written; a device node, FIFO or socket is refused whatever `force` says (`--json /dev/null --force`
  used to replace /dev/null itself); a link to a regular file is written through.
- `write_set`: every file is written and synced into a hidden staging folder beside its target
  (`.perfsleuth-*.tmp`), then the set is placed with SIGINT/SIGTERM/SIGHUP held back: a new file by
  an exclusive hard link (a concurrent writer of the same name makes this one fail, never a silent
  overwrite), an old one (only with `force`) by `os.replace` after keeping a link to it. Any failure
  while placing puts back what was there; the staging folder is always removed.
- New files get 0666 less the umask; a replaced file keeps its permission bits (a 0600 report stays 0600).
- The command's inputs (`protect`: a trace, the traces of a folder, the reports `diff` reads, the script `run`
  runs) are never a target, --force or not: the same file under another name, through a symbolic link or a
  hard link, is refused (`analyze t.json.gz --json link.json --force` used to replace the trace).
Errors are one-line UsageErrors naming the file (exit code 2 in the CLI).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, Optional

from ..errors import UsageError
from ..trace.files import kind_of

_INPUTS: dict = {}  # (st_dev, st_ino) -> the input's path as given (`protect`)


def protect(paths: Iterable) -> None:
    """Remember the command's input files: no report is ever written over one of them (`check_target`)."""
    for p in paths:
        try:
            st = os.stat(p)
        except (OSError, ValueError, TypeError):
            continue  # a URL, or a file that is not there: reading it will say so
        if stat.S_ISREG(st.st_mode):
            _INPUTS.setdefault((st.st_dev, st.st_ino), str(p))


_HELD = {signal.SIGINT, signal.SIGTERM} | ({signal.SIGHUP} if hasattr(signal, "SIGHUP") else set())


def _why(exc: OSError) -> str:
    return {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
            errno.EROFS: "read-only file system", errno.EACCES: "permission denied", errno.EPERM: "not permitted",
            errno.ENAMETOOLONG: "file name too long", errno.ENOTDIR: "a part of the path is not a directory",
            errno.ELOOP: "a symbolic link loop", errno.EISDIR: "is a directory",
            errno.EFBIG: "file too large"}.get(exc.errno, exc.strerror or str(exc))


def _fail(path, exc: OSError) -> UsageError:
    return UsageError(f"{path}: cannot write ({_why(exc)})")


def target_of(path: Path) -> Path:
    """Where writing `path` puts the file: through a symbolic link to the file it names."""
    return Path(os.path.realpath(path)) if os.path.islink(path) else path


def check_target(path: Path, kind: str, force: bool) -> Optional[os.stat_result]:
    """The target's stat when it exists (a regular file, which needs `force`), None when it does not.
    Raises UsageError for anything that cannot or must not be written."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise UsageError(f"{path}: is a symbolic link to a missing file; remove it or give another name") from None
        _check_folder(path)
        return None
    except OSError as exc:
        raise _fail(path, exc) from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path}: is a directory; give a file name for the {kind} output")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path}: is {kind_of(st.st_mode)}; perfsleuth writes reports only to regular files")
    source = _INPUTS.get((st.st_dev, st.st_ino))
    if source is not None:
        how = ("" if os.path.abspath(source) == os.path.abspath(path) else
               " through a symbolic link" if os.path.islink(path) else " under another name (a hard link)")
        raise UsageError(f"{path}: is the input {source}{how}; perfsleuth never writes a report over its input, "
                         f"--force or not")
    if not force:
        raise UsageError(f"{path}: exists; use --force to overwrite")
    _check_folder(target_of(path))
    return st


def _check_folder(path: Path) -> None:
    """The nearest existing folder above `path` is a folder this process can create files in."""
    folder = Path(os.path.abspath(path)).parent
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    if not os.path.isdir(folder):
        raise UsageError(f"{path}: cannot write ({folder} is not a directory)")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".perfsleuth-probe-")
    except OSError as exc:
        raise UsageError(f"{path}: cannot write in {folder} ({_why(exc)})") from None
    os.close(fd)
    os.unlink(probe)


def check_targets(targets: Iterable[tuple[str, Path]], force: bool) -> None:
    seen: dict = {}
    for kind, path in targets:
        key = os.path.realpath(path)
        if key in seen:
            raise UsageError(f"{path}: asked for twice (as {seen[key]} and {kind} output)")
        seen[key] = kind
        check_target(path, kind, force)


@contextlib.contextmanager
def held_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait until the block is done (where the platform allows)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _stage(folder: Path, name: str, text: str, like: Optional[os.stat_result]) -> Path:
    staged = folder / name
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            if like is not None:
                os.fchmod(f.fileno(), stat.S_IMODE(like.st_mode))  # a private report stays private
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staged)
        raise
    return staged


def _place_new(staged: Path, target: Path) -> None:
    try:
        os.link(staged, target)  # fails if the name exists: atomic against a concurrent writer
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, getattr(errno, "EOPNOTSUPP", -1)):
            raise
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # no hard links here: reserve
        os.replace(staged, target)


def write_set(contents: list[tuple[Path, str]], force: bool = False, kinds: Optional[list] = None) -> list[Path]:
    """Write every (path, text) or none of them (see the module docstring); the paths written."""
    targets = [(k, p) for k, (p, _) in zip(kinds or ["report"] * len(contents), contents)]
    check_targets(targets, force)
    folders: dict[Path, Path] = {}  # target folder -> its staging folder
    placed: list[tuple[Path, Optional[Path]]] = []  # (target, the link to its old file) in placing order
    try:
        staged = []
        for path, text in contents:
            target = target_of(path)
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.parent not in folders:
                    folders[target.parent] = Path(tempfile.mkdtemp(dir=target.parent, prefix=".perfsleuth-",
                                                                   suffix=".tmp"))
                old = os.stat(target) if force and os.path.exists(target) else None
                staged.append((path, target, _stage(folders[target.parent], target.name, text, old), old))
            except OSError as exc:
                raise _fail(path, exc) from None
        with held_signals():
            try:
                for path, target, new, old in staged:
                    if old is None:
                        _place_new(new, target)
                        placed.append((target, None))
                    else:
                        keep = folders[target.parent] / f".old-{target.name}"
                        os.link(target, keep)
                        os.replace(new, target)
                        placed.append((target, keep))
            except OSError as exc:
                _undo(placed)
                if isinstance(exc, FileExistsError):
                    raise UsageError(f"{path}: exists (written by another process meanwhile); "
                                     "nothing was written") from None
                raise _fail(path, exc) from None
    finally:
        for staging in folders.values():
            shutil.rmtree(staging, ignore_errors=True)
    return [p for p, _ in contents]


def _undo(placed: list) -> None:
    for target, keep in reversed(placed):
        with contextlib.suppress(OSError):
            if keep is None:
                os.unlink(target)
            else:
                os.replace(keep, target)
