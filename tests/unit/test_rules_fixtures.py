"""The rules against the project's fixture traces with known answers (fixtures/cases.toml for the
synthetic GPU scenarios; the CPU traces recorded from fixtures/scripts/cpu)."""

from pathlib import Path

import pytest
import tomllib
from perfsleuth.api import analyze_file

ROOT = Path(__file__).resolve().parents[2]
CASES = tomllib.loads((ROOT / "fixtures" / "cases.toml").read_text())["case"]


def _fired(path) -> dict:
    return {f["rule"]: f for f in analyze_file(ROOT / path).to_dict()["findings"]}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_cases_toml(case):
    fired = _fired(case["trace"])
    assert set(case["must_fire"]) <= set(fired)
    assert not set(case["must_not_fire"]) & set(fired)
    if "source_line" in case:
        file, line = case["source_line"].rsplit(":", 1)
        locs = [loc for f in fired.values() for loc in f["locations"]]
        assert any(loc["file"].endswith(Path(file).name) and loc["line"] == int(line) for loc in locs), locs


@pytest.mark.parametrize("name, must_fire, must_not_fire", [
    ("dataloader_starved", {"num-workers"}, {"dataloader-slow", "item-sync"}),
    ("few_workers", {"dataloader-slow"}, {"num-workers", "item-sync"}),
    ("item_every_step", set(), {"item-sync"}),  # CPU only: .item() waits for nothing
])
def test_cpu_fixture_traces(name, must_fire, must_not_fire):
    fired = _fired(f"fixtures/traces/cpu/{name}.pt.trace.json.gz")
    assert must_fire <= set(fired) and not must_not_fire & set(fired)
