"""Forecasts in the engine and the CLI: the rule -> model link is data (validated at load), findings are
ordered by forecast saving with severity breaking ties, the combined forecast replays the top fixes
together, `--cpus` reaches the model, and what `run` recorded about the machine is read back."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import ROOT
from perfsleuth.analysis.machine import machine_facts
from perfsleuth.cli.main import main
from perfsleuth.engine.catalog import RuleError, load_catalog, parse_rule_file
from perfsleuth.engine.evaluate import finding_order
from rule_files import RULE


def test_every_built_in_rule_names_a_known_model_or_none():
    rules = {r.slug: r.forecast for r in load_catalog()}
    assert rules["num-workers"] == "dataloader-workers" and rules["dataloader-slow"] == "dataloader-sample-work"
    assert rules["item-sync"] == "no-scalar-reads" and rules["amp"] == "amp"
    assert rules["exposed-communication"] == "" and rules["cudnn-benchmark"] == ""  # no forecast


def test_a_rule_naming_an_unknown_model_is_a_load_error():
    text = RULE.replace('saving_basis = "half the host time"', 'saving_basis = "half the host time"\nforecast = "magic"')
    with pytest.raises(RuleError, match="forecast names unknown model 'magic'"):
        parse_rule_file(text, "x.toml")
    (rule,) = parse_rule_file(RULE.replace('saving_basis = "half the host time"',
                                           'saving_basis = "half the host time"\nforecast = "cuda-graphs"'), "x.toml")
    assert rule.forecast == "cuda-graphs"


def finding(rule, severity, ceiling, forecast=None):
    return {"rule": rule, "severity": severity, "ceiling": {"saving_us": ceiling},
            "forecast": {"saving_us": forecast, "speedup": None if forecast is None else 1.5}}


def test_findings_are_ordered_by_forecast_saving_then_the_ceiling():
    """Forecast savings first (severity breaks ties), then findings without a forecast by their ceiling."""
    found = [finding("a", "low", 900.0, 100.0), finding("b", "high", 50.0, 300.0), finding("c", "medium", 200.0),
             finding("d", "high", 200.0), finding("e", "low", 10.0, 300.0)]
    assert [f["rule"] for f in sorted(found, key=finding_order)] == ["b", "e", "a", "d", "c"]


def analyze_json(tmp_path, *args) -> dict:
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["analyze", *args, "--json", str(out), "--force"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def test_the_report_holds_the_replay_check_and_the_combined_forecast(tmp_path):
    report = analyze_json(tmp_path, str(ROOT / "fixtures/traces/gpu/sync_bound.json.gz"))
    assert report["forecast"]["replay"]["self_check_error"] == 0.0
    combined = report["forecast"]["combined"]
    assert combined["rules"] == [f["rule"] for f in report["findings"][:2]]
    singles = [f["forecast"]["saving_us"] for f in report["findings"][:2]]
    # together, not added up (steady steps are measured from the first step's end: within 1 %)
    assert 0.99 * max(singles) <= combined["saving_us"] < sum(singles)


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_cpus_reaches_the_worker_model_and_is_stated(tmp_path):
    trace = str(ROOT / "fixtures/traces/gpu/dataloader_bound.json.gz")
    two, eight = (analyze_json(tmp_path, trace, "--cpus", n)["findings"][0]["forecast"] for n in ("2", "8"))
    assert two["assumptions"]["cores"] == "2 (--cpus)" and two["assumptions"]["workers"].startswith("num_workers=2")
    assert eight["assumptions"]["workers"].startswith("num_workers=8") and eight["speedup"] > two["speedup"]
    unknown = analyze_json(tmp_path, trace)["findings"][0]["forecast"]
    assert "pass --cpus N" in unknown["assumptions"]["cores"]


def test_the_terminal_says_forecast_and_shows_the_range(tmp_path):
    result = CliRunner().invoke(main, ["analyze", str(ROOT / "fixtures/traces/gpu/host_bound.json.gz")])
    assert result.exit_code == 0
    assert "cuda-graphs: " in result.output and "(est. " in result.output and "×)" in result.output
    assert "est. = forecast" in result.output and "up to" not in result.output


def test_machine_facts_from_run_metadata_and_from_cpus():
    meta = {"host": {"cpu_count": 8, "affinity_cpus": 4, "torch_threads": 2},
            "cpu": {"probe": {"threads": [1, 2, 4], "cores": [1.0, 1.6, 2.0], "seconds": 0.1},
                    "window": {"wall_s": 2.0, "main_cpu_s": 0.9, "loader_wall_s": 1.0, "loader_cpu_s": 0.4,
                               "workers": 0, "worker_cpu_s": 0}}}
    m = machine_facts(meta)
    assert m.cores == 4 and m.torch_threads == 2
    assert m.capacity(2) == 1.6 and m.capacity(3) == 1.8 and m.capacity(16) == 2.0  # flat beyond the probe
    assert m.main_share == pytest.approx(0.5) and m.loader_cpu_share == pytest.approx(0.4)
    assert m.speed(2) == pytest.approx(0.8 * 0.5)  # per thread, on the main thread's recorded scale
    idle = machine_facts(meta, cpus=2)
    assert idle.capacity(3) == 2 and idle.speed(4) == 0.5 and idle.main_share is None
    assert machine_facts({}).capacity(5) == 5 and "unknown" in machine_facts({}).assumptions["cores"]
