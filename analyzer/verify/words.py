"""What `run --verify` says about its experiments as a whole: what they cost (how many times the
script ran again, and how) and whether the machine was busy while they ran."""

from __future__ import annotations

import os
from typing import Optional

BUSY_SHARE = 0.25  # other processes busy on this share of the cores in the windows: said


def plural(n: int, one: str, many: str) -> str:
    """`1 pair`, `3 pairs`."""
    return f"{n} {one if n == 1 else many}"


def cost_sentence(toggling: int, fresh: int, spent_s: float, startup_s: Optional[float],
                  log: object) -> str:
    """What the experiments cost, in words: how many times the script ran again and how
    (`toggling` processes that switch a fix between windows, `fresh` processes of one window
    each; a kind that did not run is not named), how long, and where its output went (issue 37:
    "ran again 1 time(s) ... 0 fresh process(es)")."""
    runs = toggling + fresh
    times = "once" if runs == 1 else f"{runs} times"
    how = [f"{plural(toggling, 'process', 'processes')} toggling a fix between windows"
           if toggling else "",
           f"{plural(fresh, 'fresh process', 'fresh processes')} of one window each"
           if fresh else ""]
    how_text = f" ({', '.join(x for x in how if x)})" if runs else ""
    startup = (f"; a process's start-up took about {startup_s:.1f} s, not timed" if startup_s
               else "")
    again = "" if runs == 1 else " each time"
    return (f"the script ran again {times} without the profiler{how_text} in {spent_s:.0f} s"
            f"{startup}; its side effects (log lines, files it writes) happened again{again}; "
            f"its output is in {log}")


def busy_warning(experiments: list) -> Optional[str]:
    """A line when other processes kept a quarter of the cores or more busy, on average, during the windows
    (the CPU time /proc/stat counts beyond the experiment's own processes): the pairs then measure them too,
    as pyperf and hyperfine say of their own runs."""
    windows = [w for e in experiments for w in e["windows"]]
    others = [w["others_cores"] for w in windows if isinstance(w.get("others_cores"), (int, float))]
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if not others or sum(others) / len(others) < BUSY_SHARE * cores:
        return None
    loads = [x for w in windows for x in (w.get("load") or []) if isinstance(x, (int, float))]
    load = f", load average up to {max(loads):.1f}" if loads else ""
    return (f"the machine was busy during the experiments: other processes kept {sum(others) / len(others):.1f} of "
            f"{cores} cores busy on average{load}; their work is in the windows and moves the pairs apart: rerun "
            "on a quiet machine")
