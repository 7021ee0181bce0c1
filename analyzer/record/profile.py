"""`perfsleuth.profile()`: what `perfsleuth run` does, for notebooks and custom loops.

    import perfsleuth

    with perfsleuth.profile() as prof:   # steps: prof.step(), else optimizer.step(), DataLoader next(),
        for x, y in loader:              # or the repeated outermost model call (step_hooks.py)
            train_step(x, y)
    prof.report                          # renders itself in Jupyter; print(prof.report) for the terminal
    prof.report.save("prof-out/")        # report.html, summary.md, report.json and the trace

    prof = perfsleuth.profile(active=10)
    step = prof(train_step)              # or decorate: each call is one step
    for x, y in loader:
        step(x, y)
    prof.report

Defaults are `perfsleuth.record.config.RunConfig`'s: the schedule of `perfsleuth run` (unprofiled steps
timed before and after the recorded window, then the stacks window). The user's code always runs to its
end: profiling stops after the windows and the rest runs unprofiled. `stop_after_window=True` ends the
`with` block once the windows are done instead (one line on stderr says so). Once `prof.step()` is called,
the automatic boundaries are off; pass `manual_steps=True` to have them off from the start (the loop calls
`prof.step()` itself). Without `out_dir` the trace goes to a temporary folder that is removed when neither
the `Profile` nor its report is referenced any more (or at exit); `keep_trace=True` keeps it, and the report
names it.
"""

from __future__ import annotations

import dataclasses
import functools
import html
import os
import shutil
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Optional

from ..errors import UsageError
from ..report.model import Report
from ..trace.companion import memory_name
from .session import WHOLE_RUN_WARNING, ProfileSession, RunConfig, _WindowComplete, analyze
from .paths import rank_info, trace_name


def _remove_folder(path: str, pid: int) -> None:
    """Remove the folder, only from the process that made it: a child forked meanwhile exits without it."""
    if os.getpid() == pid:
        shutil.rmtree(path, True)


class TempFolder:
    """A temporary trace folder, removed (with what is in it) once nothing refers to this object any
    more, or when Python exits; `keep()` leaves it where it is."""

    def __init__(self):
        self.path = Path(tempfile.mkdtemp(prefix="perfsleuth-")).absolute()
        self._remove = weakref.finalize(self, _remove_folder, str(self.path), os.getpid())

    def keep(self) -> None:
        self._remove.detach()

    @property
    def kept(self) -> bool:
        return not self._remove.alive


@dataclasses.dataclass
class ProfiledReport(Report):
    """The analysis `Report` of a profiled loop, plus its trace file; renders itself in Jupyter."""

    trace_file: Optional[Path] = None
    temp: Optional[TempFolder] = dataclasses.field(default=None, repr=False, compare=False)  # None: a kept folder

    @classmethod
    def of(cls, report: Report, trace_file: Path, temp: Optional[TempFolder] = None) -> "ProfiledReport":
        values = {f.name: getattr(report, f.name) for f in dataclasses.fields(Report)}
        return cls(**values, trace_file=Path(trace_file), temp=temp)

    @property
    def trace_note(self) -> str:
        """Where the trace is, and for how long."""
        if self.temp is None or self.temp.kept:
            return f"trace: {self.trace_file}"
        return (f"trace: {self.trace_file} (temporary: removed once this report and its profile are gone, or at "
                f"exit; report.save(DIR) copies it, profile(keep_trace=True) keeps it)")

    def __repr__(self) -> str:
        from ..report.present import steps_text

        phases = [{"phase": p} for p in self.steps.frame.get("phase", ["steady"] * len(self.steps))]
        kept = "" if self.temp is None or self.temp.kept else " (temporary)"
        return f"<ProfiledReport {self.verdict}, {steps_text({'steps': phases})}, trace {self.trace_file}{kept}>"

    def __str__(self) -> str:
        from ..render.terminal import render_terminal

        return render_terminal(self.to_dict()) + "\n" + self.trace_note

    def _repr_html_(self) -> str:
        """The HTML report in an iframe: its page-wide styles (`:root`, `body`) stay out of the notebook."""
        from ..render.html import render_html

        page = html.escape(render_html(self.to_dict()), quote=True)
        return (f'<iframe srcdoc="{page}" title="perfsleuth report" '
                f'style="width:100%;height:640px;border:0"></iframe>')

    def save(self, out_dir, force: bool = False) -> list:
        """Write report.html, summary.md, report.json and the trace (with its companions) into `out_dir`
        (which may already hold the trace); an existing file is replaced only with `force`. Returns the
        paths written."""
        from ..render.outputs import write_outputs

        out = Path(out_dir)
        trace = out / self.trace_file.name
        copy = not (trace.exists() and trace.resolve() == self.trace_file.resolve())
        if copy and trace.exists() and not force:
            raise UsageError(f"{trace}: exists; use force=True to overwrite")
        data = self.to_dict()
        data["trace"]["path"] = str(trace.absolute())  # the saved report names the saved trace
        stacks = out / Path(self.stacks_trace).name if self.stacks_trace else None
        if stacks is not None:
            data["trace"]["stacks_trace"] = str(stacks.absolute())
        written = write_outputs(data, html=out / "report.html", markdown=out / "summary.md",
                                json_path=out / "report.json", force=force)
        if copy:
            written.append(Path(shutil.copy2(self.trace_file, trace)))
            if stacks is not None:  # the stacks companion goes with it (source lines: trace/companion.py)
                written.append(Path(shutil.copy2(self.stacks_trace, stacks)))
            memory = self.trace_file.with_name(memory_name(self.trace_file.name))
            if memory.is_file():  # and the memory window's (the main trace names it: memory_window.py)
                written.append(Path(shutil.copy2(memory, out / memory.name)))
        return written


class Profile:
    """A profiling session around a loop (`with`) or a step function (call it on the function)."""

    def __init__(self, out_dir=None, config: Optional[RunConfig] = None, manual_steps: bool = False,
                 keep_trace: bool = False, **options):
        self.config = dataclasses.replace(config or RunConfig(), **options)
        self.manual_steps = manual_steps
        self.keep_trace = keep_trace
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self._temp: Optional[TempFolder] = None
        self._session: Optional[ProfileSession] = None
        self._report: Optional[ProfiledReport] = None

    @property
    def trace_path(self) -> Optional[Path]:
        return self._session.trace_path if self._session else None

    @property
    def steps(self) -> int:
        """Step boundaries seen so far."""
        return self._session.steps if self._session else 0

    def start(self, raise_on_complete: Optional[bool] = None) -> "Profile":
        if self._session is not None:
            raise RuntimeError("this perfsleuth.profile() has already been started; make a new one")
        if self.out_dir is None:
            self._temp = TempFolder()
            if self.keep_trace:
                self._temp.keep()
        folder = (self.out_dir or self._temp.path).absolute()
        stop = self.config.stop_after_window if raise_on_complete is None else raise_on_complete
        self._session = ProfileSession(self.config, folder / trace_name(rank_info()[0]), raise_on_complete=stop,
                                       manual=self.manual_steps)
        self._session.start()
        return self

    def step(self) -> None:
        """Mark the end of one step (turns the automatic optimizer/DataLoader boundaries off)."""
        if self._session is None:
            raise RuntimeError("prof.step() outside a started perfsleuth.profile()")
        self._session.step("manual")

    def stop(self, whole_run: bool = True) -> None:
        """Stop profiling (a window cut short is kept; with no step boundary at all, everything recorded
        is kept as one window unless `whole_run=False`); idempotent."""
        if self._session is not None:
            self._session.finish(whole_run=whole_run)

    def __enter__(self) -> "Profile":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> bool:
        stopped = exc_type is not None and issubclass(exc_type, _WindowComplete)
        self.stop(whole_run=exc_type is None)
        if stopped:
            s = self._session
            print(f"perfsleuth: stopped the profiled block after step {s.steps} ({s.profiled_steps} profiled), "
                  f"as stop_after_window=True asks: the rest of the `with` block did not run", file=sys.stderr)
        return stopped

    def __call__(self, fn):
        """Wrap a step function: profiling starts at the first call, each call is one step."""

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if self._session is None:
                self.manual_steps = True
                self.start(raise_on_complete=False)
            result = fn(*args, **kwargs)
            self._session.step("manual")
            return result

        wrapper.profile = self
        return wrapper

    @property
    def report(self) -> ProfiledReport:
        """The analysis of what was recorded (stops profiling first)."""
        if self._report is None:
            s = self._session
            if s is None:
                raise RuntimeError("nothing profiled yet: use `with perfsleuth.profile() as prof:` or wrap a function")
            self.stop()
            if not (s.trace_written and (s.profiled_steps > 0 or s.whole_run)):
                if not s.steps:
                    raise RuntimeError("nothing to analyse: the profiled code ran no torch operation")
                raise RuntimeError(f"no profiled step completed: {s.steps} step(s) seen, the window starts "
                                   f"after {s.config.wait + s.config.warmup}; lower wait/warmup or call prof.step()")
            report = analyze(s.trace_path, [WHOLE_RUN_WARNING] if s.whole_run else [], s.config)
            self._report = ProfiledReport.of(report, s.trace_path, self._temp)
        return self._report


def profile(out_dir=None, config: Optional[RunConfig] = None, manual_steps: bool = False, keep_trace: bool = False,
            **options) -> Profile:
    """A profiler for a loop or a step function; options are `RunConfig` fields (wait, warmup, active,
    stop_after_window, ...). `manual_steps=True`: only `prof.step()` marks steps. Without `out_dir` the
    trace is temporary unless `keep_trace=True`."""
    return Profile(out_dir, config, manual_steps, keep_trace, **options)
