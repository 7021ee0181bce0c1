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

ROOT = Path(__file__).resolve().parent.parent
# fixtures/ (synthetic trace generator, scenario scripts) and tests/ helpers import from the checkout.
for p in (ROOT, ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

SHARED_TRACES = ROOT.parent / "shared" / "traces"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    assert SHARED_TRACES.is_dir(), f"real traces expected at {SHARED_TRACES} (../shared/traces beside the checkout)"
    return SHARED_TRACES


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
