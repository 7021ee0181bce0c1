"""The HTML report: content, escaping, no network, size limits, odd shapes (0/1/500/5000 steps, CPU only)."""

import math
import re
from html import escape
from html.parser import HTMLParser

import pytest
from perfsleuth.render.html import MAX_BARS, render_html
from perfsleuth.render.set_page import render_set_html
from report_factory import HOSTILE, make_hostile_report, make_report


class Collect(HTMLParser):
    """Tags with attributes, the text, and whether every element closed."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(html: str) -> Collect:
    c = Collect()
    c.feed(html)
    return c


def svg(html: str) -> str:
    return re.search(r"<svg.*?</svg>", html, re.S).group(0)


def bars(html: str) -> list[str]:
    return re.findall(r'<(?:g|rect) class="bar[^"]*" data-step="(\d+)"', svg(html))


def test_headline_holds_verdict_step_time_busy_and_top_finding():
    html = render_html(make_report())
    assert '<h1 id="verdict" class="verdict">This run is <span class="badge c-kernel">kernel-bound</span></h1>' in html
    assert '<div class="value" id="median-step">2.25 ms</div>' in html
    assert '<div class="value" id="device-busy">71.0%</div>' in html
    assert '<a href="#finding-1-num-workers">DataLoader runs in the main process</a>' in html
    assert "est. 1.25× (1.20–1.30×)</span> · saves 450 µs per step" in html
    assert "kernels take 61% of the step" in html


def test_one_bar_per_step_with_tooltip_and_segments():
    report = make_report(steps=6)
    html = render_html(report)
    assert bars(html) == [str(i) for i in range(1, 7)]
    chart = svg(html)
    assert chart.count("<g class=\"bar\"") == 6
    # step 0 of the factory: dataloader 300, kernel 1200, sync 60, transfer 90, host 250, comm 40, other 10 µs
    assert "<title>ProfilerStep#3: 1.95 ms — Kernels 62%, DataLoader 15%, Host 13%</title>" in chart
    assert "<title>ProfilerStep#3 · DataLoader: 300 µs (15.4%)</title>" in chart
    assert "<title>ProfilerStep#3 · Kernels: 1.20 ms (61.5%)</title>" in chart
    assert chart.count('<rect class="c-kernel"') == 6 and chart.count('<rect class="c-other"') == 6
    assert 'class="median"' in chart


def test_stacked_segments_sum_to_the_bar_height():
    html = render_html(make_report(steps=2))
    first = re.search(r'<g class="bar" data-step="1">(.*?)</g>', html, re.S).group(1)
    heights = [float(h) for h in re.findall(r'height="([\d.]+)"', first)]
    ys = [float(y) for y in re.findall(r' y="([\d.]+)"', first)]
    assert len(heights) == 7
    assert ys == sorted(ys, reverse=True)  # stacked upwards in category order
    assert ys[0] + heights[0] == pytest.approx(230.0, abs=0.2)  # the x axis (260 - 30)


def test_share_table_and_bar_per_category():
    html = render_html(make_report())
    for key, label, share in [("dataloader", "DataLoader", "15.5%"), ("kernel", "Kernels", "64.2%"),
                              ("other", "Other", "0.4%")]:
        row = re.search(rf'<tr data-category="{key}">(.*?)</tr>', html, re.S).group(1)
        assert label in row and f'<td class="num">{share}</td>' in row
        assert f'<span class="hbar c-{key}" style="width: {float(share[:-1]):.1f}%">' in row


def test_findings_with_evidence_fix_code_and_locations():
    report = make_report(findings=4)
    html = render_html(report)
    for f in report["findings"]:
        assert f'<span class="title">{f["title"]}</span>' in html
    assert html.count('<details class="finding') == 4
    assert '<tr><th>dataloader_share</th><td>17.0%</td></tr>' in html
    assert '<tr><th>pageable_bytes_per_step</th><td>25.2 MB</td></tr>' in html
    assert '<pre><code data-lang="python">loader = DataLoader(ds, batch_size=64, num_workers=8, pin_memory=True)</code></pre>' in html
    assert "Start with <code>num_workers</code> equal to the CPU cores per GPU." in html
    assert "<li><code>train.py:57 in train_step</code></li>" in html
    assert '<tr><th>wait_us_per_step</th><td>346 µs per step</td></tr>' in html
    assert '<tr><th>exposed_fraction</th><td>50.0%</td></tr>' in html


def test_finding_message_estimate_basis_thresholds_and_docs():
    html = render_html(make_report(findings=1))
    assert ('<div class="message"><p>The DataLoader takes 17.0% of the step in the main process. '
            'Record with <code>with_stack=True</code> to see the source lines.</p>') in html
    assert '<p class="basis">Thresholds: min_share 5.0%, high_share 20.0%.</p>' in html
    # the ceiling is JSON only: never shown, never as "up to" (issue 24)
    assert "the time the device waits for the next batch" not in html and "Bound" not in html
    assert "rule <code>num-workers</code> · details: <code>perfsleuth rules num-workers</code>" in html


def test_kernels_ops_metadata_and_warnings_are_shown():
    html = render_html(make_report(kernels=3, ops=2, warnings=["steps fell back to the whole trace"]))
    assert '<td class="name" title="ampere_sgemm_128x64_nn_0">ampere_sgemm_128x64_nn_0</td>' in html
    assert html.count('<td class="name"') == 5
    assert "<li>steps fell back to the whole trace</li>" in html
    assert "<tr><th>Device</th><td>NVIDIA A100-SXM4-80GB</td></tr>" in html
    assert "<tr><th>Rank / world size</th><td>0 / 16</td></tr>" in html
    assert "<tr><th>Events analysed</th><td>67,209</td></tr>" in html


def test_no_findings_one_step_cpu_only():
    html = render_html(make_report(steps=1, findings=0, kernels=0, ops=0, device=False))
    assert bars(html) == ["1"]
    assert '<h2>Findings: none</h2>' in html and 'id="no-findings">No rule fired on this trace.</p>' in html
    assert '<div class="value small">None</div><div class="sub">no rule fired on this trace</div>' in html
    assert '<div class="value muted" id="device-busy">n/a</div><div class="sub">CPU-only trace</div>' in html
    assert 'id="kernels"' not in html  # a CPU run has no Top kernels section (issue 37)
    assert "host-bound" in html


def test_no_steps_gives_a_note_not_a_chart():
    report = make_report(steps=0)
    html = render_html(report)
    assert "<svg" not in html and "The report has no steps to chart." in html


def test_500_steps_stay_compact():
    html = render_html(make_report(steps=500, findings=20, kernels=50, ops=50))
    assert bars(html) == [str(i) for i in range(1, 501)]
    assert len(svg(html)) < 200_000
    assert len(html.encode()) < 300_000
    assert svg(html).count("<path class=\"c-") == 7  # one path per category, not 3500 rects


def test_more_steps_than_bars_are_averaged_with_a_note():
    html = render_html(make_report(steps=2000))
    group = math.ceil(2000 / MAX_BARS)
    assert len(bars(html)) == math.ceil(2000 / group)
    assert f"each bar the mean of {group} consecutive steps" in html
    assert f"(mean of {group})" in html


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_worst_case_report_is_well_under_a_megabyte():
    html = render_html(make_report(steps=100_000, findings=500, kernels=5000, ops=5000,
                                   warnings=[f"{i} " + "w" * 10_000 for i in range(500)]))
    assert len(html.encode()) < 600_000
    assert "… 450 more findings in report.json" in html
    assert "… 4970 more kernels in report.json" in html


def test_hostile_names_are_escaped_everywhere():
    html = render_html(make_hostile_report())
    assert "<script>alert" not in html
    assert "<img src=x" not in html
    assert html.count("<script>") == 1  # our own progressive-enhancement script
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    urls = [a.get(k) for _, a in parse(html).tags for k in ("href", "src", "action") if a.get(k)]
    assert urls == ["data:,", "#finding-1-op-end-quot"]  # the favicon stub and the top finding's anchor
    text = "".join(parse(html).text)
    for name in ("<script>alert(1)</script>", HOSTILE["pipes"], HOSTILE["comment"]):
        assert name in text  # shown as text, intact


def test_nothing_is_loaded_from_the_network():
    html = render_html(make_report())
    for tag, attrs in parse(html).tags:
        for key in ("src", "href", "srcset", "action", "data", "poster"):
            value = attrs.get(key)
            assert value is None or value.startswith(("#", "data:")), (tag, key, value)
    assert not re.search(r"https?:|//[a-z]|@import|url\(", html, re.I)
    assert "<link rel=\"stylesheet\"" not in html and "<script src" not in html


def test_dark_mode_and_print_styles_are_inline():
    html = render_html(make_report())
    assert "@media (prefers-color-scheme: dark)" in html
    assert "@media print" in html
    assert '<meta name="color-scheme" content="light dark">' in html


def test_nan_and_missing_values_render_as_dashes():
    report = make_report(steps=3)
    report["summary"]["step_time_us"] = {"median": float("nan")}
    report["summary"]["time_share"]["kernel"] = float("inf")
    report["findings"][0]["ceiling"]["speedup"] = None
    report["findings"][0]["forecast"]["speedup"] = float("nan")
    del report["top_ops"]
    html = render_html(report)
    assert '<div class="value" id="median-step">—</div>' in html
    assert "nan" not in html.lower().replace("nanosecond", "")
    assert "No ops in this trace." in html


def test_report_set_renders_an_index_and_each_report_with_unique_ids():
    reports = [make_report(), make_report(device=False)]
    reports[1]["trace"]["path"] = "runs/rank1.json.gz"
    html = render_set_html({"schema": "perfsleuth/report-set@1", "tool": {"version": "0.1.0"}, "path": "runs",
                            "reports": reports, "skipped": [{"path": "notes.json", "problem": "not a trace"}]})
    ids = [a["id"] for _, a in parse(html).tags if "id" in a]
    assert len(ids) == len(set(ids))
    assert 'id="r1-verdict"' in html and 'id="r2-verdict"' in html
    # the index links to each trace's collapsible section (only the first is open)
    assert '<a href="#r2-section">runs/rank1.json.gz</a>' in html
    assert '<details class="trace-section" id="r1-section" open>' in html
    assert '<details class="trace-section" id="r2-section">' in html
    assert "<code>notes.json</code>: not a trace" in html
    assert html.count("<svg") == 2
    assert "Each trace below, collapsed: 2 with the full report." in html


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
@pytest.mark.parametrize("name", ["sampled_rank0_of128.json.gz", "a100_trace_diff_control.json.gz"])
def test_real_trace_report(real_traces, name):
    """A real trace end to end: the 1.8 MB sampled trace and the 35 MB one both give pages far under 1 MB."""
    from perfsleuth.api import analyze_path

    report = analyze_path(real_traces / name).to_dict()
    html = render_html(report)
    assert len(html.encode()) < 200_000
    assert f'<span class="badge c-{report["verdict"].removesuffix("-bound")}">{report["verdict"]}</span>' in html
    assert bars(html) == [str(i) for i in range(1, len(report["steps"]) + 1)]
    assert report["findings"]
    for f in report["findings"]:
        assert f'<span class="title">{escape(f["title"])}</span>' in html


def _ranks(n: int, **kw) -> dict:
    reports = []
    for i in range(n):
        r = make_report(findings=8, kernels=40, **kw)
        r["trace"]["path"], r["trace"]["rank"] = f"/runs/job/rank{i}.pt.trace.json.gz", i
        reports.append(r)
    reports.reverse()  # the index orders by rank, whatever the file order
    return {"schema": "perfsleuth/report-set@1", "tool": {"version": "0.1.0"}, "path": "/runs/job",
            "reports": reports, "skipped": []}


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
@pytest.mark.parametrize("n, all_full, all_sections", [(8, True, True), (64, False, True), (256, False, True),
                                                     (1000, False, False)])
def test_every_trace_of_a_directory_is_reached_within_the_budget(n, all_full, all_sections):
    """Many traces: an index row each, linking to a collapsible section: the full report while the 1 MB
    budget allows, a compact summary after that, the row alone for whatever would not fit (1000 ranks)."""
    from perfsleuth.render.set_page import MAX_PAGE_BYTES

    html = render_set_html(_ranks(n))
    assert len(html.encode()) <= MAX_PAGE_BYTES == 1_000_000
    ids = [a["id"] for _, a in parse(html).tags if "id" in a]
    assert len(ids) == len(set(ids))
    rows = re.findall(r'<tr id="r(\d+)-row"><td class="name">(?:<a href="#r\d+-section">)?rank(\d+)\.pt', html)
    assert [int(rank) for _, rank in rows] == list(range(n))  # every trace has its row, by rank
    links = re.findall(r'<a href="#(r\d+-section)">', html)
    sections = re.findall(r'<details class="trace-section" id="(r\d+-section)"', html)
    assert links == sections == [f"r{i}-section" for i in range(1, len(sections) + 1)]  # every link lands
    full = len(re.findall(r'<article class="report" id=', html))
    compact = len(re.findall(r'<article class="report compact" id=', html))
    assert full + compact == len(sections) and full >= (n if all_full else 1 if n < 1000 else 0)
    assert (len(sections) == n) == all_sections and len(sections) >= min(n, 250)
    expected = f"Each trace below, collapsed: {full} with the full report"
    if compact:
        expected += f", {compact} as a summary (shares and findings)"
    if not all_sections:
        expected += f"; {n - len(sections)} have their row above only, to keep the page under 1 MB (all in report.json)"
    assert expected + "." in html
    assert "more traces in report.json" not in html


def test_compact_section_keeps_the_verdict_shares_and_findings():
    html = render_set_html(_ranks(256))
    part = html[html.index('id="r256-section"'):]
    part = part[: part.index("</details>")]
    assert '<span class="badge c-kernel">kernel-bound</span> median step 2.25 ms' in part
    assert "Kernels 64.2%" in part and "DataLoader 15.5%" in part
    assert part.count("<li id=") == 5 and "… 3 more findings in report.json" in part
    assert '<li id="r256-finding-1-num-workers"><span class="sev">high</span> DataLoader runs in the main process' in part
