"""The fixes whose forecasts are checked against a measurement (benchmarks/fix_verification.py,
tests/e2e/test_accuracy.py): the CPU programs with the flag of their fix, and the GPU before/after pairs
of the trace simulator.

A forecast is right when it lies within 0.67x-1.5x of the measured speed-up; a fix that does not
help (measured below 1.1x) must be forecast at 1.2x or less.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "fixtures" / "scripts" / "cpu"
RECORDED = ROOT / "fixtures" / "accuracy"  # before traces and measurements, for tests/e2e/test_accuracy.py
LOW, HIGH = 0.67, 1.5
NO_HELP, NO_HELP_FORECAST = 1.1, 1.2


@dataclass(frozen=True)
class CpuCase:
    name: str
    script: str
    before: tuple
    after: tuple
    rule: str  # the finding whose fix this is (on this branch or after issue 15's rules)
    model: str
    fix: str  # what changes, in words
    params: dict = field(default_factory=dict)
    steps: int = 40  # iterations per A/B run (the first WARMUP are skipped)
    active: int = 8  # profiled steps of the "before" run
    shapes: bool = True  # record input shapes (off for programs of thousands of ops: smaller fixtures)


CPU_CASES = (
    CpuCase("python_dataset_w1", "python_dataset.py", (), ("--workers", "1"), "num-workers", "dataloader-workers",
            "num_workers 0 -> 1, Python-heavy Dataset", {"workers": 1}),
    CpuCase("python_dataset_w2", "python_dataset.py", (), ("--workers", "2"), "num-workers", "dataloader-workers",
            "num_workers 0 -> 2, Python-heavy Dataset", {"workers": 2}),
    CpuCase("python_dataset_w1_w2", "python_dataset.py", ("--workers", "1"), ("--workers", "2"), "dataloader-slow",
            "dataloader-workers", "starved loader, CPU-bound: num_workers 1 -> 2", {"workers": 2}),
    CpuCase("few_workers_w2", "few_workers.py", (), ("--workers", "2"), "dataloader-slow", "dataloader-workers",
            "starved loader, waiting on I/O: num_workers 1 -> 2", {"workers": 2}),
    CpuCase("zero_grad_none", "many_params.py", ("--zero-grad-fill",), (), "zero-grad", "zero-grad-none",
            "zero_grad(set_to_none=False) -> True, 194 parameters", active=3, shapes=False),
    CpuCase("foreach_adam", "many_params.py", (), ("--foreach",), "fused-optimizer", "foreach-optimizer",
            "Adam(foreach=False) -> foreach=True, 194 parameters", active=3, shapes=False),
    CpuCase("threads_1", "oversubscribed.py", (), ("--threads", "1"), "cpu-threads", "fewer-threads",
            "torch threads 2 -> 1 beside 2 loader workers on 2 cores"),
    CpuCase("tiny_ops_vectorized", "tiny_ops.py", (), ("--vectorized",), "tiny-ops", "batched-ops",
            "~320 scalar ops in a Python loop -> whole-tensor ops", active=4, shapes=False),
    CpuCase("module_loop_batched", "module_loop.py", (), ("--batched",), "tiny-ops", "batched-ops",
            "96 Linear(8, 8) per layer in a loop -> one batched matmul", active=3, shapes=False),
    CpuCase("per_sample_loss_vectorized", "per_sample_loss.py", (), ("--vectorized",), "tiny-ops", "batched-ops",
            "cross_entropy of 64 samples one at a time -> one call", active=4, shapes=False),
)


def judge(forecast, measured) -> bool:
    """Within 0.67x-1.5x of the measurement; a fix that did not help forecast at 1.2x or less."""
    if forecast is None or not measured:
        return False
    if measured < NO_HELP and forecast > NO_HELP_FORECAST:
        return False
    return LOW <= forecast / measured <= HIGH


def gpu_pair(name: str, workdir: Path) -> dict:
    """One simulator pair: the "before" scenario analysed (its finding's forecast, else the model's),
    the "after" one measured; measured speed-up = median step before / median step after."""
    import sys

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from fixtures.synth import SCENARIOS
    from fixtures.synth.after import PAIRS
    from fixtures.synth.kineto import write_gz
    from perfsleuth.api import analyze_file, forecast_fix
    from perfsleuth.config import Config

    before, rule, model, after = PAIRS[name]
    config = Config(cpus=4)  # dataloader_bound_workers: the simulated workers have a core each
    paths = workdir / f"{before}.json.gz", workdir / f"{name}.json.gz"
    write_gz(SCENARIOS[before](), paths[0])
    write_gz(after(), paths[1])
    rb, ra = (analyze_file(p, config).to_dict() for p in paths)
    finding = next((f for f in rb["findings"] if f["rule"] == rule), None)
    forecast = finding["forecast"] if finding else forecast_fix(paths[0], model, config=config)
    measured = rb["summary"]["step_time_us"]["median"] / ra["summary"]["step_time_us"]["median"]
    return {"name": name, "before": before, "rule": rule, "model": model, "fired": finding is not None,
            "forecast": forecast, "measured": round(measured, 3),
            "ok": judge(forecast.get("speedup"), measured)}
