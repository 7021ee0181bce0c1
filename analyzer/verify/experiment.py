"""`perfsleuth run --verify`: after the profiled run, measure each fix perfsleuth can apply without
editing the user's code (docs/run.md#verify-measure-the-fixes).

`plan_for(report, config)` picks the experiments (verify/fixes.py, the registry); `Verifier.run` runs
them, each as baseline and variant windows alternating A B A B ..., without the profiler: in one child
process that toggles the fix between windows, or in a fresh process per window (forked from a child that
has imported torch: verify/child.py). It keeps to a time budget, prints a progress line per pair on
stderr, and keeps what was measured when a variant fails, the budget runs out, or Ctrl-C / SIGTERM
arrive. `verify_report` does all of it for a `Report`: the findings get `verified` and their severity
from it (engine/measured.py), the report `extra["verify"]`.

Children write only into a new folder `verify[-N]` of the run's output folder: their results files and
`children.log` (the script's own output in the experiments); under `run`, it is made out of the
script's reach and moved there at the end (record/keep.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Callable, Optional

from ..engine.measured import apply_verified
from ..report.figures import peak_text
from . import fixes as verify_fixes, stats as verify_stats
from .stats import OUTCOME_RANK, verified_by_rule  # noqa: F401  (the best setting per rule)
from ..record.outputs import _new_folder
from ..record.signals import Interrupted, exit_code, pause_at, signal_name
from .config import VerifyConfig
from .fixes import FRESH, TOGGLE, Context
from .server import Results, Server, ServerDied
from .words import busy_warning, cost_sentence, plural

log = logging.getLogger(__name__)
SERVER_START_S = 3.0  # the child's own start-up (importing torch) before it is measured


class _BudgetSpent(Exception):
    pass


def _target_dict(target) -> dict:
    return {"name": target.name, "args": list(target.args), "module": bool(target.module),
            "path": str(Path(target.path).absolute()) if target.path else None}


def context_of(report, config: VerifyConfig) -> Context:
    from ..analysis.machine import machine_facts

    meta = report.trace.run_metadata if isinstance(report.trace.run_metadata, dict) else {}
    m = machine_facts(meta)
    gpu = ((meta.get("host") or {}).get("accelerator") or "cpu") != "cpu" or report.trace.device_type == "cuda"
    return Context(gpu=gpu, loaders=m.loaders, cores=m.cores, free_cores=m.free_cores,
                   torch_threads=m.torch_threads, compile=config.compile)


def step_us_of(report) -> Optional[float]:
    """The run's unprofiled median step (µs), else the profiled one."""
    m = report.measurement or {}
    un = (m.get("unprofiled_step_us") or {}).get("median")
    return un or report.step_time_us().get("median")


class Verifier:
    """`finishing` (record/signals.Finishing, held by the caller): a first signal stops the
    experiments and everything after them is held. `keeper` (record/keep.py): the experiments'
    files are written in its private folder, out of the script's reach, and moved at the end to
    the folder reserved for them (`verify`, `verify-2`, ...); every line names that folder."""

    def __init__(self, target, folder: Path, config: VerifyConfig, step_us: Optional[float],
                 say: Callable[[str], None], clock=time.monotonic, finishing=None, keeper=None):
        self.target, self.config, self.say, self.clock = _target_dict(target), config, say, clock
        self.finishing, self.keeper, self.base = finishing, keeper, Path(folder) / "verify"
        self.place = _new_folder(self.base)  # where its files end up, reserved now
        # where they are made
        self.folder = keeper.folder(self.place.name) if keeper is not None else self.place
        self.log_path = self.place / "children.log"
        self.step_us, self.steps = step_us, config.steps_for(step_us)
        self.servers: dict = {}
        self.startup_s: list = []
        self.jobs = 0
        self.signal: Optional[str] = None
        self.exit_code: Optional[int] = None

    # --- cost -----------------------------------------------------------------------------------------
    def _startup(self) -> float:
        return max(self.startup_s) if self.startup_s else self.config.startup_guess_s

    def warmup_for(self, exp: dict) -> int:
        """Steps before a fresh window's timed steps: at least the batches its workers prefetched."""
        if exp["how"] == TOGGLE:
            return self.config.warmup
        p = exp["params"]
        workers = int(p.get("num_workers") or 0)
        return max(self.config.warmup, int(p.get("prefetch_factor") or 2) * workers)

    def estimate_s(self, exp: dict) -> float:
        step_s, n = (self.step_us or 0.0) / 1e6, self.config.pairs
        per = self.warmup_for(exp) + self.steps
        if exp["how"] == TOGGLE:
            compiling = self.config.compile_guess_s if exp["kind"] == "compile" else 0.0
            return self._startup() + compiling + (self.config.lead + 2 * n * per) * step_s
        return 2 * n * (self._startup() + (self.config.lead + per) * step_s)

    # --- running --------------------------------------------------------------------------------------
    def run(self, experiments: list, not_tried: list) -> dict:
        """Every experiment, in order, within the budget; the report's `extra["verify"]`."""
        started = self.clock()
        budget = self.config.budget_for(SERVER_START_S + sum(self.estimate_s(e) for e in experiments))
        self.deadline = started + budget
        done = []
        stoppable = (self.finishing.interruptible() if self.finishing is not None
                     else contextlib.nullcontext())
        with open(self.folder / "children.log", "ab") as log:
            self.log = log
            try:
                with stoppable:
                    self._each(experiments, done, budget)
            except KeyboardInterrupt as exc:  # between experiments: what was measured stays
                self._stop_all()
                if self.finishing is not None and self.finishing.stopped:
                    raise  # a second signal: perfsleuth stops now, as said
                self.signal, self.exit_code = signal_name(exc), exit_code(exc)
            finally:  # with `finishing`, a signal from here on is held: the report is written
                pause_at("verify-close")
                for server in self.servers.values():
                    server.close()
        self._put_in_place(done)
        return self._summary(done, not_tried, budget, self.clock() - started)

    def _each(self, experiments: list, done: list, budget: float) -> None:
        """Each experiment in order, an entry in `done` for each, tried or not."""
        for i, exp in enumerate(experiments, 1):
            entry = self._entry(exp)
            done.append(entry)
            self._pending()
            if self.signal:
                entry.update(status="not tried", reason=f"interrupted ({self.signal}) before it started")
                continue
            left = self.deadline - self.clock()
            need = self.estimate_s(exp) + (0 if self.servers else SERVER_START_S)
            if need > left:
                entry.update(status="not tried", reason=f"the budget ({budget:.0f} s) would run out: "
                             f"needs about {need:.0f} s, {max(left, 0):.0f} s left (--verify-budget)")
                self.say(f"verify {i}/{len(experiments)}: {exp['variant']}: not tried: {entry['reason']}")
                continue
            self._experiment(i, len(experiments), exp, entry)

    def _pending(self) -> None:
        """A signal held before this experiment (`finishing`): it is not started."""
        if self.finishing is not None and self.finishing.pending and not self.signal:
            self.signal = signal_name(Interrupted(self.finishing.pending))
            self.exit_code = self.finishing.exit_code

    def _put_in_place(self, done: list) -> None:
        """The experiments' files, made in the keeper's private folder, go to the folder reserved
        for them (or a new one, named in the entries, when the script put files there meanwhile)."""
        if self.keeper is None:
            return
        try:
            placed = self.keeper.place(self.folder, self.place, self.base)
        except OSError as exc:
            self.say(f"verify: its files stay in {self.folder}: they could not be moved to "
                     f"{self.place} ({exc})")
            placed = self.folder
        if placed != self.place:
            for e in done:
                e["reason"] = e["reason"] and e["reason"].replace(str(self.place), str(placed))
        self.folder, self.log_path = placed, placed / "children.log"

    def _entry(self, exp: dict) -> dict:
        return {"fix": exp["fix"], "variant": exp["variant"], "rules": list(exp["rules"]), "how": exp["how"],
                "params": dict(exp["params"]), "status": "not tried", "reason": None, "windows": [],
                "verified": None, "applied": None, "processes": 0, "spent_s": 0.0}

    def _server(self, env: Optional[dict]) -> Server:
        key = tuple(sorted((env or {}).items()))
        if key not in self.servers:
            self.servers[key] = Server(self.log, env)
        return self.servers[key]

    def _experiment(self, i: int, n: int, exp: dict, entry: dict) -> None:
        label = f"verify {i}/{n}: {exp['variant']}"
        pairs = plural(self.config.pairs, "pair", "pairs")
        self.say(f"{label}: baseline and {exp['variant']} alternating, {pairs} ({exp['how']}) ...")
        t0 = self.clock()
        try:
            if exp["how"] == TOGGLE:
                self._job(exp, entry, ["A", "B"] * self.config.pairs, 0, label, env=None)
            else:
                env = exp["params"] if exp["kind"] == "env" else None
                for k in range(2 * self.config.pairs):
                    self._job(exp, entry, ["A" if k % 2 == 0 else "B"], k, label, env=env if k % 2 else None)
                    if entry["status"] == "failed":
                        break
            if entry["status"] != "failed":
                entry["status"] = "measured"
        except _BudgetSpent:
            self._stop_all()
            entry.update(status="stopped", reason=f"the budget ran out after {self._pairs(entry)} of "
                         f"{self.config.pairs} pairs (--verify-budget)")
        except KeyboardInterrupt as exc:
            self._stop_all()
            self.signal, self.exit_code = signal_name(exc), exit_code(exc)
            entry.update(status="stopped", reason=f"interrupted ({self.signal}) after {self._pairs(entry)} of "
                         f"{self.config.pairs} pairs")
        except ServerDied as exc:
            self._stop_all()
            entry.update(status="failed", reason=f"{exc}; see {self.log_path}")
        entry["spent_s"] = round(self.clock() - t0, 3)
        self._conclude(label, exp, entry)

    def _pairs(self, entry: dict) -> int:
        return len(verify_stats.pairs(entry["windows"]))

    def _stop_all(self) -> None:
        for server in self.servers.values():
            server.kill()
        self.servers = {}

    def _job(self, exp: dict, entry: dict, windows: list, first: int, label: str, env: Optional[dict]) -> None:
        self.jobs += 1
        entry["processes"] += 1
        results = self.folder / f"job-{self.jobs:03d}.jsonl"
        job = {"id": self.jobs, "target": self.target, "kind": exp["kind"], "params": exp["params"],
               "windows": windows, "first": first, "lead": self.config.lead, "warmup": self.warmup_for(exp),
               "steps": self.steps, "toggle": exp["how"] == TOGGLE, "results": str(results),
               "variant": exp["variant"]}
        server = self._server(env)
        reader = Results(results)
        server.submit(job)
        end, answered = None, None
        while answered is None:  # the answer comes once the job's process has ended: its file is complete
            answered = server.answer(timeout=0.2)
            for row in reader.new_rows():
                end = row if "end" in row else end
                if "window" in row:
                    self._window(row, entry, label)
            if answered is None and self.clock() > self.deadline:
                raise _BudgetSpent()
        end = end or {"end": "died", "message": f"the experiment's process ended with status "
                                                f"{answered.get('status')} before saying why; see {self.log_path}"}
        if end.get("startup_us"):
            self.startup_s.append(end["startup_us"] / 1e6)
        entry["applied"] = entry["applied"] or end.get("applied")
        if end["end"] == "done" and "B" in windows and not end.get("applied"):
            entry.update(status="failed", reason=f"nothing to apply it to in the script ({exp['variant']})")
        elif end["end"] != "done":
            self._ended(entry, end)

    def _ended(self, entry: dict, end: dict) -> None:
        """The script ended before its windows: failed, unless pairs were measured in one process."""
        message = end.get("message") or f"the script ended ({end['end']})"
        if end["end"] in ("finished", "exited") and "before its windows" in message:
            message += "; fewer steps per window: --verify-steps"
        if entry["how"] == TOGGLE and self._pairs(entry) >= 2 and end["end"] in ("finished", "exited"):
            entry["reason"] = f"{message}: {self._pairs(entry)} of {self.config.pairs} pairs"
            return
        entry.update(status="failed", reason=message)

    def _window(self, row: dict, entry: dict, label: str) -> None:
        entry["windows"].append(row)
        done = verify_stats.pairs(entry["windows"])
        if done and done[-1][1] is row:
            load = row.get("load") or [None, None]
            shown = f", load {load[-1]:.2f}" if isinstance(load[-1], (int, float)) else ""
            self.say(f"{label}: pair {len(done)}/{self.config.pairs}: {verify_stats.ratio(done[-1]):.2f}x{shown}")

    def _conclude(self, label: str, exp: dict, entry: dict) -> None:
        forecast = next((v for v in exp["forecast"].values() if v), None)
        v = verify_stats.measured(entry["windows"], variant=exp["variant"], how=exp["how"], steps=self.steps,
                                  forecast=forecast, step_us=self.step_us,
                                  peak=bool(exp.get("peak")))
        if v is not None and v["pairs"] >= min(2, self.config.pairs) and entry["status"] != "failed":
            entry["verified"] = v
        if entry["status"] == "failed":
            self.say(f"{label}: failed: {entry['reason']}")
        elif entry["verified"]:
            v = entry["verified"]
            self.say(f"{label}: {v['speedup']:.2f}x ({v['low']:.2f}-{v['high']:.2f}x, {v['pairs']} pairs): "
                     f"{v['outcome']}" + (f"; {peak_text(v)}" if peak_text(v) else "")
                     + (f"; {entry['reason']}" if entry["reason"] else ""))
        else:
            self.say(f"{label}: {entry['status']}: {entry['reason']}")

    # --- the report's extra["verify"] -------------------------------------------------------------
    def _summary(self, done: list, not_tried: list, budget: float, spent: float) -> dict:
        experiments = []
        for e in done:
            e["windows"] = [{"window": w["window"], "variant": w["variant"],
                             "label": "baseline" if w["variant"] == "A" else e["variant"],
                             "steps": len(w.get("step_us") or []),
                             "mean_us": round(verify_stats.window_mean(w) or 0.0, 3), "warmup_us": w.get("warmup_us"),
                             "load": w.get("load"), "others_cores": w.get("others_cores"),
                             "peak": w.get("peak")} for w in e["windows"]]
            experiments.append(e)
        skipped = [{"fix": x["fix"], "variant": None, "rules": [x["rule"]], "how": None, "status": "not tried",
                    "reason": x["reason"], "verified": None} for x in not_tried]
        fresh = sum(e["processes"] for e in experiments if e["how"] == FRESH)
        one = sum(e["processes"] for e in experiments if e["how"] == TOGGLE)
        startup_s = max(self.startup_s) if self.startup_s else None
        cost = cost_sentence(one, fresh, spent, startup_s, self.log_path)
        return {"budget_s": round(budget, 1), "spent_s": round(spent, 1), "pairs": self.config.pairs,
                "steps_per_window": self.steps, "folder": str(self.folder), "log": str(self.log_path),
                "interrupted": self.signal, "experiments": experiments + skipped, "cost": cost,
                "warning": busy_warning(experiments)}


def plan_for(report, config: VerifyConfig) -> tuple:
    return verify_fixes.plan(report.findings, context_of(report, config))


def verify_report(report, target, folder: Path, config: VerifyConfig, say: Callable[[str], None],
                  finishing=None, keeper=None) -> Optional[int]:
    """Measure the report's fixes; the report gets them (findings re-rated, `extra["verify"]`). Returns the
    exit code of an interruption (130, 143, 129), else None. `finishing`, `keeper`: see Verifier."""
    experiments, not_tried = plan_for(report, config)
    if not experiments:
        report.extra["verify"] = {"budget_s": 0, "spent_s": 0, "experiments": [
            {"fix": x["fix"], "variant": None, "rules": [x["rule"]], "how": None, "status": "not tried",
             "reason": x["reason"], "verified": None} for x in not_tried],
            "cost": "nothing to try: no finding has a fix perfsleuth can apply at run time"}
        say("verify: nothing to try: no finding has a fix perfsleuth can apply without a code change")
        return None
    try:
        v = Verifier(target, folder, config, step_us_of(report), say, finishing=finishing,
                     keeper=keeper)
    except OSError as exc:  # the output folder went away, or cannot be written: perfsleuth's problem, said
        say(f"verify: not run: cannot make its folder in {folder} ({exc.strerror or exc})")
        return None
    extra = v.run(experiments, not_tried)
    report.findings[:] = apply_verified(report.findings, verified_by_rule(extra, report.findings))
    report.extra["verify"] = extra
    pause_at("verify-recheck")
    _recheck(report)
    say(f"verify: {extra['cost']}")
    if extra["warning"]:
        say(f"verify: {extra['warning']}")
    return v.exit_code


def _recheck(report) -> None:
    """The verdict checked again against the measured numbers (api.recheck); the findings keep their
    measurements and order if that cannot be done."""
    from ..api import recheck

    try:
        recheck(report)
    except Exception as exc:  # never costs the measurements
        log.warning("the verdict could not be checked again after --verify: %s: %s", type(exc).__name__, exc)


def under_torchrun() -> bool:
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False
