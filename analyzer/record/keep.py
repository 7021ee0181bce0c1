"""What `perfsleuth run` writes into its output folder, kept out of the script's reach until the
end (issue 38).

The script runs on after the recorded window, and again in each of --verify's experiments, in the
same working folder: a script that cleans its run folder (`shutil.rmtree("runs")` at its start,
run with `-o runs`) deleted the trace, its companions and `verify/`'s results while perfsleuth
still needed them, and perfsleuth then said "wrote" of files that were not there and blamed the
experiment ("ended with status 0 before saying why").

- Each trace perfsleuth puts in place (outputs.py tells the `Keeper` of the run in progress) gets
  a second name in a private folder beside the output folder (`.NAME.perfsleuth-XXXXXX`: the same
  filesystem, a hard link, nothing copied; a copy in the system's temporary folder where no link
  can be made). `restore()` puts back what is gone: before the trace is finished, after the
  script, and before the report is written.
- --verify works in a folder of the private one (`folder`) and `place` moves it into the output
  folder at the end, under the name reserved for it at the start (`verify`, `verify-2`, ...).
- `close()` removes the private folder; a kept file that could not be put back stays there, and
  is said.
A hard link shares its file: a script that writes into perfsleuth's trace (rather than deleting
it) changes both names.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Optional

from . import outputs as run_outputs

log = logging.getLogger(__name__)


class Keeper:
    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir).absolute()
        self.root: Optional[Path] = None  # the private folder, made when first needed
        self.kept: dict = {}  # a file's place -> its second name in the private folder
        self.lost: list = []  # kept files that could not be put back (close() leaves them)
        self.pid = os.getpid()  # a child the script forked leaves the private folder alone

    def private(self) -> Path:
        if self.root is None:
            prefix = f".{self.out_dir.name}.perfsleuth-"
            try:  # beside the output folder: the same filesystem, out of `rmtree(out_dir)`'s reach
                self.root = Path(tempfile.mkdtemp(prefix=prefix, dir=self.out_dir.parent))
            except OSError:
                self.root = Path(tempfile.mkdtemp(prefix="perfsleuth-keep-"))
        return self.root

    @contextlib.contextmanager
    def watching(self) -> Iterator["Keeper"]:
        """While it lasts, outputs.py tells this keeper of each trace put in place or removed."""
        run_outputs.KEEPERS.append(self)
        try:
            yield self
        finally:
            run_outputs.KEEPERS.remove(self)

    def keep(self, path: Path) -> None:
        """`path` was just put in place: a second name for it in the private folder. Never
        raises."""
        path = Path(path).absolute()
        self.forget(path)
        try:
            copy = self.private() / f"{len(self.kept) + len(self.lost)}-{path.name}"
            try:
                os.link(path, copy)
            except OSError:
                shutil.copy2(path, copy)
        except OSError as exc:
            log.warning("could not keep a second copy of %s: %s", path, exc)
            return
        self.kept[path] = copy

    def forget(self, path: Path) -> None:
        """perfsleuth removed `path` itself (the JSON once gzipped): not to be put back."""
        copy = self.kept.pop(Path(path).absolute(), None)
        if copy is not None:
            with contextlib.suppress(OSError):
                copy.unlink()

    def restore(self) -> list:
        """Put back each kept file that is gone (a file the script put at its name is left as it
        is); the paths put back."""
        back: list = []
        if os.getpid() != self.pid:
            return back
        for place, copy in self.kept.items():
            if os.path.lexists(place) or not copy.is_file():
                continue
            try:
                place.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(copy, place)
                except OSError:
                    shutil.copy2(copy, place)
                back.append(place)
            except OSError as exc:
                log.warning("could not put back %s (removed while the script ran): %s", place,
                            exc)
        if back:
            log.info("put back what the script removed: %s", ", ".join(map(str, back)))
        return back

    def folder(self, name: str) -> Path:
        """A new folder of the private one (--verify's, until `place`)."""
        path = self.private() / name
        path.mkdir()
        return path

    def place(self, staged: Path, final: Path, base: Path) -> Path:
        """Move the folder `staged` to `final` (the empty folder reserved for it, or gone since),
        or to a new name beside `base` when the script has put files at `final` meanwhile; where
        it is now. Raises OSError when it cannot be moved (it then stays where it is, whole)."""
        for _ in range(3):
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(staged, final)  # onto an empty folder, or where none is
                return final
            except OSError as exc:
                if exc.errno == errno.EXDEV and not (final.is_dir() and any(final.iterdir())):
                    # a private folder on another filesystem: copied
                    shutil.copytree(staged, final, dirs_exist_ok=True)
                    shutil.rmtree(staged, ignore_errors=True)
                    return final
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EXDEV):
                    raise
            final = run_outputs._new_folder(base)
        raise OSError(errno.EEXIST, f"no free folder beside {base}")

    def close(self) -> None:
        """Remove the private folder: the second names of files that are in place, then the folder
        if it is empty (a file that could not be put back, or a folder that could not be placed,
        stays, and is said)."""
        if os.getpid() != self.pid:
            return
        for place, copy in self.kept.items():
            if os.path.lexists(place):
                with contextlib.suppress(OSError):
                    copy.unlink()
            else:
                self.lost.append(copy)
                log.warning("%s was removed while the script ran and could not be put back; a copy "
                            "is %s", place, copy)
        self.kept = {}
        if self.root is not None:
            with contextlib.suppress(OSError):
                self.root.rmdir()
