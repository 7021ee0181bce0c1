"""`perfsleuth diff`: exact numbers on hand-built reports and traces, the real trace pair, the
Markdown's escaping and length, and the output files."""

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from perfsleuth.cli.main import main
from perfsleuth.cli.diff import DiffConfig, diff_paths, diff_reports, load_side
from perfsleuth.errors import TraceError, UsageError
from perfsleuth.render.diff_view import MAX_CHARS, render_diff_markdown, render_diff_terminal
from tracebuilder import TraceBuilder

CATS = ("dataloader", "kernel", "sync", "transfer", "host", "communication", "other")
CONTROL, TEST = "a100_trace_diff_control.json.gz", "v100_trace_diff_test.json.gz"


def report(durations, verdict="kernel-bound", kernel_share=0.8, findings=(), kernels=(), ops=(), **extra):
    """A report@1 dict: each step is `kernel_share` kernel and the rest host."""
    steps = [{"name": f"ProfilerStep#{i}", "start_us": 1000.0 * i, "duration_us": float(d),
              "time_us": {**{c: 0.0 for c in CATS}, "kernel": d * kernel_share, "host": d * (1 - kernel_share)}}
             for i, d in enumerate(durations)]
    return {"schema": "perfsleuth/report@1", "tool": {"name": "perfsleuth", "version": "0.1.0"},
            "trace": {"path": "t.json.gz", "device": "NVIDIA A100-SXM4-80GB", "device_type": "cuda"},
            "steps_source": "ProfilerStep", "steps": steps,
            "summary": {"time_share": {**{c: 0.0 for c in CATS}, "kernel": kernel_share,
                                       "host": round(1 - kernel_share, 4)}},
            "verdict": verdict, "verdict_reason": "", "findings": [{"rule": r, "title": f"title of {r}",
                                                                   "severity": "high"} for r in findings],
            "top_kernels": [{"name": n, "count": c, "total_us": t} for n, c, t in kernels],
            "top_ops": [{"name": n, "count": c, "total_us": t} for n, c, t in ops], "warnings": [], **extra}


BASE = [100, 101, 99, 100]


# ---------------------------------------------------------------- the noise call


def test_regression_of_ten_percent():
    st = diff_reports(report(BASE), report([110, 111, 109, 110]))["step_time"]
    assert st["base"] == {"n": 4, "median": 100.0, "mad": 0.5, "p25": 99.75, "p75": 100.25, "min": 99.0, "max": 101.0}
    assert st["head"]["median"] == 110.0 and st["head"]["mad"] == 0.5
    assert st["change_us"] == 10.0
    assert st["change"] == 0.1
    assert st["noise_us"] == 2.097  # 2 * sqrt(2 * (1.4826 * 0.5)^2)
    assert st["call"] == "regression"
    assert st["spread_known"] is True


def test_small_change_is_within_noise():
    st = diff_reports(report(BASE), report([100, 102, 98, 101]))["step_time"]
    assert (st["head"]["median"], st["head"]["mad"]) == (100.5, 1.0)
    assert st["change_us"] == 0.5 and st["change"] == 0.005
    assert st["noise_us"] == 3.315  # 2 * sqrt((1.4826 * 0.5)^2 + (1.4826 * 1.0)^2)
    assert st["call"] == "within noise"


def test_improvement():
    st = diff_reports(report(BASE), report([90, 91, 89, 90]))["step_time"]
    assert (st["change_us"], st["change"], st["call"]) == (-10.0, -0.1, "improvement")


def test_median_ignores_one_slow_step():
    # a warm-up step of 300 µs in the head moves the mean by 50 %, the median not at all
    st = diff_reports(report(BASE + [100, 100]), report([300, 100, 101, 99, 100, 100]))["step_time"]
    assert st["change_us"] == 0.0
    assert st["call"] == "within noise"


def test_wide_spread_hides_a_large_change():
    # medians 100 -> 115 (+15 %), but single steps vary by +-20 µs: MAD 10 on both sides
    st = diff_reports(report([80, 100, 120, 100]), report([95, 115, 135, 115]))["step_time"]
    assert (st["change_us"], st["base"]["mad"], st["head"]["mad"]) == (15.0, 10.0, 10.0)
    assert st["noise_us"] == 41.934
    assert st["call"] == "within noise"


def test_too_few_steps_falls_back_to_the_floor():
    d = diff_reports(report([100]), report([100.5]))
    assert d["step_time"]["spread_known"] is False
    assert d["step_time"]["noise_us"] == 1.0  # 1 % of the base median
    assert d["step_time"]["call"] == "within noise"
    assert d["warnings"][0].startswith("fewer than 3 steps on a side")
    assert diff_reports(report([100]), report([102]))["step_time"]["call"] == "regression"


def test_identical_steps_use_the_floor():
    st = diff_reports(report([100] * 4), report([100.9] * 4))["step_time"]
    assert (st["base"]["mad"], st["noise_us"], st["call"]) == (0.0, 1.0, "within noise")


def test_noise_settings_come_from_the_config():
    cfg = DiffConfig(noise_k=0.1, noise_floor=0.0)
    st = diff_reports(report(BASE), report([100, 102, 98, 101]), cfg)["step_time"]
    assert st["noise_us"] == 0.166 and st["call"] == "regression"


# ---------------------------------------------------------------- categories, verdict, findings


def test_categories_shares_and_calls():
    d = diff_reports(report(BASE, kernel_share=0.8), report([110, 111, 109, 110], kernel_share=0.5))
    cats = {c["category"]: c for c in d["categories"]}
    assert [c["category"] for c in d["categories"]] == list(CATS)
    k, h = cats["kernel"], cats["host"]
    assert (k["base_share"], k["head_share"], k["share_change"]) == (0.8, 0.5, -0.3)
    assert (k["base_us_per_step"], k["head_us_per_step"], k["change_us_per_step"]) == (80.0, 55.0, -25.0)
    assert k["call"] == "improvement"
    assert (h["base_us_per_step"], h["head_us_per_step"], h["call"]) == (20.0, 55.0, "regression")
    assert cats["sync"]["call"] == "within noise"


def test_verdict_change():
    d = diff_reports(report(BASE, verdict="kernel-bound"), report(BASE, verdict="sync-bound"))
    assert d["verdict"] == {"base": "kernel-bound", "head": "sync-bound", "changed": True}
    same = diff_reports(report(BASE), report(BASE))["verdict"]
    assert same["changed"] is False


def test_findings_appeared_and_gone_by_rule():
    d = diff_reports(report(BASE, findings=["num-workers", "item-sync"]),
                     report(BASE, findings=["item-sync", "pageable-h2d"]))["findings"]
    assert [f["rule"] for f in d["appeared"]] == ["pageable-h2d"]
    assert [f["rule"] for f in d["gone"]] == ["num-workers"]
    assert [f["rule"] for f in d["kept"]] == ["item-sync"]
    none = {"kind": None, "speedup": None, "low": None, "high": None, "saving_us": None}
    assert d["appeared"][0] == {"rule": "pageable-h2d", "title": "title of pageable-h2d", "severity": "high",
                                "number": none, "forecast": None, "ceiling": None}


def _finding(rule, forecast=None, verified=None, **extra):
    f = {"rule": rule, "title": f"title of {rule}", "severity": "medium", **extra}
    if forecast is not None:
        f["forecast"] = {"speedup": forecast, "low": forecast - 0.1, "high": forecast + 0.1,
                         "saving_us": round(100 * (1 - 1 / forecast), 3), "kind": "forecast", "model": "m"}
    if verified is not None:
        f["verified"] = {"speedup": verified, "low": verified - 0.05, "high": verified + 0.05, "pairs": 3,
                         "saving_us": round(100 * (1 - 1 / verified), 3), "outcome": "faster"}
    return f


def test_diff_carries_each_findings_number_measured_and_forecast():
    """issue 24/25: a finding's number in the diff is the one its report shows: measured when measured."""
    base = report(BASE, findings=[])
    base["findings"] = [_finding("num-workers", forecast=1.3)]
    head = report(BASE, findings=[])
    head["findings"] = [_finding("num-workers", forecast=1.3, verified=1.41), _finding("amp", forecast=1.25)]
    d = diff_reports(base, head)
    amp, = d["findings"]["appeared"]
    assert amp["number"] == {"kind": "forecast", "speedup": 1.25, "low": 1.15, "high": 1.35, "saving_us": 20.0}
    kept, = d["findings"]["kept"]
    assert kept["number"]["kind"] == "measured" and kept["number"]["speedup"] == 1.41
    assert kept["base_number"]["speedup"] == 1.3 and kept["verified"]["pairs"] == 3
    md = render_diff_markdown(d)
    assert "- `amp` (medium): title of amp — est. 1.25× (1.15–1.35×)" in md
    assert "- `num-workers`: est. 1.30× → measured 1.41×" in md
    term = render_diff_terminal(d)
    assert "  amp: title of amp  (est. 1.25× (1.15–1.35×))" in term
    assert "  num-workers: est. 1.30× → measured 1.41×" in term


def test_diff_reads_a_report_written_before_issue_24(tmp_path):
    """An older report.json: estimated_saving_us / estimated_speedup / bound, no ceiling, no kind."""
    old = report(BASE, findings=[])
    old["findings"] = [{"rule": "item-sync", "title": "t", "severity": "high", "estimated_saving_us": 500.0,
                        "estimated_speedup": 1.5, "saving_basis": "upper bound: ...",
                        "bound": {"saving_us": 500.0, "speedup": 1.5, "basis": "upper bound: ..."},
                        "forecast": {"speedup": 1.01, "low": 1.0, "high": 1.02, "saving_us": 0.99, "model": "x",
                                     "assumptions": {}, "reason": None}}]
    base, head = tmp_path / "old.json", tmp_path / "new.json"
    base.write_text(json.dumps(old))
    head.write_text(json.dumps(report(BASE, findings=[])))
    d = diff_paths(base, head)
    gone, = d["findings"]["gone"]
    assert gone["ceiling"] == {"saving_us": 500.0, "speedup": 1.5, "basis": None}
    assert gone["number"]["speedup"] == 1.01 and gone["number"]["kind"] == "forecast"
    assert "item-sync (high): t — est. 1.01× (1.00–1.02×)" in render_diff_markdown(d).replace("`", "")


# ---------------------------------------------------------------- kernels and ops


def test_kernels_per_step_matched_by_name():
    base = report(BASE, kernels=[("gemm", 8, 400.0), ("relu", 4, 40.0), ("old", 4, 20.0), ("same", 4, 8.0)])
    head = report([110, 111, 109, 110], kernels=[("gemm", 8, 480.0), ("relu", 4, 20.0), ("same", 4, 8.0),
                                                 ("new", 12, 12.0)])
    k = diff_reports(base, head)["kernels"]
    assert (k["compared"], k["unmatched"], k["slower_count"], k["faster_count"]) == (5, 0, 2, 2)
    assert k["slower"] == [
        {"name": "gemm", "status": "changed", "base_us_per_step": 100.0, "head_us_per_step": 120.0,
         "change_us_per_step": 20.0, "change": 0.2, "base_count_per_step": 2.0, "head_count_per_step": 2.0},
        {"name": "new", "status": "new", "base_us_per_step": 0.0, "head_us_per_step": 3.0,
         "change_us_per_step": 3.0, "change": None, "base_count_per_step": 0.0, "head_count_per_step": 3.0},
    ]
    assert [(r["name"], r["status"], r["change_us_per_step"], r["change"]) for r in k["faster"]] == [
        ("old", "gone", -5.0, -1.0), ("relu", "changed", -5.0, -0.5)]  # equal changes: by name


def test_steps_count_divides_totals():
    # 2 steps on the base, 4 on the head: the same total is half the time per step on the head
    k = diff_reports(report([100, 100], kernels=[("gemm", 2, 100.0)]),
                     report(BASE, kernels=[("gemm", 4, 100.0)]))["kernels"]
    assert k["faster"][0]["base_us_per_step"] == 50.0
    assert k["faster"][0]["head_us_per_step"] == 25.0


def test_truncated_lists_leave_names_out():
    # a report.json lists its top 15: a name missing from a 15-long list may just be below the cut
    listed = [(f"k{i}", 1, 100.0 - i) for i in range(15)]
    base = report(BASE, kernels=listed)
    head = report(BASE, kernels=listed[:14] + [("fresh", 1, 500.0)])
    d = diff_reports(base, head)
    assert (d["kernels"]["compared"], d["kernels"]["unmatched"]) == (14, 2)
    assert "2 kernel/op names are in only one side's top list" in d["warnings"][-1]
    full = diff_reports(base, head, full_lists=(True, True))["kernels"]
    assert (full["compared"], full["unmatched"], full["slower"][0]["name"]) == (16, 0, "fresh")


def test_top_changes_cap_and_order():
    base = report(BASE, ops=[(f"op{i}", 1, 10.0) for i in range(30)])
    head = report(BASE, ops=[(f"op{i}", 1, 10.0 + 4 * i) for i in range(30)])
    ops = diff_reports(base, head, DiffConfig(top_changes=3))["ops"]
    assert ops["slower_count"] == 29
    assert [r["name"] for r in ops["slower"]] == ["op29", "op28", "op27"]
    assert ops["slower"][0]["change_us_per_step"] == 29.0


# ---------------------------------------------------------------- inputs


def test_report_json_is_read_as_a_report(tmp_path):
    p = tmp_path / "report.json"
    p.write_text(json.dumps(report(BASE)))
    rep, full = load_side(p)
    assert rep["verdict"] == "kernel-bound" and full is False


@pytest.mark.parametrize("doc,error,text", [
    ({"schema": "perfsleuth/report-set@1", "reports": [{}, {}]}, UsageError, "is a report set (2 traces)"),
    ({"schema": "perfsleuth/report@2", "steps": []}, UsageError, "is not 'perfsleuth/report@1'"),
    ({"schema": "perfsleuth/report@1", "steps": [], "verdict": "kernel-bound"}, TraceError,
     "not a valid perfsleuth report (Expected `array` of length >= 1 - at `$.steps`)"),
    ({"schema": "perfsleuth/report@1", "steps": [{"duration_us": "x"}], "verdict": "k"}, TraceError,
     "not a valid perfsleuth report (Expected `float`, got `str` - at `$.steps[0].duration_us`)"),
])
def test_bad_reports(tmp_path, doc, error, text):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(error, match=re.escape(text)):
        load_side(p)


def test_broken_json_and_missing_file(tmp_path):
    p = tmp_path / "r.json"
    p.write_text('{"schema": "perfsleuth/report@1", "steps": [')
    with pytest.raises(TraceError, match="not valid JSON"):
        load_side(p)
    with pytest.raises(TraceError, match="no such file or directory"):
        load_side(tmp_path / "missing.json.gz")


def _trace(tmp_path, name, durations, gemm_us, extra_kernel=None):
    tb = TraceBuilder()
    for i, d in enumerate(durations):
        t0 = 1000 * i
        tb.step(i + 1, t0, d)
        tb.launch("gemm", host=(t0 + 1, 2), device=(t0 + 5, gemm_us))
        if extra_kernel:
            tb.launch(extra_kernel, host=(t0 + 4, 1), device=(t0 + 5 + gemm_us, 2))
    return tb.write(tmp_path / name)


def test_traces_are_analysed_and_compared(tmp_path):
    base = _trace(tmp_path, "base.json.gz", BASE, 50)
    head = _trace(tmp_path, "head.json.gz", [110, 111, 109, 110], 60, extra_kernel="relu")
    d = diff_paths(base, head)
    assert (d["step_time"]["change_us"], d["step_time"]["call"]) == (10.0, "regression")
    assert [(r["name"], r["status"], r["change_us_per_step"]) for r in d["kernels"]["slower"]] == [
        ("gemm", "changed", 10.0), ("relu", "new", 2.0)]
    assert d["base"]["path"] == str(base) and d["head"]["steps"] == 4


def test_a_directory_of_several_traces_is_refused(tmp_path):
    _trace(tmp_path, "rank0.json.gz", BASE, 50)
    _trace(tmp_path, "rank1.json.gz", BASE, 50)
    with pytest.raises(UsageError, match="holds 2 traces"):
        load_side(tmp_path)


# ---------------------------------------------------------------- the real trace pair


@pytest.fixture(scope="module")
def real_diff(real_traces):
    return diff_paths(real_traces / CONTROL, real_traces / TEST)


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_real_pair_numbers(real_diff):
    st = real_diff["step_time"]
    # the head's first step (157 ms, 1.3x the rest) is warm-up and left out: 5 steady steps against 6
    assert (st["base"]["n"], st["head"]["n"]) == (6, 5)
    assert (st["base"]["median"], st["head"]["median"]) == (76763.5, 116692.0)
    assert (st["base"]["mad"], st["head"]["mad"]) == (818.5, 549.0)
    assert (st["change_us"], st["change"], st["call"]) == (39928.5, 0.5201, "regression")
    assert "head: 1 warm-up or partial step left out of the comparison" in real_diff["warnings"]
    assert real_diff["verdict"] == {"base": "communication-bound", "head": "transfer-bound", "changed": True}
    k = real_diff["kernels"]
    assert k["unmatched"] == 0
    top = k["slower"][0]
    assert (top["name"], top["base_us_per_step"], top["head_us_per_step"]) == (
        "Memcpy DtoD (Device -> Device)", 455.833, 15454.0)
    assert (top["base_count_per_step"], top["head_count_per_step"]) == (3.0, 768.0)
    new = {r["name"]: r for r in k["slower"] if r["status"] == "new"}
    assert new["volta_sgemm_128x32_nt"]["head_us_per_step"] == 4527.6
    gone = {r["name"]: r for r in k["faster"] if r["status"] == "gone"}
    assert gone["ampere_sgemm_128x128_tn"]["base_us_per_step"] == 873.0
    assert real_diff["ops"]["slower"][0]["name"] == "aten::copy_"
    transfer = next(c for c in real_diff["categories"] if c["category"] == "transfer")
    assert (transfer["base_share"], transfer["head_share"], transfer["call"]) == (0.0416, 0.135, "regression")


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_real_pair_findings_match_each_analysis(real_diff, real_traces):
    from perfsleuth.api import analyze_path

    base, head = ({f["rule"] for f in analyze_path(real_traces / name).to_dict()["findings"]}
                  for name in (CONTROL, TEST))
    f = real_diff["findings"]
    assert {x["rule"] for x in f["appeared"]} == head - base
    assert {x["rule"] for x in f["gone"]} == base - head
    assert {x["rule"] for x in f["kept"]} == base & head
    assert base != head  # the pair differs in findings too


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_real_pair_cli(real_traces, tmp_path):
    md, js = tmp_path / "diff.md", tmp_path / "diff.json"
    r = CliRunner().invoke(main, ["diff", str(real_traces / CONTROL), str(real_traces / TEST),
                                  "--markdown", str(md), "--json", str(js)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "step time: median 76.76 ms → 116.69 ms (+39.93 ms, +52.0%): REGRESSION" in r.stdout
    assert "verdict: communication-bound → transfer-bound (changed)" in r.stdout
    assert "kernels slower (per step, 10 of 99):" in r.stdout
    assert "kernels faster (per step, 10 of 101):" in r.stdout
    assert re.search(r"\+15\.00 ms +456 µs → 15\.45 ms +Memcpy DtoD \(Device -> Device\)", r.stdout)
    assert re.search(r"−873 µs +873 µs → — +ampere_sgemm_128x128_tn \[gone\]", r.stdout)
    assert r.stdout.rstrip().endswith(f"wrote {js}\nwrote {md}")
    text = md.read_text()
    assert text.startswith("### perfsleuth diff: median step **+52.0%** (▲ regression) · verdict "
                           "`communication-bound` → `transfer-bound`")
    assert "| Transfer | 4.2% | 13.5% | +9.3 pp | 3.02 ms → 14.66 ms | ▲ regression |" in text
    assert "| `volta_sgemm_128x32_nt` (new) | — | 4.53 ms | +4.53 ms | 0 → 34 |" in text
    assert len(text) < MAX_CHARS
    data = json.loads(js.read_text())
    assert data["schema"] == "perfsleuth/diff@1" and data["step_time"]["call"] == "regression"


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_a_trace_diffed_with_itself(real_traces):
    path = str(real_traces / CONTROL)
    r = CliRunner().invoke(main, ["diff", path, path, "--fail-on-regression", "1%"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "step time: median 76.76 ms → 76.76 ms (no change): within noise" in r.stdout
    assert "verdict: communication-bound (unchanged)" in r.stdout
    assert "kernels: no per-step change" in r.stdout and "ops: no per-step change" in r.stdout
    assert r.stderr == ""
    assert "None of the 174 compared changed." in render_diff_markdown(diff_paths(path, path))  # kernels


def test_a_cpu_diff_says_there_are_no_kernels_on_either_side(tmp_path):
    """CPU-only runs have no device kernels: said as such, never "None of 0 changed"."""
    cpu = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "cpu"
    r = CliRunner().invoke(main, ["diff", str(cpu / "dataloader_starved.pt.trace.json.gz"),
                                  str(cpu / "few_workers.pt.trace.json.gz"), "--markdown", str(tmp_path / "d.md")],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "\nkernels: none in either run\n" in r.stdout and "ops slower (per step" in r.stdout
    md = (tmp_path / "d.md").read_text(encoding="utf-8")
    assert "\n**Kernels:** none in either run.\n" in md and "None of 0" not in md


# ---------------------------------------------------------------- Markdown: escaping and length

HOSTILE = ["<script>alert(1)</script>", "a`b``c```d", "void f<float|half>| x | y |", "line1\nline2\r\n| z |",
           "[x](javascript:alert(1))", "</details><img src=x onerror=alert(1)>", "x" * 5000, "**bold** _it_ ~~s~~"]


def _hostile_pair(n=500):
    kernels_b = [(f"{HOSTILE[i % len(HOSTILE)]} #{i}", 1, 10.0 + i) for i in range(n)]
    kernels_h = [(f"{HOSTILE[i % len(HOSTILE)]} #{i}", 1, 10.0 + (i * 7) % n) for i in range(n)]
    rules = [f"rule-{i}" for i in range(300)]
    base = report(BASE, kernels=kernels_b, ops=kernels_b, findings=rules[:150], verdict="<b>x</b>|`y`")
    head = report([110, 111, 109, 110], kernels=kernels_h, ops=kernels_h, findings=rules[150:])
    for f in head["findings"]:
        f["title"] = HOSTILE[len(f["rule"]) % len(HOSTILE)] * 40
    head["trace"]["path"] = "/tmp/`evil`|dir/<img src=x>\n.json"
    return diff_reports(base, head, full_lists=(True, True))


def _outside_code(line):
    """The line without its code spans (where `<script>` is literal text)."""
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", line)


def _table_rows(md):
    return [line for line in md.splitlines() if line.startswith("| ")]


def _unescaped_pipes(line):
    # pipes not preceded by a backslash split cells
    return len(re.findall(r"(?<!\\)\|", line))


def test_markdown_with_500_hostile_kernels_stays_under_the_limit():
    d = _hostile_pair()
    md = render_diff_markdown(d)
    assert len(md) < MAX_CHARS < 65_536
    outside = [_outside_code(line) for line in md.splitlines()]
    tags = {tag for line in outside for tag in re.findall(r"(?<!\\)</?[a-z]+", line)}
    assert tags == {"<details", "</details", "<summary", "</summary", "<sub", "</sub"}  # ours only
    assert all("\n" not in line and "\r" not in line for line in md.splitlines())
    assert "x" * 121 not in md  # names cut to 120 characters
    for line in _table_rows(md):
        assert _unescaped_pipes(line) in (5, 6, 7), line  # every row keeps its columns
    kernel_rows = [line for line in _table_rows(md) if re.search(r"\| [\d.]+ → [\d.]+ \|$", line)]
    assert len(kernel_rows) == 40  # 10 slower + 10 faster, kernels and ops
    assert "**Findings appeared** (150)" in md and "- … 130 more in diff.json" in md


def test_markdown_escapes_names_as_code_in_cells():
    d = diff_reports(report(BASE, kernels=[("a|b`c\n<i>d</i>", 1, 10.0)]),
                     report(BASE, kernels=[("a|b`c\n<i>d</i>", 1, 20.0)]))
    row = next(line for line in render_diff_markdown(d).splitlines() if "<i>" in line)
    assert row.startswith("| ``a\\|b`c <i>d</i>`` | 2.5 µs | 5.0 µs | +2.5 µs | 0.25 → 0.25 |")


def test_a_section_that_does_not_fit_is_left_out(monkeypatch):
    import perfsleuth.render.diff_view as dr

    monkeypatch.setattr(dr, "MAX_CHARS", 3000)
    md = dr.render_diff_markdown(_hostile_pair())
    assert len(md) < 3000
    assert "a section was left out to stay within GitHub's comment limit" in md
    assert md.rstrip().endswith("</sub>")


def test_terminal_has_no_control_characters():
    text = render_diff_terminal(_hostile_pair(50))
    assert "\r" not in text and "\x1b" not in text
    assert all(len(line) < 400 for line in text.splitlines())


# ---------------------------------------------------------------- output files


def _write_reports(tmp_path, base, head):
    b, h = tmp_path / "base.json", tmp_path / "head.json"
    b.write_text(json.dumps(base))
    h.write_text(json.dumps(head))
    return str(b), str(h)


def test_outputs_do_not_overwrite_without_force(tmp_path):
    b, h = _write_reports(tmp_path, report(BASE), report([110, 111, 109, 110]))
    md = tmp_path / "diff.md"
    md.write_text("keep me")
    r = CliRunner().invoke(main, ["diff", b, h, "--markdown", str(md)])
    assert r.exit_code == 2
    assert r.stderr == f"perfsleuth: error: {md}: exists; use --force to overwrite\n"
    assert md.read_text() == "keep me"
    r = CliRunner().invoke(main, ["diff", b, h, "--markdown", str(md), "--force"])
    assert r.exit_code == 0
    assert md.read_text().startswith("### perfsleuth diff: median step **+10.0%** (▲ regression)")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_same_file_twice_is_refused(tmp_path):
    b, h = _write_reports(tmp_path, report(BASE), report(BASE))
    out = str(tmp_path / "x")
    r = CliRunner().invoke(main, ["diff", b, h, "--markdown", out, "--json", out])
    assert r.exit_code == 2 and "asked for twice" in r.stderr


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_diff_analyses_traces_with_the_project_rule_settings(real_traces, tmp_path, monkeypatch):
    # [tool.perfsleuth] in ./pyproject.toml applies to diff as to analyze
    monkeypatch.chdir(tmp_path)
    args = ["diff", str(real_traces / CONTROL), str(real_traces / TEST), "--json"]
    assert CliRunner().invoke(main, args + ["a.json"], catch_exceptions=False).exit_code == 0
    gone = [f["rule"] for f in json.loads((tmp_path / "a.json").read_text())["findings"]["gone"]]
    assert gone == ["exposed-communication"]
    (tmp_path / "pyproject.toml").write_text(
        '[tool.perfsleuth]\nthresholds = {"exposed-communication.min_share" = 0.99}\n')
    assert CliRunner().invoke(main, args + ["b.json"], catch_exceptions=False).exit_code == 0
    assert json.loads((tmp_path / "b.json").read_text())["findings"]["gone"] == []
