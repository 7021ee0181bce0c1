import sys
from pathlib import Path

import pytest

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
