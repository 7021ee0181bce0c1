"""The child of `perfsleuth run --verify`: `python -m perfsleuth.verify.child`.

It imports torch once and then serves jobs, one JSON line each on stdin: for each job it forks a process
that runs the user's script exactly as `perfsleuth run` does (`target.py`: `__main__`, its argv and
sys.path), with the step hooks of `step_hooks.py`, and no profiler. That process times windows of steps
with the step clock (`step_clock.StepClock`: perf_counter between step boundaries, perfsleuth's own work at
a boundary excluded), writes each window as one JSON line to the job's results file when it ends, and
stops the script after its last window as `run` stops it (a private `BaseException`, raised again at
every later step if the script swallows it). When the process has ended (by os._exit: nothing of
the script's own clean-up runs), the server ends whatever it left running -- the script's daemon
helpers, its Popen children, theirs (`end_leftovers`: they become the server's children, a
subreaper) -- so that no window shares the machine with an earlier one's, and answers one JSON
line on stdout: `{"id", "status", "leftovers"}`. A window's CPU is its process tree's; anything
else is other processes' load.

A job is one or more windows, laid out over the steps after `lead` steps of start-up:

    lead | window 0: warmup + steps | window 1: warmup + steps | ...

Each window is the baseline (`A`) or the variant (`B`). A fix that toggles (verify/apply.py) is switched
at each window's first boundary; a fix that needs a fresh process is applied before the script starts,
in a job of one variant window. The script's own stdout and stderr, and this server's, go to the log
file that verify.py gave as stderr: never to the user's terminal.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Optional

from . import peaks
from ..record.step_clock import StepClock
from ..record.step_hooks import StepHooks
from ..record.target import Target, execute, script_environment, format_user_traceback
from .config import LEFTOVER_GRACE_S


class _WindowsDone(BaseException):
    """Raised from a step hook when the job's windows are timed (like run's _WindowComplete)."""


def loadavg() -> Optional[float]:
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        try:
            return round(os.getloadavg()[0], 2)
        except (AttributeError, OSError):
            return None


def _processes() -> dict:
    """{pid: (parent pid, state, CPU ticks: utime + stime + cutime + cstime)} from /proc."""
    table = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    rest = f.read().rsplit(")", 1)[1].split()
                table[int(pid)] = (int(rest[1]), rest[0], sum(int(x) for x in rest[11:15]))
            except (OSError, ValueError, IndexError):
                continue
    return table


def descendants(table: dict, root: int) -> set:
    """The pids under `root` in `table` (`_processes`): its children, theirs, and so on."""
    children: dict = {}
    for pid, (ppid, *_rest) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def cpu_seconds() -> Optional[tuple]:
    """(CPU seconds the whole machine has been busy, those of this process and everything under
    it: the experiment's process, its DataLoader workers, the processes the script started) from
    /proc; None where there is no /proc. Processes outside this tree (another window's, left
    running) are other processes' load."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        tick = os.sysconf("SC_CLK_TCK")
        machine = (sum(fields[:8]) - fields[3] - fields[4]) / tick  # all but idle and iowait
        table, me = _processes(), os.getpid()
        ours = sum(table[pid][2] for pid in descendants(table, me) | {me} if pid in table)
        return machine, ours / tick
    except (OSError, ValueError, IndexError):
        return None


def _subreaper() -> None:
    """Linux: what a window's process leaves running becomes this process's child, not init's,
    when that process ends (PR_SET_CHILD_SUBREAPER): `end_leftovers` then finds it, however it was
    started."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_leftovers(grace_s: float = LEFTOVER_GRACE_S) -> int:
    """End every process still running under this one once a window's process has ended (issue
    38): it ends with os._exit, so what the script started (multiprocessing's daemon helpers, Popen
    children, theirs) would run on into the next windows. SIGTERM, then SIGKILL to what is left
    after `grace_s`; all reaped. The number of processes ended."""
    import signal

    me, ended, killed = os.getpid(), set(), False
    deadline = time.monotonic() + grace_s
    while True:
        _reap()
        try:
            table = _processes()
        except OSError:  # no /proc: nothing to find
            return len(ended)
        left = {pid for pid in descendants(table, me) if table[pid][1] not in ("Z", "X")}
        if not left:
            return len(ended)
        late = time.monotonic() >= deadline
        for pid in left:
            if pid not in ended or (late and not killed):
                try:
                    os.kill(pid, signal.SIGKILL if late else signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
            ended.add(pid)
        killed = killed or late
        if late and time.monotonic() >= deadline + 5.0:  # stuck in the kernel: left as it is
            return len(ended)
        time.sleep(0.01)


def others_cores(before: Optional[tuple], after: Optional[tuple], wall_s: float) -> Optional[float]:
    """Cores other processes kept busy between two `cpu_seconds` readings."""
    if before is None or after is None or wall_s <= 0:
        return None
    return round(max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / wall_s, 3)


class Windows:
    """Counts step boundaries, times each window's steps, switches the fix, writes each window when done."""

    def __init__(self, job: dict, patch: Any, out):
        self.kinds, self.first = list(job["windows"]), int(job.get("first", 0))
        self.lead, self.warmup, self.steps = int(job["lead"]), int(job["warmup"]), int(job["steps"])
        self.toggle, self.patch, self.out = bool(job.get("toggle")), patch, out
        self.hooks = StepHooks(self.on_step)
        self.clock = StepClock()
        self.boundaries, self.phase, self.done = 0, None, False
        self.started = time.perf_counter()
        self.startup_us: Optional[float] = None
        self.load: dict = {}
        self.written = 0

    def on_step(self, source: str, obj: Any = None) -> None:
        if not self.hooks.accept(source, obj):
            return
        if self.done:
            raise _WindowsDone()  # again: the script swallowed the first one
        self.clock.enter()
        try:
            self._boundary(self.boundaries)
        finally:
            self.clock.leave(self.boundaries, self.phase)
            self.boundaries += 1
        if self.done:
            raise _WindowsDone()

    def _boundary(self, b: int) -> None:
        if b == 0:
            self.startup_us = round((time.perf_counter() - self.started) * 1e6, 3)
        i = b - self.lead
        if i < 0:
            self.phase = "lead"
            return
        k, r = divmod(i, self.warmup + self.steps)
        if r == 0 and k > 0:
            self._write(k - 1)
        if r == 0 and k == len(self.kinds):
            self.done, self.phase = True, None
            return
        if r == 0:
            self.load[k] = (loadavg(), cpu_seconds(), time.perf_counter())
            if self.toggle:
                self.patch.set(self.kinds[k] == "B")
        if r == self.warmup:
            peaks.reset()  # the window's peak memory over its timed steps (verify/peaks.py)
        self.phase = (k, "warmup" if r < self.warmup else "timed")

    def _write(self, k: int) -> None:
        timed = [us for _, p, us, *_ in self.clock.intervals if p == (k, "timed")]
        warm = sum(us for _, p, us, *_ in self.clock.intervals if p == (k, "warmup"))
        lead = sum(us for _, p, us, *_ in self.clock.intervals if p == "lead") if k == 0 else 0.0
        load, cpu, began = self.load.get(k, (None, None, time.perf_counter()))
        row = {"window": self.first + k, "variant": self.kinds[k], "step_us": timed,
               "warmup_us": round(warm + (lead + (self.startup_us or 0.0) if k == 0 and not self.toggle else 0.0), 3),
               "startup_us": self.startup_us if k == 0 else None, "load": [load, loadavg()],
               "others_cores": others_cores(cpu, cpu_seconds(), time.perf_counter() - began),
               "applied": self.patch.applied() if self.kinds[k] == "B" else None,
               "peak": peaks.read()}
        self.out.write(json.dumps(row) + "\n")
        self.out.flush()
        self.written += 1


def run_job(job: dict) -> int:
    """Run the script for one job's windows; always ends with an `end` line in the results file."""
    from . import apply as verify_apply

    t = job["target"]
    target = Target(t["name"], tuple(t["args"]), bool(t["module"]), Path(t["path"]) if t.get("path") else None)
    patch = verify_apply.make(job["kind"], job.get("params") or {})
    with open(job["results"], "a", encoding="utf-8") as out:
        windows = Windows(job, patch, out)
        ended, message = "finished", None
        if job.get("toggle") or job["windows"] == ["B"]:
            patch.install()
        with script_environment(target):
            windows.hooks.install(modules=True)
            try:
                execute(target)
            except _WindowsDone:
                ended = "done"
            except SystemExit as exc:
                ended, message = "exited", f"the script exited (code {exc.code})"
            except BaseException as exc:
                ended = "raised"
                message = f"the script raised {type(exc).__name__}: {(str(exc).strip() or '-').splitlines()[0]}"
                try:
                    sys.stderr.write(format_user_traceback(exc))
                except Exception:
                    traceback.print_exc()
            finally:
                windows.hooks.remove()
                windows.hooks.shutdown_workers()
        if ended in ("finished", "exited") and windows.written < len(job["windows"]):
            message = (f"{message or 'the script ended'} after step {windows.boundaries} (as `run` counts them), "
                       f"before its windows were timed ({windows.written} of {len(job['windows'])})")
        out.write(json.dumps({"end": ended, "message": message, "steps": windows.boundaries,
                              "applied": patch.applied(), "startup_us": windows.startup_us}) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    return 0


def _die_with_parent() -> None:
    """Linux: this process gets SIGKILL when its parent dies (perfsleuth killed, or the server)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:
        pass


def window_banner(job: dict) -> str:
    """The log's line before a job's windows: each window by number and what it runs, the
    baseline named as such (issue 37: baseline windows were labelled with the fix's name)."""
    fix = str(job.get("variant") or "the fix")
    names = ["baseline" if w == "A" else fix for w in job["windows"]]
    first = job["first"]
    where = f"window {first}" if len(names) == 1 else f"windows {first}-{first + len(names) - 1}"
    return f"--- perfsleuth verify: {where}: {', '.join(names)} ---"


def _forked(job: dict) -> int:
    try:
        _die_with_parent()
        os.dup2(2, 1)  # the script's stdout goes to the log too; fd 1 was the answer pipe
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        sys.stdin = open(os.devnull, encoding="utf-8")  # not the server's buffered requests
        print(window_banner(job), flush=True)
        return run_job(job)
    except BaseException:
        traceback.print_exc()
        return 70


def _warm() -> None:
    """Paid once here, not in every window's process (all are forked from this one): importing torch, and
    what the first optimizer imports (torch._dynamo: seconds) and the first backward sets up."""
    import torch
    import torch.optim
    import torch.utils.data  # noqa: F401

    w = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(w.parameters(), lr=0.1)
    w(torch.zeros(1, 2)).sum().backward()
    opt.step()


def serve() -> None:
    _die_with_parent()
    _subreaper()
    _warm()

    answers = sys.stdout
    for line in sys.stdin:
        job = json.loads(line)
        answers.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os._exit(_forked(job))
        _, status = os.waitpid(pid, 0)
        left = end_leftovers()  # the next window must not share the machine with this one's
        if left:
            print(f"--- perfsleuth verify: ended {left} process(es) the script left running in "
                  f"window(s) {job['first']}.. ---", file=sys.stderr, flush=True)
        answers.write(json.dumps({"id": job["id"], "status": os.waitstatus_to_exitcode(status),
                                  "leftovers": left}) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve()
