"""`perfsleuth.profile()`: what `perfsleuth run` does, for notebooks and custom loops.

    import perfsleuth

    with perfsleuth.profile() as prof:   # steps: optimizer.step(), else DataLoader next(), or prof.step()
        for x, y in loader:
            train_step(x, y)
    prof.report                          # renders itself in Jupyter; print(prof.report) for the terminal
    prof.report.save("prof-out/")        # report.html, summary.md, report.json and the trace

    prof = perfsleuth.profile(active=10)
    step = prof(train_step)              # or decorate: each call is one step
    for x, y in loader:
        step(x, y)
    prof.report

Defaults are `perfsleuth.commands.run.RunConfig`'s (wait 1, warmup 2, active 5, stacks and shapes on). With
`stop_after_window` (the default) the `with` block ends as soon as the window is recorded: code after
the loop inside the block does not run. A wrapped function keeps working after the window, unprofiled.
Once `prof.step()` is called, the automatic boundaries (optimizer, DataLoader) are off; pass
`manual_steps=True` to have them off from the start (the loop calls `prof.step()` itself).
"""

from __future__ import annotations

import dataclasses
import functools
import html
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from ..errors import UsageError
from ..report.model import Report
from .run import ProfileSession, RunConfig, _WindowComplete, analyze
from .run_paths import rank_info, trace_name


@dataclasses.dataclass
class ProfiledReport(Report):
    """The analysis `Report` of a profiled loop, plus its trace file; renders itself in Jupyter."""

    trace_file: Optional[Path] = None

    @classmethod
    def of(cls, report: Report, trace_file: Path) -> "ProfiledReport":
        values = {f.name: getattr(report, f.name) for f in dataclasses.fields(Report)}
        return cls(**values, trace_file=Path(trace_file))

    def __repr__(self) -> str:
        from ..report.present import steps_text

        phases = [{"phase": p} for p in self.steps.frame.get("phase", ["steady"] * len(self.steps))]
        return f"<ProfiledReport {self.verdict}, {steps_text({'steps': phases})}, trace {self.trace_file}>"

    def __str__(self) -> str:
        from ..report.terminal import render_terminal

        return render_terminal(self.to_dict())

    def _repr_html_(self) -> str:
        """The HTML report in an iframe: its page-wide styles (`:root`, `body`) stay out of the notebook."""
        from ..report.html import render_html

        page = html.escape(render_html(self.to_dict()), quote=True)
        return (f'<iframe srcdoc="{page}" title="perfsleuth report" '
                f'style="width:100%;height:640px;border:0"></iframe>')

    def save(self, out_dir, force: bool = False) -> list:
        """Write report.html, summary.md, report.json and the trace (with its stacks companion) into `out_dir`
        (which may already hold the trace); an existing file is replaced only with `force`. Returns the
        paths written."""
        from ..report.outputs import write_outputs

        out = Path(out_dir)
        trace = out / self.trace_file.name
        copy = not (trace.exists() and trace.resolve() == self.trace_file.resolve())
        if copy and trace.exists() and not force:
            raise UsageError(f"{trace}: exists; use force=True to overwrite")
        written = write_outputs(self.to_dict(), html=out / "report.html", markdown=out / "summary.md",
                                json_path=out / "report.json", force=force)
        if copy:
            written.append(Path(shutil.copy2(self.trace_file, trace)))
            if self.stacks_trace:  # the stacks companion goes with it (source lines: trace/companion.py)
                written.append(Path(shutil.copy2(self.stacks_trace, out / Path(self.stacks_trace).name)))
        return written


class Profile:
    """A profiling session around a loop (`with`) or a step function (call it on the function)."""

    def __init__(self, out_dir=None, config: Optional[RunConfig] = None, manual_steps: bool = False, **options):
        self.config = dataclasses.replace(config or RunConfig(), **options)
        self.manual_steps = manual_steps
        self.out_dir = Path(out_dir) if out_dir is not None else None
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
        folder = (self.out_dir or Path(tempfile.mkdtemp(prefix="perfsleuth-"))).absolute()
        stop = self.config.stop_after_window if raise_on_complete is None else raise_on_complete
        self._session = ProfileSession(self.config, folder / trace_name(rank_info()[0]), raise_on_complete=stop)
        if self.manual_steps:
            self._session.source = "manual"
        self._session.start()
        return self

    def step(self) -> None:
        """Mark the end of one step (turns the automatic optimizer/DataLoader boundaries off)."""
        if self._session is None:
            raise RuntimeError("prof.step() outside a started perfsleuth.profile()")
        self._session.step("manual")

    def stop(self) -> None:
        """Stop profiling (a window cut short is kept); idempotent."""
        if self._session is not None:
            self._session.finish()

    def __enter__(self) -> "Profile":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.stop()
        return exc_type is not None and issubclass(exc_type, _WindowComplete)

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
            if not (s.trace_written and s.profiled_steps > 0):
                raise RuntimeError(f"no profiled step completed: {s.steps} step(s) seen, the window starts "
                                   f"after {s.config.wait + s.config.warmup}; lower wait/warmup or call prof.step()")
            self._report = ProfiledReport.of(analyze(s.trace_path), s.trace_path)
        return self._report


def profile(out_dir=None, config: Optional[RunConfig] = None, manual_steps: bool = False, **options) -> Profile:
    """A profiler for a loop or a step function; options are `RunConfig` fields (wait, warmup, active, ...).
    `manual_steps=True`: only `prof.step()` marks steps (no optimizer or DataLoader boundaries)."""
    return Profile(out_dir, config, manual_steps, **options)
