"""`perfsleuth` as installed, with a large trace's allocator events left unread: the baseline for what
reading and analysing them costs (issue 35 item 5; docs/perf.md).

    python benchmarks/ab_analyze.py --a "python benchmarks/without_memory.py" --b perfsleuth \\
        --trace WORKDIR/v100_df_index_resolver.x10.json --pairs 8 --terminal-only

Only the path that `bench.py`'s command takes is changed: with decoding workers, the `[memory]` /
`[OutOfMemory]` events are left to a process of their own (trace/memory_child.py); here that process
is never started and the trace reads as one without allocator events. Everything else (the workers'
decode, the analysis, the report) is the installed code's.
"""

from __future__ import annotations

import sys

from perfsleuth.trace import document
from perfsleuth.trace.memory_child import MemoryChild


class _Unread(MemoryChild):
    """No process: the allocator's columns are empty."""

    def __init__(self, *args, **kwargs):
        self.pid = self.fd = None

    def result(self) -> dict:
        return {}


document.MemoryChild = _Unread

if __name__ == "__main__":
    from perfsleuth.cli.main import main

    sys.exit(main())
