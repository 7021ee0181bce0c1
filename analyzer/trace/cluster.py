"""Who reads the traces of a directory: this process, a local process pool, or a Dask cluster.

Reading each rank's trace is independent work. `executor()` gives a `concurrent.futures` executor
for it: the local process pool by default; `scheduler="local"` starts a Dask LocalCluster (one
single-threaded worker process per job, so a worker holds one trace at a time); a
`tcp://HOST:PORT` (or `tls://`) address uses an existing Dask cluster through
`distributed.Client.get_executor()`. The same per-file function runs everywhere (api._analyze_member)
and only its small result travels back. dask[distributed] is an optional extra (`perfsleuth[dask]`).
"""

from __future__ import annotations

import contextlib
import logging
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Iterator, Optional

from ..errors import UsageError

LOCAL = "local"
CONNECT_TIMEOUT_S = 20  # reaching an existing scheduler, or starting a LocalCluster
_ADDRESS_PREFIXES = ("tcp://", "tls://")


def check_scheduler(scheduler: Optional[str]) -> None:
    """A bad --scheduler value is a UsageError, found before any work."""
    if scheduler is None or scheduler == LOCAL:
        return
    if not scheduler.startswith(_ADDRESS_PREFIXES) or ":" not in scheduler.split("://", 1)[1]:
        raise UsageError(f"--scheduler {scheduler!r}: give tcp://HOST:PORT (a running Dask scheduler) or 'local'")


@contextlib.contextmanager
def executor(scheduler: Optional[str], jobs: int) -> Iterator[Optional[Executor]]:
    """The executor for per-file work, or None: run in this process (no scheduler and one job)."""
    check_scheduler(scheduler)
    if scheduler is None:
        if jobs <= 1:
            yield None
            return
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            yield pool
        return
    with _dask_client(scheduler, jobs) as client:
        yield client.get_executor()


@contextlib.contextmanager
def _dask_client(scheduler: str, jobs: int):
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        raise UsageError("--scheduler needs Dask: pip install 'perfsleuth[dask]'") from None
    with contextlib.ExitStack() as stack:
        if scheduler == LOCAL:
            # Dask starts its workers with MALLOC_TRIM_THRESHOLD_=65536: glibc then hands memory back
            # after every large free and faults it in again, which made each analysis ~20 % slower
            # (docs/perf.md). Our workers allocate and free large arrays; they keep glibc's default.
            stack.enter_context(dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}))
            cluster = stack.enter_context(LocalCluster(
                n_workers=max(1, jobs), threads_per_worker=1, processes=True, host="127.0.0.1",
                dashboard_address=None, silence_logs=logging.ERROR))
            address = cluster.scheduler_address
        else:
            address = scheduler
        try:
            client = stack.enter_context(Client(address, timeout=f"{CONNECT_TIMEOUT_S}s", set_as_default=False))
        except (OSError, TimeoutError) as exc:
            raise UsageError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
        yield client
