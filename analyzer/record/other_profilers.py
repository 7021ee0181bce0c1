"""A script that starts its own torch.profiler while perfsleuth profiles it.

One profiler per process: two at once end in torch's "disableProfiler called but no active profiling
session found" and, as often as not, a segmentation fault (torch 2.13). So while a session may still
record, the entry points a script uses are watched -- `torch.profiler.profile` (its `prepare_trace`,
through which `start()`, `__enter__` and a schedule's first active step all pass) and the legacy
`torch.autograd.profiler.profile.__enter__` -- and before the script's profiler starts, perfsleuth
stops its own and says so (`on_rival(where)`); the script's profiler then runs as it would without
perfsleuth. perfsleuth's own profilers are marked (`ours`) and pass.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from . import code_sites

_MARK = "_perfsleuth_own"


def ours(prof: Any) -> Any:
    """Mark a torch.profiler.profile as perfsleuth's own; returns it."""
    setattr(prof, _MARK, True)
    return prof


def _where() -> Optional[str]:
    import sys

    site = code_sites.where(sys._getframe(2))
    return f"{site['file']}:{site['line']} in {site['function']}" if site else None


def stand_aside(where: Optional[str], finish: Callable[[], None]) -> str:
    """Say that perfsleuth stops profiling where the script starts its own profiler, and stop (`finish`);
    returns where, as said."""
    import sys

    from ..report.escape import terminal

    where = where or "?"
    print(terminal(f"perfsleuth: the script starts its own torch.profiler at {where}: perfsleuth stops profiling "
                   "there (one profiler per process) and lets the script run on"), file=sys.stderr, flush=True)
    finish()
    return where


def watch(on_rival: Callable[[Optional[str]], None]) -> Callable[[], None]:
    """Call `on_rival(where the script starts it)` before a profiler that is not perfsleuth's starts; returns
    the undo."""
    from torch.autograd import profiler as autograd_profiler
    from torch.profiler import profiler as torch_profiler

    kineto, legacy = torch_profiler._KinetoProfile, autograd_profiler.profile
    prepare, enter = kineto.prepare_trace, legacy.__enter__

    def prepare_trace(prof, *args, **kwargs):
        if not getattr(prof, _MARK, False):
            on_rival(_where())
        return prepare(prof, *args, **kwargs)

    def __enter__(prof, *args, **kwargs):
        if getattr(prof, "enabled", True):
            on_rival(_where())
        return enter(prof, *args, **kwargs)

    kineto.prepare_trace, legacy.__enter__ = prepare_trace, __enter__

    def undo() -> None:
        kineto.prepare_trace, legacy.__enter__ = prepare, enter
    return undo
