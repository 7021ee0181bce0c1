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
    (0.86, "noise", "low", NO_GAIN_NOTE + " (no difference beyond noise)"),  # not "don't apply"
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
        ("num_workers=1", FRESH, ["num-workers"]),  # then 1 up to the cores and one above (issue 40)
        ("num_workers=3", FRESH, ["num-workers"]),
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
        "num_workers=2", "num_workers=1", "num_workers=3", "torch.set_num_threads(1)",
        'torch.set_float32_matmul_precision("high")', "autocast around the top module's forward",
        "OMP_NUM_THREADS=1 at start", "torch.compile(top module)"]  # tier 2 last, in the findings' order
    assert experiments[7]["rules"] == ["tiny-ops", "cuda-graphs"]  # one experiment for both


def test_the_sweep_tries_what_a_person_tuning_it_tries():
    """Issue 40: workers from 1 to the cores and one above, the forecast's count first (the budget may end the
    sweep); on many cores the powers of two, the free cores and one above; threads: what fits and one below."""
    def variants(**kw):
        findings = [num_workers_finding(kw.pop("forecast", 2)), {"rule": "cpu-threads"}]
        return [e["variant"] for e in plan(findings, Context(**kw))[0]]

    assert variants(loaders=[{"num_workers": 0}], cores=4.0, free_cores=3.9, torch_threads=8, forecast=4) == [
        "num_workers=4", "num_workers=1", "num_workers=2", "num_workers=3", "num_workers=5",
        "torch.set_num_threads(4)", "torch.set_num_threads(3)", "OMP_NUM_THREADS=4 at start"]
    assert variants(loaders=[{"num_workers": 0}], cores=16.0, free_cores=11.6, torch_threads=1, forecast=8) == [
        "num_workers=8", "num_workers=1", "num_workers=2", "num_workers=4", "num_workers=9"]
    # the count now is not tried again; 1.99 free cores are 2 (not 1) for the threads that fit
    assert variants(loaders=[{"num_workers": 2}], cores=2.0, free_cores=1.99, torch_threads=4, forecast=3) == [
        "num_workers=3", "num_workers=1", "torch.set_num_threads(1)", "OMP_NUM_THREADS=1 at start"]
    assert variants(loaders=[{"num_workers": 0}], cores=None, free_cores=None, torch_threads=None, forecast=4) == [
        "num_workers=4"]


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


def sweep_experiment(n, ratios, status="measured"):
    """An experiment of the num_workers sweep whose pairs have these ratios (baseline 10 µs windows)."""
    ws = []
    for k, r in enumerate(ratios):
        ws += [window(2 * k, "A", 10.0), window(2 * k + 1, "B", 10.0 / r)]
    v = measured(ws, variant=f"num_workers={n}", how=FRESH, steps=1, forecast=1.2, step_us=1000.0) if ws else None
    return {"fix": "num_workers", "variant": f"num_workers={n}", "rules": ["num-workers"], "how": FRESH,
            "params": {"num_workers": n}, "status": status, "verified": v}


SNIPPET = ("```python\nloader = DataLoader(dataset, batch_size=64, shuffle=True,\n"
           "                    num_workers=1, persistent_workers=True,   # the forecast's count\n"
           "                    prefetch_factor=2)\n```")


def test_the_sweep_reports_the_best_setting_and_the_curve():
    """Issue 40: 1 worker measured 0.80x, 2 workers 1.71x, 3 workers 1.62x, 4 not tried: the finding's number
    is the best (2 workers), every output says which and shows the curve, and the snippet shows it."""
    from perfsleuth.verify.experiment import verified_by_rule
    from perfsleuth.report.figures import best_measured, number_text

    extra = {"experiments": [sweep_experiment(1, [0.8, 0.78, 0.89]), sweep_experiment(2, [1.71, 1.6, 1.8]),
                             sweep_experiment(3, [1.62, 1.5, 1.7]), sweep_experiment(4, [], status="not tried")]}
    f = {**finding("num-workers", "low", forecast=0.95), "fix": SNIPPET}
    best = verified_by_rule(extra, [f])["num-workers"]
    assert (best["speedup"], best["variant"], best["params"]) == (1.71, "num_workers=2", {"num_workers": 2})
    assert [(t["variant"], t["status"], t["speedup"]) for t in best["tried"]] == [
        ("num_workers=1", "measured", 0.8), ("num_workers=2", "measured", 1.71),
        ("num_workers=3", "measured", 1.62), ("num_workers=4", "not tried", None)]
    [out] = apply_verified([f], {"num-workers": best})
    assert out["severity"] == "high"
    assert number_text(out) == ("measured 1.71× (1.60–1.80×, 3 pairs) with num_workers=2; settings: num_workers "
                                "1: 0.80×, 2: 1.71×, 3: 1.62×, 4: not tried · est. 0.95×")
    assert best_measured([out]).startswith("best measured fix: num-workers, measured 1.71× (1.60–1.80×, 3 pairs) "
                                           "with num_workers=2; settings: num_workers 1: 0.80×")
    assert out["fix"] == (
        "```python\nloader = DataLoader(dataset, batch_size=64, shuffle=True,\n"
        "                    num_workers=2, persistent_workers=True,   # measured fastest here by `perfsleuth run "
        "--verify`\n                    prefetch_factor=2)\n```\n\n`num_workers=2` is the setting measured fastest "
        "on this machine by `perfsleuth run --verify` (settings: num_workers 1: 0.80×, 2: 1.71×, 3: 1.62×, "
        "4: not tried).")


def test_dont_apply_only_when_every_setting_tried_was_slower():
    from perfsleuth.verify.experiment import verified_by_rule
    from perfsleuth.report.figures import measured_text

    slower = {"experiments": [sweep_experiment(1, [0.8, 0.78, 0.89]), sweep_experiment(2, [0.9, 0.85, 0.92])]}
    f = {**finding("num-workers", "low", forecast=0.95), "fix": SNIPPET}
    [out] = apply_verified([f], verified_by_rule(slower, [f]))
    assert measured_text(out["verified"]) == ("measured 0.90× (0.85–0.92×, 3 pairs) with num_workers=2: tried: "
                                              "slower on this machine; don't apply; settings: num_workers 1: 0.80×, "
                                              "2: 0.90×")
    assert out["fix"] == SNIPPET  # nothing measured faster: the snippet is left as it was
    one_faster = {"experiments": slower["experiments"] + [sweep_experiment(3, [1.1, 1.08, 1.12])]}
    f = {**finding("num-workers", "low", forecast=0.95), "fix": SNIPPET}
    [out] = apply_verified([f], verified_by_rule(one_faster, [f]))
    assert out["verified"]["note"] == "" and out["verified"]["variant"] == "num_workers=3"
    assert "don't apply" not in measured_text(out["verified"])
    # a conclusive gain is the best before a larger median whose pairs lie on both sides of 1.0
    noisy = {"experiments": one_faster["experiments"] + [sweep_experiment(4, [2.09, 0.99, 2.27])]}
    best = verified_by_rule(noisy, [f])["num-workers"]
    assert (best["variant"], best["outcome"]) == ("num_workers=3", "faster")
    assert [t["outcome"] for t in best["tried"]] == ["slower", "slower", "faster", "noise"]
    # a setting whose pairs lie on both sides of 1.0 is not "slower": with one, no "don't apply"
    mixed = {"experiments": [sweep_experiment(1, [0.67, 0.66, 1.06]), sweep_experiment(2, [0.86, 0.5, 0.96])]}
    [out] = apply_verified([{**f}], verified_by_rule(mixed, [f]))
    assert (out["verified"]["variant"], out["verified"]["outcome"]) == ("num_workers=1", "noise")
    assert "don't apply" not in out["verified"]["note"] + measured_text(out["verified"])


def test_the_snippet_shows_the_count_the_forecast_advises():
    """Issue 40: the rule renders the free cores' count; the forecast may advise another (the best of the counts
    it compares), or say that none helps: the snippet follows it."""
    from perfsleuth.engine.snippets import forecast_setting_snippet

    def fc(said):
        return {"speedup": 1.4, "assumptions": {"workers": said}}

    better = fc("num_workers=2 (was 0): the best forecast (1: 0.95x, 2: 1.40x, 3: 1.30x), not the free cores' 1; "
                "the free cores: min(8, 1.4 free of 2 cores, rounded to 1: a close call between 1 and 2)")
    assert forecast_setting_snippet(SNIPPET, better) == (
        "```python\nloader = DataLoader(dataset, batch_size=64, shuffle=True,\n"
        "                    num_workers=2, persistent_workers=True,   # the count with the best forecast\n"
        "                    prefetch_factor=2)\n```\n\n`num_workers=2`: the best forecast (1: 0.95x, 2: 1.40x, "
        "3: 1.30x), not the free cores' 1; the free cores: min(8, 1.4 free of 2 cores, rounded to 1: a close call "
        "between 1 and 2).")
    same = fc("num_workers=1 (was 0): the best forecast (1: 1.40x, 2: 1.30x); the free cores: min(8, 1 cores)")
    assert forecast_setting_snippet(SNIPPET, same) == SNIPPET
    none = fc("num_workers=1 (was 0): no count helps on this machine, every count forecasts slower (1: 0.92x, "
              "2: 0.92x, 3: 0.91x); the least slow is shown; the free cores: min(8, 1.0 free of 2 cores)")
    assert forecast_setting_snippet(SNIPPET, none) == SNIPPET.replace("# the forecast's count", (
        "# the least slow forecast")) + (
        "\n\nNo worker count forecasts a gain on this machine (1: 0.92x, 2: 0.92x, 3: 0.91x): measure before "
        "applying it (`perfsleuth run --verify` tries them).")
    least = fc(none["assumptions"]["workers"].replace("num_workers=1", "num_workers=2", 1))
    assert "num_workers=2, persistent_workers=True,   # the least slow forecast\n" in forecast_setting_snippet(
        SNIPPET, least)
    assert forecast_setting_snippet(SNIPPET, {"kind": "none"}) == SNIPPET


# ---------------------------------------------------------------- what --verify says (issue 37)


@pytest.mark.parametrize("toggling,fresh,said", [
    (1, 0, "the script ran again once without the profiler (1 process toggling a fix between "
           "windows) in 42 s; its side effects (log lines, files it writes) happened again; its "
           "output is in LOG"),
    (0, 6, "the script ran again 6 times without the profiler (6 fresh processes of one window "
           "each) in 42 s; its side effects (log lines, files it writes) happened again each "
           "time; its output is in LOG"),
    (2, 1, "the script ran again 3 times without the profiler (2 processes toggling a fix "
           "between windows, 1 fresh process of one window each) in 42 s; its side effects (log "
           "lines, files it writes) happened again each time; its output is in LOG"),
])
def test_the_cost_is_said_in_words(toggling, fresh, said):
    from perfsleuth.verify.words import cost_sentence

    assert cost_sentence(toggling, fresh, 42.4, None, "LOG") == said
    assert cost_sentence(toggling, fresh, 42.4, 2.04, "LOG") == said.replace(
        " in 42 s;", " in 42 s; a process's start-up took about 2.0 s, not timed;")


def test_the_log_names_baseline_windows_baseline():
    from perfsleuth.verify.child import window_banner

    assert window_banner({"first": 0, "windows": ["A"], "variant": "num_workers=2"}) == (
        "--- perfsleuth verify: window 0: baseline ---")
    assert window_banner({"first": 3, "windows": ["B"], "variant": "num_workers=2"}) == (
        "--- perfsleuth verify: window 3: num_workers=2 ---")
    toggled = {"first": 0, "windows": ["A", "B", "A", "B"], "variant": "foreach=True"}
    assert window_banner(toggled) == (
        "--- perfsleuth verify: windows 0-3: baseline, foreach=True, baseline, foreach=True ---")


def test_the_report_labels_each_window_and_says_the_cost(tmp_path):
    from perfsleuth.record.target import Target
    from perfsleuth.verify.experiment import Verifier

    v = Verifier(Target("train.py"), tmp_path, VerifyConfig(), 1000.0, lambda line: None)
    rows = [window(0, "A", 10.0, 12.0), window(1, "B", 8.0, 8.0)]
    entry = {"fix": "num_workers", "variant": "num_workers=2", "how": FRESH, "processes": 2,
             "windows": rows}
    extra = v._summary([entry], [], budget=60.0, spent=42.4)
    [e] = extra["experiments"]
    assert [(w["window"], w["variant"], w["label"], w["mean_us"]) for w in e["windows"]] == [
        (0, "A", "baseline", 11.0), (1, "B", "num_workers=2", 8.0)]
    assert extra["cost"] == (
        "the script ran again 2 times without the profiler (2 fresh processes of one window "
        "each) in 42 s; its side effects (log lines, files it writes) happened again each time; "
        f"its output is in {tmp_path / 'verify' / 'children.log'}")


def test_a_fix_that_frees_memory_measures_each_windows_peak():
    """zero_grad(set_to_none=True) (fixes.py `peak`): the peak of the baseline and variant windows
    (verify/peaks.py: the process's resident-set high-water mark on a CPU), median of the pairs, in
    the measurement and in its text in every output (report/figures.py)."""
    from perfsleuth.report.figures import measured_text

    MiB = 1 << 20
    ws = [window(0, "A", 10, 10), window(1, "B", 10, 10), window(2, "A", 10, 10),
          window(3, "B", 10, 10), window(4, "A", 10, 10), window(5, "B", 10, 10)]
    for w, rss in zip(ws, (300, 250, 310, 240, 290, 260)):
        w["peak"] = {"rss_bytes": rss * MiB}
    v = measured(ws, variant="zero_grad(set_to_none=True)", how=TOGGLE, steps=2, forecast=None,
                 step_us=None, peak=True)
    p = v["peak"]
    assert (p["measure"], p["baseline_bytes"], p["variant_bytes"]) == ("rss_bytes", 300 * MiB,
                                                                       250 * MiB)
    assert p["change_bytes"] == -50 * MiB and p["change"] == -0.1667
    assert p["pairs"] == [[300 * MiB, 250 * MiB], [310 * MiB, 240 * MiB], [290 * MiB, 260 * MiB]]
    assert "resident-set high-water mark" in p["what"] and "not its DataLoader workers" in p["what"]
    assert measured_text({**v, "outcome": "noise"}) == (
        "measured 1.00× (1.00–1.00×, 3 pairs): no difference beyond noise; peak 300.00 MiB → "
        "250.00 MiB (-16.7%, measured: process resident-set high-water mark, median of 3 pairs)")
    # on a GPU, torch's allocator measures exactly and comes first
    for w, alloc in zip(ws, (100, 80, 100, 80, 100, 80)):
        w["peak"]["cuda_allocated_bytes"] = alloc * MiB
    got = measured(ws, variant="x", how=TOGGLE, steps=2, forecast=None, step_us=None, peak=True)
    assert (got["peak"]["measure"], got["peak"]["change_bytes"]) == ("cuda_allocated_bytes",
                                                                     -20 * MiB)
    # a fix that does not free memory has no peak; windows without one give None
    assert "peak" not in measured(ws, variant="x", how=TOGGLE, steps=2, forecast=None, step_us=None)
    bare = [window(0, "A", 10), window(1, "B", 10)]
    assert measured(bare, variant="x", how=TOGGLE, steps=1, forecast=None, step_us=None,
                    peak=True)["peak"] is None


def test_the_memory_fixes_in_the_plan(monkeypatch):
    """zero_grad(set_to_none=True) measures the peak; expandable_segments is a GPU fix: on a CPU run
    it is never tried nor named, on a GPU run tried in a fresh process with the variable set."""
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    findings = [{"rule": "zero-grad"}, {"rule": "allocator-fragmentation"}]
    cpu, cpu_not = plan(findings, Context(gpu=False))
    assert [(e["fix"], e["peak"]) for e in cpu] == [("zero_grad", True)]
    assert cpu_not == [{"rule": "allocator-fragmentation", "fix": None, "reason": CODE_CHANGE}]
    gpu, _ = plan(findings, Context(gpu=True))
    exp = next(e for e in gpu if e["fix"] == "expandable_segments")
    assert (exp["kind"], exp["how"], exp["peak"], exp["rules"]) == ("env", FRESH, True,
                                                                     ["allocator-fragmentation"])
    assert exp["params"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert exp["variant"] == "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64")
    gpu, _ = plan(findings, Context(gpu=True))
    assert next(e for e in gpu if e["fix"] == "expandable_segments")["params"] == {
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64,expandable_segments:True"}
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    gpu, gpu_not = plan(findings, Context(gpu=True))
    assert not any(e["fix"] == "expandable_segments" for e in gpu)
    already = "expandable_segments: PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True already"
    assert {"rule": "allocator-fragmentation", "fix": "expandable_segments",
            "reason": already} in gpu_not


def test_a_windows_peak_is_the_resident_high_water_mark_since_its_start():
    """verify/peaks.py on this (Linux) process: 64 MiB touched after a reset raise the mark by at
    least that; a reset after they are freed brings it back down."""
    from perfsleuth.verify import peaks

    MiB = 1 << 20
    peaks.reset()
    before = peaks.rss_high_water()
    block = b"\x01" * (64 * MiB)
    during = peaks.read()["rss_bytes"]
    assert during - before >= 63 * MiB and len(block) == 64 * MiB
    del block
    peaks.reset()
    assert peaks.rss_high_water() <= during - 32 * MiB


def test_a_report_read_back_keeps_the_measured_peak():
    """diff and the directory pages read report.json through report/schema.py: the measured peak of
    a fix that frees memory survives it, and the number's text says it there too."""
    from perfsleuth.report.figures import number_text
    from perfsleuth.report.schema import checked
    from report_factory import make_report

    report = make_report(findings=1)
    peak = {"measure": "rss_bytes", "what": "RSS", "baseline_bytes": 675_569_664,
            "variant_bytes": 608_417_792, "change_bytes": -67_151_872, "change": -0.0994,
            "pairs": [[675_569_664, 608_423_936], [675_569_664, 608_411_648]]}
    report["findings"][0]["verified"] = {"speedup": 1.0679, "low": 0.8, "high": 1.34, "pairs": 2,
                                         "outcome": "noise", "peak": peak}
    got = checked(report, "report.json")["findings"][0]
    assert got["verified"]["peak"] == peak
    assert number_text(got).startswith(
        "measured 1.07× (0.80–1.34×, 2 pairs): no difference beyond noise; peak 644.27 MiB → "
        "580.23 MiB (-9.9%, measured: process resident-set high-water mark, median of 2 pairs)")


def test_a_single_process_dataloader_slow_is_not_measured_with_workers():
    """Issue 37: dataloader-slow on a loader in the training process advises batching its per-sample work, a code
    change; the worker experiments are num-workers' alone, so their number never lands on dataloader-slow."""
    ctx = Context(gpu=False, loaders=[{"num_workers": 0, "pin_memory": False}], cores=2.0, free_cores=2.0,
                  torch_threads=1)
    experiments, not_tried = plan([num_workers_finding(2), {"rule": "dataloader-slow"}], ctx)
    assert [(e["variant"], e["rules"]) for e in experiments] == [
        ("num_workers=2", ["num-workers"]), ("num_workers=1", ["num-workers"]), ("num_workers=3", ["num-workers"])]
    reasons = {(x["rule"], x["reason"]) for x in not_tried}
    assert ("dataloader-slow", "num_workers: the loader runs in the training process and what is slow in its "
            "Dataset is per-sample tensor ops: the fix batches that work, a code change (num-workers' experiment tries "
            "worker processes)") in reasons
    # the cause the finding names (issue 37): decoding is cached, not batched
    decoding = {"rule": "dataloader-slow", "evidence": {"loader_cause": "decoding"}}
    _, not_tried = plan([num_workers_finding(2), decoding], ctx)
    assert ("dataloader-slow", "num_workers: the loader runs in the training process and what is slow in its "
            "Dataset is decoding: the fix caches the decoded samples, a code change (num-workers' experiment tries worker "
            "processes)") in {(x["rule"], x["reason"]) for x in not_tried}
    assert ("dataloader-slow", "persistent_workers: no DataLoader with worker processes") in reasons
    # with workers, dataloader-slow's experiments are as before
    ctx = Context(gpu=False, loaders=[{"num_workers": 1, "prefetch_factor": 2}], cores=4.0, free_cores=4.0)
    experiments, _ = plan([{"rule": "dataloader-slow"}], ctx)
    assert [e["variant"] for e in experiments][:1] == ["num_workers=2"] and all(
        e["rules"] == ["dataloader-slow"] for e in experiments)
