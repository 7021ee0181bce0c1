"""Running a training script under the profiling session: the script runs in this process as
`__main__` (target.py), its steps are recorded (session.py), and however it ends (its own end, the
window's, an exit, an error, a signal, a fork) the trace is finished and analysed (outcome.py)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Callable, Optional

from . import code_sites, forks, outputs as run_outputs
from .config import RunConfig
from .outcome import RunOutcome, conclude
from .paths import rank_info, trace_name
from .session import ProfileSession, _WindowComplete
from .signals import Finishing, as_interrupts, exit_code, signal_name
from .target import Target, execute, format_user_traceback, script_environment


def run_script(target: Target, config: RunConfig, out_dir: Path, on_phase: Optional[Callable[[str, str], None]] = None,
               finishing: Optional[Finishing] = None) -> RunOutcome:
    """Run `target` in this process as `__main__` under the profiler; analyze what was recorded.
    `on_phase(phase, detail)`: told when the run starts waiting, profiling, writing, analysing. A signal once the
    script is over waits for the trace to be written, and for its analysis unless repeated (`finishing`)."""
    finishing = finishing or Finishing(lambda name: None)
    rank, _ = rank_info()
    outcome = RunOutcome(out_dir=out_dir, trace_path=out_dir / trace_name(rank), rank=rank)
    session = ProfileSession(config, outcome.trace_path.absolute(), raise_on_complete=config.stop_after_window)
    session.on_phase = on_phase if rank in (None, 0) else None  # rank 0 speaks for the job
    session.program = target.program
    ended = "finished"
    exits = forks.watching_os_exit(forks.Owner(), lambda code, here: forks.os_exit_notice(session, code, here))
    with script_environment(target), as_interrupts(), exits:
        session.start()  # outside the try: a failure here is perfsleuth's, not the script's
        try:
            forks.execute(lambda: execute(target), session.hooks.owner, format_user_traceback)
        except forks.ChildExit:  # a child the script forked ends here, as it would without perfsleuth
            raise
        except _WindowComplete as exc:
            ended = "stopped"
            with finishing.holding(allows_stop=False):  # the script is over: a signal waits, as below
                outcome.stopped_at = code_sites.stopped_at(exc.__traceback__)
                forks.stop_children()  # while the script's objects (its queues) are still alive
        except KeyboardInterrupt as exc:  # Ctrl-C, and SIGTERM / SIGHUP (signals.py): partial data is kept
            ended, outcome.signal, outcome.exit_code = "interrupted", signal_name(exc), exit_code(exc)
            forks.stop_children()
        except SystemExit as exc:
            ended, outcome.exit_code = "exited", exc.code
        except BaseException as exc:  # the script's own error: reported, not ours to crash on
            with run_outputs.quiet_child_signals():
                ended, exc = "raised", run_outputs.dead_worker_error(exc)
                outcome.user_traceback, exc = run_outputs.user_traceback(exc, format_user_traceback)
                outcome.message = f"the script raised {type(exc).__name__}: {(str(exc).strip() or '-').splitlines()[0]}"
        finally:
            finishing.trace = session.trace_path
            # the script is over: a dying worker is not ours to raise, a signal waits for the trace to be written
            with finishing.holding(allows_stop=False), run_outputs.quiet_child_signals():
                # a script that ran to its end without a single step boundary is analysed whole
                session.finish(whole_run=ended == "finished" or (ended == "exited" and outcome.exit_code in (0, None)))
                session.shutdown_workers()
                gc.collect()
    outcome.steps, outcome.profiled_steps, outcome.whole_run = session.steps, session.profiled_steps, session.whole_run
    outcome.rival_at = session.rival_at
    if session.export_error:
        outcome.export_error, outcome.trace_path = session.export_error, session.trace_path
    if session.on_phase is not None and session.trace_written:
        session.on_phase("analysing", outcome.trace_path.name)
    finishing.trace = outcome.trace_path if outcome.trace_path.is_file() else None
    with finishing.holding():  # the analysis: a first signal is said and waits, a second one stops it
        conclude(outcome, ended, session.window_done, config)
    return outcome
