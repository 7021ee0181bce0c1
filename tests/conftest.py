import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# CI runs the property tests with a fixed seed sequence (a landing must not depend on luck); locally
# they explore new examples on every run.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _not_on_ci(monkeypatch):
    """`perfsleuth run` times more unprofiled steps when the CI variable is set (RunConfig.measure_ci): the tests
    run the same on CI and off it, and those of that default set CI themselves."""
    monkeypatch.delenv("CI", raising=False)


ROOT = Path(__file__).resolve().parent.parent
# fixtures/ (synthetic trace generator, scenario scripts) and tests/helpers/ (the builders and corpora tests
# share) import from the checkout.
for p in (ROOT, ROOT / "tests" / "helpers"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

# Tests live by kind (tests/README.md): unit/ and cli/ are the inner loop; e2e/ (real torch runs, --verify,
# wheels, the action, a browser, Dask, compile, fuzzing, the bad-input corpus through fresh processes) is
# marked `slow`, so `pytest -m "not slow"` leaves it out. The marker is registered in pyproject.toml
# (--strict-markers refuses an unregistered one).
SLOW_FOLDERS = ("e2e",)


def pytest_collection_modifyitems(config, items):
    tests = ROOT / "tests"
    for item in items:
        parts = item.path.relative_to(tests).parts if item.path.is_relative_to(tests) else ()
        if parts and parts[0] in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)

# The real GPU and CPU traces of other projects (HTA, TraceLens) the tests read: in the repository, so that a
# plain clone runs every test (fixtures/traces/real/README.md gives each file's source, licence and device).
REAL_TRACES = ROOT / "fixtures" / "traces" / "real"


@pytest.fixture(scope="session")
def real_traces() -> Path:
    return REAL_TRACES


@pytest.fixture(scope="session")
def shared_traces(real_traces) -> Path:
    """The old name of `real_traces` (the traces once lived in a folder beside the checkout), kept for tests written before
    they moved into the repository; new tests use `real_traces`."""
    return real_traces


def pytest_terminal_summary(terminalreporter):
    """Print the accuracy table of the bottleneck zoo when tests/e2e/test_accuracy.py ran."""
    mod = sys.modules.get("test_accuracy")
    rows = getattr(mod, "RESULTS", None)
    if not rows:
        return
    tr = terminalreporter
    tr.section("perfsleuth accuracy (fixtures/cases.toml)")
    tr.write_line(f"{'case':<24}{'expected':<22}{'got':<22}{'ok':<4}findings")
    for name, expected, got, fired, ok in rows:
        tr.write_line(f"{name:<24}{expected:<22}{got:<22}{'yes' if ok else 'NO':<4}{', '.join(fired) or '-'}")
    good = sum(1 for r in rows if r[4])
    tr.write_line(f"accuracy: {good}/{len(rows)} cases fully right")
