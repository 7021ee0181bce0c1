"""Decode tasks in order, in forked worker processes or in this one.

A task is a chunk of the document (an index into the per-event slices, or a byte span of a shared
buffer) that `blobs_of(task)` turns into JSON array pieces. The workers are forked, so the buffer,
the slices and the transform are inherited (module state set before the fork), never pickled; only
the tasks and their column chunks cross processes.
"""

from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Callable, Iterable, Optional

from ..errors import TraceError
from . import kineto

_SHARED: tuple = ()  # (path, blobs_of, transform, fallible, memory): inherited by the forked workers


def can_fork() -> bool:
    return "fork" in mp.get_all_start_methods()


def _task(task) -> Optional[tuple]:
    """(transform(columns), entries, warnings) of one task; None when a fallible task's bytes are not
    JSON (the caller then decodes the document another way)."""
    path, blobs_of, transform, fallible, memory = _SHARED
    warnings: list = []
    try:
        columns = kineto.merge([kineto.decode_piece(path, blob, warnings, memory) for blob in blobs_of(task)])
    except TraceError:
        if fallible:
            return None
        raise
    return transform(columns), columns["entries"], warnings


class Decoder:
    """`submit` tasks (in document order), then `results`. With jobs > 1 the tasks run in forked
    workers as soon as they are submitted; otherwise in this process when the results are asked for."""

    def __init__(self, path: Path, blobs_of: Callable, transform: Callable, jobs: int, fallible: bool = False,
                 memory: bool = True):
        self.shared = (path, blobs_of, transform, fallible, memory)  # memory: the allocator's events too
        self.jobs, self.pool, self.pending = jobs, None, []

    def __enter__(self) -> "Decoder":
        global _SHARED
        _SHARED = self.shared
        if self.jobs > 1:  # unlike multiprocessing.Pool, a worker that dies (OOM killer) is noticed
            self.pool = ProcessPoolExecutor(self.jobs, mp_context=mp.get_context("fork"))
        return self

    def __exit__(self, *exc) -> None:
        global _SHARED
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        _SHARED = ()

    def submit(self, task) -> None:
        try:
            pending = self.pool.submit(_task, task) if self.pool else None
        except BrokenProcessPool:  # a worker died already: results() says so
            pending = self.pool_broken()
        self.pending.append((task, pending))

    @staticmethod
    def pool_broken() -> Future:
        dead: Future = Future()
        dead.set_exception(BrokenProcessPool("a worker process died"))
        return dead

    def results(self, done_at: Callable, total: int, progress: Optional[Callable] = None,
                idle: Optional[Callable[[], None]] = None) -> Optional[tuple]:
        """(outputs in order, entries, warnings), or None as soon as a fallible task fails.
        `progress(done_at(task), total)` after each task, and `progress(total, total)` at the end.
        `idle()` runs first, while the workers decode (not at all without workers)."""
        if idle is not None and self.pool is not None and self.pending:
            idle()
        outs, entries, warnings, done = [], 0, [], 0
        for task, pending in self.pending:
            try:
                result = pending.result() if pending is not None else _task(task)
            except BrokenProcessPool:
                if self.shared[3]:  # fallible: the caller decodes in this process
                    return None
                raise TraceError(self.shared[0], "a decoding worker process died (out of memory?); "
                                                 "try -j 1") from None
            if result is None:
                return None
            out, n, new = result
            outs.append(out)
            entries += n
            warnings.extend(w for w in new if w not in warnings)
            if progress is not None:
                done = done_at(task)
                progress(done, total)
        if progress is not None and done != total:
            progress(total, total)  # the bytes after the last event
        return outs, entries, warnings


def run(path: Path, blobs_of: Callable, tasks: Iterable, transform: Callable, jobs: int, done_at: Callable,
        total: int, progress: Optional[Callable] = None, fallible: bool = False,
        idle: Optional[Callable[[], None]] = None, memory: bool = True) -> Optional[tuple]:
    """All `tasks` in order: (outputs, entries, warnings), or None when a fallible task fails."""
    with Decoder(path, blobs_of, transform, jobs, fallible, memory) as decoder:
        for task in tasks:
            decoder.submit(task)
        return decoder.results(done_at, total, progress, idle)
