"""benchmarks/stages.py, the stage timer docs/perf.md's stage tables come from, still drives this version:
its runner reaches into the loader (document.decode_events, model.build_trace) and wraps the functions
named in STAGES, so a rename would silently time nothing. One real run on a small trace; the times are
not judged (that is the benchmark's job), only that every stage was found and the run went through."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import stages  # noqa: E402

SMALL = ROOT / "fixtures" / "traces" / "real" / "a100_alexnet_small.json.gz"


def test_every_stage_is_found_and_timed_on_a_real_trace():
    out = stages.run_once(str(SMALL), 1, True)
    assert out["missing"] == []
    for stage in ("steps (steps, steady state)", "attribution", "facts", "rules (conditions, templates)"):
        assert out["stages"][stage] > 0, stage
    # the parts add up: the analysis is the stages plus the glue between them
    assert sum(out["stages"].values()) <= out["analysis"] + out["report"] + 1e-6
    assert out["total"] >= out["imports"] + out["read+decode"] + out["analysis"]
