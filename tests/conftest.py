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
# fixtures/ (synthetic trace generator, scenario scripts) and tests/ helpers import from the checkout.
for p in (ROOT, ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

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
    """Print the accuracy table of the bottleneck zoo when tests/test_accuracy.py ran."""
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
