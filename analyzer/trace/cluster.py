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
import ipaddress
import logging
import re
import threading
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Iterator, Optional

from ..errors import UsageError

LOCAL = "local"
CONNECT_TIMEOUT_S = 20  # reaching an existing scheduler (its handshake included), or starting a LocalCluster
_SCHEMES = ("tcp", "tls")
_HOST = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9_-]{1,63}(?<!-))*\.?$")


def check_scheduler(scheduler: Optional[str]) -> None:
    """A bad --scheduler value is a UsageError, found before any work: tcp:// or tls://, a host name or an IP
    address (IPv6 in brackets), a port from 1 to 65535, nothing after it."""
    if scheduler is None or scheduler == LOCAL:
        return
    why = _address_problem(scheduler)
    if why:
        raise UsageError(f"--scheduler {scheduler!r}: {why}; give tcp://HOST:PORT (a running Dask scheduler, "
                         f"tcp://[::1]:8786 for IPv6) or 'local'")


def _address_problem(address: str) -> Optional[str]:
    scheme, sep, rest = address.partition("://")
    if not sep or scheme not in _SCHEMES:
        return "the address must start with tcp:// or tls://"
    if rest.startswith("["):
        host, closed, after = rest[1:].partition("]")
        if not closed:
            return "an IPv6 address needs its closing ']'"
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"{host!r} is not an IPv6 address"
        if not after.startswith(":"):
            return "no port after the address"
        port = after[1:]
    else:
        host, colon, port = rest.rpartition(":")
        if not colon:
            return "no port (tcp://HOST:PORT)"
        if ":" in host:
            return "an IPv6 address goes in brackets, as tcp://[::1]:8786"
        if not _HOST.match(host):
            return f"{host!r} is not a host name or an IP address" if host else "no host"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        return f"the port must be a number from 1 to 65535, got {port!r}"
    return None


def _hello(address: str, seconds: float) -> None:
    """A Dask handshake with the scheduler at `address` within `seconds`, before any Client exists: distributed's
    own connect waits for the handshake's answer without a deadline (a listener that never answers held it for
    ever), and a Client that fails to start warns from its __del__ at exit. The handshake runs on an event
    loop of its own, in a helper thread (the caller may be inside a running loop: a notebook)."""
    import asyncio

    from distributed.comm import connect

    async def hello():
        comm = await asyncio.wait_for(connect(address, timeout=seconds), seconds)
        await comm.close()

    outcome: list = []

    def run() -> None:
        try:
            asyncio.run(hello())
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001  handed to the caller
            outcome.append(exc)

    thread = threading.Thread(target=run, name="perfsleuth-dask-hello", daemon=True)
    thread.start()
    thread.join(seconds + 5)
    exc = outcome[0] if outcome else TimeoutError()
    if exc is None:
        return
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)) or "Timed out" in str(exc):
        raise UsageError(f"cannot reach the Dask scheduler at {address}: no answer within {seconds:g} s (is one "
                         "listening there?)")
    if isinstance(exc, (MemoryError, OverflowError)):
        raise UsageError(f"the server at {address} is not a Dask scheduler: its first answer announces a message "
                         "too large to receive")
    text = " ".join(str(exc).split()) or type(exc).__name__
    raise UsageError(f"cannot reach the Dask scheduler at {address}: {text[:300]}")


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
            _hello(address, CONNECT_TIMEOUT_S)
        stack.enter_context(dask.config.set({"distributed.comm.timeouts.connect": f"{CONNECT_TIMEOUT_S}s"}))
        try:
            client = stack.enter_context(Client(address, timeout=f"{CONNECT_TIMEOUT_S}s", set_as_default=False))
        except Exception as exc:  # noqa: BLE001  whatever distributed raises: one line
            text = " ".join(str(exc).split()) or type(exc).__name__
            raise UsageError(f"cannot reach the Dask scheduler at {address}: {text[:300]}") from None
        yield client
