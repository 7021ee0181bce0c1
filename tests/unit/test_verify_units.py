"""`run --verify` without running anything: the statistics of pairs of windows, the re-rating of findings
from a measurement (engine/measured.py), the registry's plan, the defaults. Exact numbers on hand-built
windows and findings; tests/e2e/test_verify.py runs real scripts."""

import pytest
from click.testing import CliRunner
from perfsleuth.cli.main import main
from perfsleuth.verify.config import VerifyConfig
from perfsleuth.verify.fixes import CODE_CHANGE, FRESH, TOGGLE, Context, forecast_workers, plan
from perfsleuth.verify.stats import measured, outcome, pairs
from perfsleuth.engine.evaluate import order, rate
from perfsleuth.engine.measured import NO_GAIN_NOTE, SLOWER_NOTE, apply_verified, rated
from perfsleuth.errors import UsageError


def window(i, variant, *steps, warmup=100.0, load=(1.0, 1.5)):
    return {"window": i, "variant": variant, "step_us": list(steps), "warmup_us": warmup, "load": list(load)}


def test_pairs_are_each_baseline_window_with_the_variant_window_after_it():
    ws = [window(0, "A", 10, 10), window(1, "B", 5, 5), window(2, "A", 12), window(3, "B", 6, 6), window(4, "A", 9)]
    got = pairs(ws)
    assert [(a["window"], b["window"]) for a, b in got] == [(0, 1), (2, 3)]  # window 4 has no B yet


def test_the_measurement_is_the_median_of_the_pair_ratios_with_their_extremes():
    ws = [window(0, "A", 10, 14, load=(1.0, 1.1)), window(1, "B", 8, 8, load=(1.2, 1.3)),
          window(2, "A", 12, 12, warmup=200.0), window(3, "B", 6, 6, warmup=900.0),
          window(4, "A", 11, 11), window(5, "B", 10, 10, warmup=300.0)]
    v = measured(ws, variant="num_workers=2", how=FRESH, steps=2, forecast=3.0, step_us=1000.0)
    assert v["pair_ratios"] == [1.5, 2.0, 1.1]  # 12/8, 12/6, 11/10
    assert (v["speedup"], v["low"], v["high"], v["pairs"]) == (1.5, 1.1, 2.0, 3)
    assert v["outcome"] == "faster" and v["note"] == ""
    assert v["forecast_ratio"] == 2.0  # 3.0 forecast / 1.5 measured
    assert v["saving_us"] == pytest.approx(1000.0 * (1 - 1 / 1.5), abs=1e-3)
    assert v["load"] == [[1.0, 1.3], [1.0, 1.5], [1.0, 1.5]]  # before A, after B
    assert v["warmup_us"] == {"baseline": 100.0, "variant": 300.0, "first_variant": 100.0}
    assert v["step_us"] == {"baseline": 12.0, "variant": 8.0}
    assert (v["variant"], v["how"], v["steps_per_window"]) == ("num_workers=2", FRESH, 2)


@pytest.mark.parametrize("ratios, expected", [
    ([1.3, 1.4, 1.5], "faster"),
    ([0.9, 1.1, 1.2], "noise"),  # the spread covers 1.0
    ([1.01, 1.02, 1.015], "no gain"),
    ([0.99, 0.98, 0.985], "no gain"),
    ([0.8, 0.85, 0.9], "slower"),
])
def test_outcome(ratios, expected):
    assert outcome(ratios)[0] == expected


def test_noise_says_so():
    assert outcome([0.9, 1.1, 1.2]) == ("noise", "no difference beyond noise")


def finding(rule, severity="high", forecast=None, ceiling=0.0):
    return {"rule": rule, "severity": severity, "severity_from": "forecast",
            "forecast": {"speedup": forecast, "saving_us": None if forecast is None else 100.0 * (1 - 1 / forecast)},
            "ceiling": {"saving_us": ceiling}}


def verified(speedup, outcome_="faster", saving=None):
    return {"speedup": speedup, "low": speedup, "high": speedup, "outcome": outcome_, "note": "",
            "saving_us": saving if saving is not None else 100.0 * (1 - 1 / speedup)}


def test_a_measured_gain_sets_the_severity_and_the_rank():
    findings = [finding("num-workers", "high", forecast=1.6), finding("fused-optimizer", "low", forecast=1.1)]
    out = apply_verified(findings, {"fused-optimizer": verified(2.0)})
    assert [f["rule"] for f in out] == ["fused-optimizer", "num-workers"]  # 50 µs measured > 37.5 µs forecast
    fo = out[0]
    assert fo["severity"] == "high" and fo["severity_from"] == "measured"
    assert fo["verified"]["speedup"] == 2.0
    assert out[1]["severity"] == "high" and "verified" not in out[1]


def test_rank_follows_the_saving_measured_else_forecast():
    findings = [finding("a", forecast=2.0), finding("b", forecast=1.2), finding("c", ceiling=500.0),
                finding("d", ceiling=900.0)]
    out = apply_verified(findings, {"b": verified(3.0)})  # b: 66.7 µs measured, a: 50 µs forecast
    assert [f["rule"] for f in out] == ["b", "a", "d", "c"]  # without a number: by ceiling


@pytest.mark.parametrize("speedup, outcome_, severity, note", [
    (1.02, "no gain", "low", NO_GAIN_NOTE),
    (1.0, "no gain", "low", NO_GAIN_NOTE),
    (0.969, "slower", "low", SLOWER_NOTE),
    (0.5, "slower", "low", SLOWER_NOTE),
    (1.03, "faster", "low", ""),
    (1.05, "faster", "medium", ""),
    (1.25, "faster", "high", ""),
    (1.6, "noise", "medium", "no difference beyond noise"),  # inconclusive: no forecast, at most medium
    (1.01, "noise", "low", NO_GAIN_NOTE + " (no difference beyond noise)"),
])
def test_demotion_and_notes(speedup, outcome_, severity, note):
    assert rated(verified(speedup, outcome_)) == (severity, note)


@pytest.mark.parametrize("speedup, outcome_, forecast, severity", [
    (1.6, "noise", 1.4, "high"),  # the forecast says as much: high stands
    (1.6, "noise", 1.1, "medium"),  # an inconclusive measurement rates no higher than the forecast
    (1.0507, "noise", 1.002, "low"),  # unseen imagenet-w0: foreach measured 0.89-1.21x, forecast 1.002x
    (1.6, "faster", 1.002, "high"),  # a conclusive measurement decides alone
    (1.3, "noise", None, "medium"),
])
def test_an_inconclusive_measurement_rates_no_higher_than_the_forecast(speedup, outcome_, forecast, severity):
    fc = {"speedup": forecast, "kind": "forecast"} if forecast else None
    assert rated(verified(speedup, outcome_), fc)[0] == severity
    f = {"rule": "x", "forecast": {"speedup": forecast, "kind": "forecast" if forecast else "none"},
         "verified": verified(speedup, outcome_)}
    assert rate(f)["severity"] == severity and f["severity_from"] == "measured"


def test_an_inconclusive_measurement_ranks_no_higher_than_its_forecast():
    """The unseen dcgan run: foreach measured 1.09x (0.93-1.20x) against a 1.02x forecast (low) led the report
    above persistent workers, measured 1.08x (noise) against a 1.075x forecast (medium)."""
    foreach = {"rule": "fused-optimizer", "forecast": {"speedup": 1.02, "saving_us": 1960.0, "kind": "forecast"},
               "verified": {**verified(1.09, "noise", saving=8300.0), "low": 0.93, "high": 1.20}}
    workers = {"rule": "dataloader-slow", "forecast": {"speedup": 1.075, "saving_us": 7000.0, "kind": "forecast"},
               "verified": {**verified(1.085, "noise", saving=7800.0), "low": 0.95, "high": 1.3}}
    out = order([foreach, workers])
    assert [f["rule"] for f in out] == ["dataloader-slow", "fused-optimizer"]
    assert [f["severity"] for f in out] == ["medium", "low"]
    conclusive = {**foreach, "verified": {**foreach["verified"], "outcome": "faster", "low": 1.05}}
    assert [f["rule"] for f in order([conclusive, workers])] == ["fused-optimizer", "dataloader-slow"]


def test_the_demoted_finding_carries_the_note():
    [f] = apply_verified([finding("num-workers", "high", forecast=1.66)], {"num-workers": verified(0.63, "slower")})
    assert f["severity"] == "low" and f["verified"]["note"] == "tried: slower on this machine; don't apply"


def num_workers_finding(n=2):
    return {"rule": "num-workers", "forecast": {"speedup": 1.4, "assumptions": {
        "workers": f"num_workers={n} (was 0): min(8, cores)"}}}


def test_forecast_workers_reads_the_forecasts_assumption():
    assert forecast_workers(num_workers_finding(3)) == 3
    assert forecast_workers({"rule": "num-workers", "forecast": {"kind": "none"}}) is None


def test_plan_on_a_cpu_run():
    ctx = Context(gpu=False, loaders=[{"num_workers": 0, "pin_memory": False}], cores=2.0, free_cores=2.0,
                  torch_threads=1)
    findings = [num_workers_finding(2), {"rule": "item-sync"}, {"rule": "pin-memory"},
                {"rule": "fused-optimizer", "forecast": {"speedup": 1.2}}, {"rule": "cpu-threads"},
                {"rule": "tiny-ops"}]
    experiments, not_tried = plan(findings, ctx)
    assert [(e["variant"], e["how"], e["rules"]) for e in experiments] == [
        ("num_workers=2", FRESH, ["num-workers"]),  # the forecast's count
        ("num_workers=1", FRESH, ["num-workers"]),  # the count that fits 2 free cores beside the main process
        ("optimizer foreach=True", TOGGLE, ["fused-optimizer"])]
    reasons = {(x["rule"], x["reason"]) for x in not_tried}
    assert ("item-sync", CODE_CHANGE) in reasons
    assert ("pin-memory", CODE_CHANGE) in reasons  # pin_memory is never tried, nor named, on a CPU run
    assert ("cpu-threads", "set_num_threads: torch already runs one intra-op thread") in reasons
    assert ("tiny-ops", "needs a code change: not tried (--verify-compile tries torch.compile(top module))") in reasons
    assert not any("pin_memory" in r or "cudnn" in r or "autocast" in r for _, r in reasons)


def test_plan_with_a_busy_core_and_on_a_gpu():
    ctx = Context(gpu=True, loaders=[{"num_workers": 0}], cores=2.0, free_cores=1.0, torch_threads=4,
                  compile=True)
    findings = [num_workers_finding(2), {"rule": "cpu-threads"}, {"rule": "amp"}, {"rule": "tiny-ops"},
                {"rule": "cuda-graphs"}]
    experiments, _ = plan(findings, ctx)
    assert [e["variant"] for e in experiments] == [
        "num_workers=2", "num_workers=1", "torch.set_num_threads(1)",
        'torch.set_float32_matmul_precision("high")', "autocast around the top module's forward",
        "OMP_NUM_THREADS=1 at start", "torch.compile(top module)"]  # tier 2 last, in the findings' order
    assert experiments[6]["rules"] == ["tiny-ops", "cuda-graphs"]  # one experiment for both


def test_defaults():
    c = VerifyConfig()
    assert c.pairs == 3
    assert c.steps_for(10_000.0) == 40 and c.steps_for(100_000.0) == 10 and c.steps_for(1e6) == 5
    assert c.steps_for(None) == 5 and VerifyConfig(steps=7).steps_for(10_000.0) == 7
    assert c.budget_for(10.0) == 60.0 and c.budget_for(100.0) == 150.0 and c.budget_for(1000.0) == 600.0
    assert VerifyConfig(budget_s=5).budget_for(1000.0) == 5.0
    with pytest.raises(UsageError):
        VerifyConfig(pairs=0)


def test_verify_options_need_verify(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("pass\n")
    result = CliRunner().invoke(main, ["run", "--verify-pairs", "2", str(script)])
    assert result.exit_code == 2
    assert result.stderr.strip() == "perfsleuth: error: --verify-pairs needs --verify"
