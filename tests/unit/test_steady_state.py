"""Steady state: warm-up, steady and partial steps (docs/attribution.md#steady-state).

Exact shares on hand-built traces; on the real V100 traces the verdict equals the one of the trace cut
after its first optimizer step; a real trace with a 4.5 s initialisation step spliced in front keeps its
verdict, and its cuDNN autotune syncs are not the user's.
"""

import gzip
import json

import pytest
from perfsleuth.analysis.attribution import CATEGORIES
from perfsleuth.analysis.verdict import decide
from perfsleuth.api import analyze_file
from perfsleuth.config import Config
from perfsleuth.facts.core import compute_facts
from perfsleuth.render.html import render_html
from perfsleuth.render.markdown import render_markdown
from perfsleuth.render.terminal import render_terminal
from tracebuilder_rules import RuleTraceBuilder, analyze, fired

OPT = "Optimizer.step#SGD.step"


def steady_steps(tb: RuleTraceBuilder, t0: float, first: int, n: int, dur: float = 200) -> None:
    """n kernel-bound steps of `dur` µs: kernel [t0+10, t0+dur-10), an optimizer step at the end."""
    for i in range(n):
        t = t0 + i * dur
        tb.step(first + i, t, dur)
        tb.launch("k", host=(t, 5), device=(t + 10, dur - 20))
        tb.annotation(OPT, t + dur - 20, 10)


def init_step(tb: RuleTraceBuilder, n: int, dur: float) -> None:
    """A first step of `dur` µs spent initialising: allocations, a device query, cuDNN autotuning."""
    tb.step(n, 0, dur)
    for j in range(10):
        tb.runtime("cudaMalloc", 100 + 250 * j, 200)
    tb.runtime("cudaGetDeviceProperties", 2600, 100)
    tb.op("aten::cudnn_convolution", 2800, 2000)
    for j in range(20):  # cudnnFind: time each candidate algorithm, synchronize after each
        tb.launch("implicit_convolve_sgemm", host=(2805 + 95 * j, 3), device=(2810 + 95 * j, 40))
        tb.runtime("cudaEventSynchronize", 2850 + 95 * j, 30)
    tb.annotation(OPT, dur - 20, 10)


def all_steps_verdict(report) -> str:
    """What the verdict was before steady state: every step counted."""
    st = report.breakdown.steps
    total = st["duration"].sum()
    return decide({c: st[c].sum() / total for c in CATEGORIES}, Config())[0]


def cut_after_first_optimizer_step(src, dst) -> None:
    opener = gzip.open if str(src).endswith(".gz") else open
    with opener(src, "rt") as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    cut = min(e["ts"] + e.get("dur", 0) for e in ev if e.get("ph") == "X" and str(e.get("name", "")).startswith(
        "Optimizer.step#"))
    doc["traceEvents"] = [e for e in ev if e.get("ph") != "X" or e["ts"] >= cut]
    with open(dst, "w") as f:
        json.dump(doc, f)


def test_initialisation_step_is_warm_up_and_the_verdict_follows_the_steady_steps(tmp_path):
    tb = RuleTraceBuilder()
    init_step(tb, 1, 5000)
    steady_steps(tb, 5000, 2, 4)
    report, facts = analyze(tb, tmp_path)
    assert [s["phase"] for s in report["steps"]] == ["warmup", "steady", "steady", "steady", "steady"]
    reason = report["steps"][0]["phase_reason"]
    assert reason.startswith("5.0 ms, 25.0x the median steady step")
    assert ("10 memory allocation calls, 1 device/stream setup call, "
            "20 synchronizes inside convolutions (autotuning)") in reason
    assert "phase_reason" not in report["steps"][1]
    assert report["summary"]["steps"] == {"steady": 4, "warmup": 1, "partial": 0}
    assert report["summary"]["time_share"]["kernel"] == 0.9 and report["summary"]["time_share"]["host"] == 0.1
    assert report["summary"]["step_time_us"] == {"median": 200.0, "mean": 200.0, "p90": 200.0}
    assert report["verdict"] == "kernel-bound"
    assert all_steps_verdict(analyze_file(tmp_path / "t.json.gz")) == "host-bound"  # what warm-up did before
    assert facts["steps"] == 4 and facts["complete_steps"] == 5 and facts["warmup_steps"] == 1
    assert facts["sync_explicit_calls_per_step"] == 0.0  # the autotune syncs are not the step's code
    assert facts["kernel_us_per_step"] == 180.0 and facts["step_us"] == 200.0
    outliers = fired(report)["step-outliers"]  # step-outliers still sees the warm-up step
    assert facts["step_max_ratio"] == 25.0 and facts["step_slowest_is_warmup"] is True
    assert "warm-up step at the start of the trace" in outliers["message"]
    cut_after_first_optimizer_step(tmp_path / "t.json.gz", tmp_path / "cut.json")
    cut = analyze_file(tmp_path / "cut.json")
    assert cut.verdict == all_steps_verdict(cut) == report["verdict"]
    assert cut.time_share == report["summary"]["time_share"]


def test_initialisation_evidence_alone_makes_a_leading_step_warm_up(tmp_path):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 200)
    tb.runtime("cudaMalloc", 20, 30)  # 15 % of the step, though the step is not slower
    tb.launch("k", host=(60, 5), device=(70, 120))
    steady_steps(tb, 200, 2, 3)
    report, _ = analyze(tb, tmp_path)
    assert [s["phase"] for s in report["steps"]] == ["warmup", "steady", "steady", "steady"]
    assert "30 µs of initialisation: 1 memory allocation call" in report["steps"][0]["phase_reason"]


@pytest.mark.parametrize("durations, phases", [
    ([1000, 200, 210, 190, 200], ["warmup"] + ["steady"] * 4),  # far above the rest
    ([230, 200, 210, 190, 200], ["steady"] * 5),  # within 25 % of the median: noise
    ([1000, 900, 200, 210, 200], ["warmup", "warmup", "steady", "steady", "steady"]),  # two leading
    ([200, 210, 1000, 190, 200], ["steady"] * 5),  # a slow step later on is an outlier, not warm-up
    ([1000, 200], ["steady", "steady"]),  # against one later step neither is the outlier
])
def test_robust_rule_for_slow_leading_steps(tmp_path, durations, phases):
    tb = RuleTraceBuilder()
    t = 0
    for i, d in enumerate(durations):
        tb.step(i + 1, t, d)
        tb.launch("k", host=(t, 5), device=(t + 10, d - 20))
        t += d
    report, facts = analyze(tb, tmp_path)
    assert [s["phase"] for s in report["steps"]] == phases
    assert facts["steps"] == phases.count("steady") and facts["complete_steps"] == len(durations)


def test_too_few_steady_steps_is_said(tmp_path):
    tb = RuleTraceBuilder()
    init_step(tb, 1, 5000)
    steady_steps(tb, 5000, 2, 2)
    report, _ = analyze(tb, tmp_path)
    assert report["summary"]["steps"] == {"steady": 2, "warmup": 1, "partial": 0}
    assert ("only 2 steady steps (1 warm-up set apart): shares and the verdict rest on fewer than 3; record "
            "more steps (perfsleuth run --active N)") in report["warnings"]


def test_partial_step_from_run_metadata_is_left_out_and_counted_alike_everywhere(tmp_path):
    tb = RuleTraceBuilder()
    steady_steps(tb, 0, 3, 2)
    tb.step(5, 400, 50)  # the script ended 50 µs into this step
    doc = tb.build()
    doc["perfsleuth"] = {"version": 1, "partial_step": "ProfilerStep#5"}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    report = analyze_file(tmp_path / "t.json")
    d = report.to_dict()
    assert [s["phase"] for s in d["steps"]] == ["steady", "steady", "partial"]
    assert d["steps"][2]["phase_reason"] == "the run ended inside this step: it is cut short"
    assert d["summary"]["steps"] == {"steady": 2, "warmup": 0, "partial": 1}
    assert d["summary"]["time_share"]["kernel"] == 0.9 and d["summary"]["step_time_us"]["median"] == 200.0
    facts = compute_facts(report.trace, report.steps, report.breakdown)
    assert facts["steps"] == 2 and facts["complete_steps"] == 2 and facts["step_max_us"] == 200.0
    term = render_terminal(d)
    assert "steps: 2 steady + 1 partial (ProfilerStep)" in term
    assert "partial  ProfilerStep#5: the run ended inside this step" in term
    assert "2 steady steps + 1 partial (ProfilerStep)" in render_markdown(d)
    assert "2 steady steps + 1 partial" in render_html(d)


def test_renderers_show_warm_up_apart(tmp_path):
    tb = RuleTraceBuilder()
    init_step(tb, 1, 5000)
    steady_steps(tb, 5000, 2, 4)
    d, _ = analyze(tb, tmp_path)
    term = render_terminal(d)
    assert "steps: 4 steady + 1 warm-up (ProfilerStep)" in term
    assert "set apart (not in the shares, the verdict or the findings; step-outliers still counts them):" in term
    assert "  warm-up  ProfilerStep#1: 5.0 ms, 25.0x the median steady step" in term
    assert "kernel          90.0%     180.0 µs    180.0 µs" in term  # median and mean over the steady steps
    md = render_markdown(d)
    assert "- warm-up `ProfilerStep#1`: 5.0 ms, 25.0x the median steady step" in md
    assert "| Kernels | 90.0% | 180 µs |" in md
    html = render_html(d)
    assert 'id="set-apart"' in html and html.count('class="bar apart"') == 1
    assert "warm-up (not in the shares): ProfilerStep#1" in html


def test_reports_without_phases_read_as_steady():
    from perfsleuth.report.present import set_apart, steady_steps as steady, steps_text

    old = {"steps": [{"name": "a", "duration_us": 1.0}, {"name": "b", "duration_us": 2.0}]}
    assert len(steady(old)) == 2 and set_apart(old) == [] and steps_text(old) == "2 steps"


V100 = ["v100_df_index_resolver.json.gz", "v100_trace_diff_test.json.gz", "v100_ns_resolution.pt.trace.json.gz"]


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
@pytest.mark.parametrize("name", V100)
def test_v100_verdicts_are_those_of_the_trace_cut_after_the_first_optimizer_step(real_traces, tmp_path, name):
    full = analyze_file(real_traces / name)
    cut_after_first_optimizer_step(real_traces / name, tmp_path / "cut.json")
    cut = analyze_file(tmp_path / "cut.json")
    assert full.verdict == cut.verdict == all_steps_verdict(cut)
    assert abs(full.time_share[full.verdict.removesuffix("-bound")] - cut.time_share[cut.verdict.removesuffix(
        "-bound")]) < 0.02


def splice_warm_up(src, dst, seconds: float = 4.5, syncs: int = 357) -> None:
    """`src` with a first step of `seconds` of CUDA/cuDNN initialisation in front of it: allocations, device
    queries, module loads and cuDNN autotuning (`syncs` event synchronizes inside convolutions)."""
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    t0 = min(e["ts"] for e in ev if e.get("ph") == "X")
    start, dur = t0 - seconds * 1e6, seconds * 1e6
    pid, tid = next((e["pid"], e["tid"]) for e in ev if e.get("ph") == "X" and str(e.get("name")).startswith(
        "ProfilerStep#"))

    def x(cat, name, ts, d, **args):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": start + ts, "dur": d,
                   "args": args})

    x("user_annotation", "ProfilerStep#99", 0, dur)
    for j in range(200):
        x("cuda_runtime", "cudaMalloc", 1000 + j * 5000, 4000)
    x("cuda_runtime", "cudaGetDeviceProperties_v2", 1_010_000, 200)
    for j in range(40):
        x("cuda_runtime", "cuModuleLoadData", 1_020_000 + j * 20_000, 15_000)
    span = (dur - 2_000_000) / syncs
    for j in range(syncs):
        ts = 1_900_000 + j * span
        x("cpu_op", "aten::cudnn_convolution", ts, span - 10)
        x("cuda_runtime", "cudaLaunchKernel", ts + 5, 5, correlation=10_000_000 + j)
        ev.append({"ph": "X", "cat": "kernel", "name": "implicit_convolve_sgemm", "pid": 0, "tid": 7,
                   "ts": start + ts + 20, "dur": span / 2, "args": {"correlation": 10_000_000 + j, "device": 0,
                                                                      "stream": 7}})
        x("cuda_runtime", "cudaEventSynchronize", ts + 15, span / 2)
    x("user_annotation", OPT, dur - 1000, 500)
    with open(dst, "w") as f:
        json.dump(doc, f)


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_a_real_trace_with_seconds_of_initialisation_in_front_keeps_its_verdict(real_traces, tmp_path):
    name = "v100_ns_resolution.pt.trace.json.gz"
    splice_warm_up(real_traces / name, tmp_path / "spliced.json")
    spliced = analyze_file(tmp_path / "spliced.json")
    original = analyze_file(real_traces / name)
    assert all_steps_verdict(spliced) == "host-bound"  # what the 4.5 s window did to the verdict
    assert [p for p in spliced.steps.frame["phase"]] == ["warmup"] + ["steady"] * 5
    reason = spliced.steps.frame["phase_reason"].iloc[0]
    assert "200 memory allocation calls, 1 device/stream setup call, 40 module loads, " \
           "357 synchronizes inside convolutions (autotuning)" in reason
    assert spliced.verdict == original.verdict == "kernel-bound"
    assert spliced.time_share == original.time_share
    facts = compute_facts(spliced.trace, spliced.steps, spliced.breakdown)
    assert facts["sync_explicit_calls_per_step"] == 0.0  # not 357 autotune syncs counted as the user's
    assert "cuda-graphs" not in {f["rule"] for f in spliced.findings} and "explicit-sync" not in {
        f["rule"] for f in spliced.findings}
    cut_after_first_optimizer_step(tmp_path / "spliced.json", tmp_path / "cut.json")
    assert analyze_file(tmp_path / "cut.json").verdict == spliced.verdict
