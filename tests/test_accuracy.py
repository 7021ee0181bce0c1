"""The bottleneck zoo: every case in fixtures/cases.toml, analysed by the real CLI, must get its
expected verdict, fire the rules it must, stay silent on the rules it must not, and point at the
expected source line. The accuracy table is printed at the end of the test run (conftest.py)."""

import json

import pytest
import tomllib
from click.testing import CliRunner
from conftest import ROOT
from perfsleuth.commands.cli import main
from perfsleuth.engine.catalog import load_catalog

CASES = tomllib.loads((ROOT / "fixtures" / "cases.toml").read_text())["case"]
RESULTS: list = []  # (case, expected verdict, got verdict, fired rules, ok) for the summary table


def test_manifest_is_complete():
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)) == 12
    slugs = {r.slug for r in load_catalog()}
    for case in CASES:
        assert (ROOT / case["trace"]).is_file(), case["trace"]
        unknown = (set(case["must_fire"]) | set(case["must_not_fire"])) - slugs
        assert not unknown, f"{case['name']}: unknown rule slugs {unknown}"


def _locations(report: dict, slug: str) -> list[str]:
    for f in report["findings"]:
        if f["rule"] == slug:
            return [f"{loc['file']}:{loc['line']}" for loc in f.get("locations") or []]
    return []


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case, tmp_path):
    out = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["analyze", str(ROOT / case["trace"]), "--json", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    fired = [f["rule"] for f in report["findings"]]
    problems = []
    if report["verdict"] != case["expected_verdict"]:
        problems.append(f"verdict {report['verdict']} != {case['expected_verdict']}")
    problems += [f"{r} did not fire" for r in case["must_fire"] if r not in fired]
    problems += [f"{r} fired" for r in case["must_not_fire"] if r in fired]
    if "source_line" in case:
        locs = _locations(report, case["must_fire"][0])
        if not any(case["source_line"].endswith(loc) or loc.endswith(case["source_line"]) for loc in locs):
            problems.append(f"source line {case['source_line']} not among {locs}")
    RESULTS.append((case["name"], case["expected_verdict"], report["verdict"], fired, not problems))
    assert not problems, f"{case['name']}: " + "; ".join(problems)
