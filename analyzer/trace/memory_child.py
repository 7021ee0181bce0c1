"""The allocator's events of a large trace, decoded off the critical path (docs/perf.md, issue 35).

When forked workers decode a large document (document.py), they skip the `[memory]` /
`[OutOfMemory]` instant events, and one more forked process of the lowest priority (nice 19)
decodes only those, from the same byte ranges: while the workers run it mostly waits, and it runs
on the core the analysis leaves free (the analysis is single-threaded). `Trace.memory` asks for its
columns when the analysis first reads them (model.PendingMemory).

The columns are those `kineto.decode_piece` gives (`mem_*`, in document order). If the process
fails (killed, out of memory), the trace says so in a warning and has no memory events: nothing is
guessed.
"""

from __future__ import annotations

import os
import pickle
import signal
from pathlib import Path
from typing import Callable, Iterable, Optional

from . import kineto

FAILED = "the allocator's events could not be read: the process decoding them failed"


class MemoryChild:
    """A forked process decoding the allocator's columns of `spans` (each read by `pieces_of(span)`);
    `result()` waits for them (None when the process failed)."""

    def __init__(self, path: Path, pieces_of: Callable, spans: Iterable):
        spans = list(spans)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: decode, write, and leave without running the parent's exit handlers
            status = 1
            try:
                os.close(read_end)
                os.nice(19)  # the cores go to the decoding workers and the analysis first
                data = pickle.dumps(_decode(path, pieces_of, spans), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write_end, "wb") as out:
                    out.write(data)
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        self.pid: Optional[int] = pid
        self.fd: Optional[int] = read_end

    def result(self) -> Optional[dict]:
        """The merged `mem_*` columns, or None when the process failed."""
        if self.pid is None:
            return None
        chunks = []
        try:
            while block := os.read(self.fd, 1 << 20):
                chunks.append(block)
        finally:
            status = self._reap()
        if status != 0 or not chunks:
            return None
        return pickle.loads(b"".join(chunks))

    def cancel(self) -> None:
        """End the process (its columns are not wanted: the document is decoded another way)."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap()

    def _reap(self) -> int:
        os.close(self.fd)
        _, status = os.waitpid(self.pid, 0)
        self.pid = self.fd = None
        return status

    def __del__(self) -> None:  # never asked for (a load_trace that was not analysed): no zombie left
        if getattr(self, "pid", None) is not None:
            self.cancel()


def _decode(path: Path, pieces_of: Callable, spans: list) -> dict:
    pieces = [kineto.decode_memory_piece(path, blob) for span in spans for blob in pieces_of(span)]
    return kineto.merge(pieces) if pieces else {}
