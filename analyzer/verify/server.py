"""The parent's handle on a verify child (`python -m perfsleuth.verify.child`): start it, give it
jobs, read their windows as they are written, and kill it with everything it started.

The child runs in a process group of its own (so a Ctrl-C at the terminal reaches perfsleuth, which
decides, and not the script), in the user's working directory, with the user's environment plus the
variant's (OMP/MKL thread counts). Its stderr, and the stdout and stderr of the script it runs, go to
the log file; its stdout carries only the answers, one JSON line per job.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Optional


class ServerDied(Exception):
    """The child ended without answering (killed, out of memory): the log says why."""


class Server:
    def __init__(self, log: IO, env: Optional[dict] = None):
        full = {**os.environ, **{k: str(v) for k, v in (env or {}).items()}}
        try:  # -P: the working directory is not put on sys.path (the script's own folder is, by target.py)
            self.proc = subprocess.Popen([sys.executable, "-P", "-m", "perfsleuth.verify.child"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=full,
                                         cwd=os.getcwd(), process_group=0, close_fds=True)
        except OSError as exc:
            raise ServerDied(f"the verify process could not start ({exc})") from None
        self._buffer = b""

    def submit(self, job: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise ServerDied(f"the verify process ended ({exc})") from None

    def answer(self, timeout: float) -> Optional[dict]:
        """The answer to the job in progress, or None when none came within `timeout` seconds."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                code = self.proc.wait()
                raise ServerDied(f"the verify process ended (exit status {code})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        """Let it end (no more jobs); kill it if it does not within a second."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=1.0)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()

    def kill(self) -> None:
        """The child, the script's process and its DataLoader workers: all of its process group."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


class Results:
    """A job's results file, read as it grows: complete JSON lines only."""

    def __init__(self, path: Path):
        self.path, self._offset, self._rest = path, 0, b""

    def new_rows(self) -> list:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        data = self._rest + data
        *lines, self._rest = data.split(b"\n")
        rows = []
        for line in lines:
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
        return rows
