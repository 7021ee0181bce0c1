"""The HTML page's way into the trace (render/timeline_html.py, templates): the timeline's SVG,
hostile names escaped, the Perfetto button's relative path, kernel -> op -> line cells, sortable
tables, no Top kernels section on a CPU run, no absolute path in the page."""

import copy
import re

import pytest
from perfsleuth.api import analyze_file
from perfsleuth.render.html import render_html
from perfsleuth.render.outputs import write_outputs
from perfsleuth.render.timeline_html import marks, shown_path
from report_factory import make_report
from tracebuilder import TraceBuilder
from tracebuilder_rules import RuleTraceBuilder

HOSTILE = '<img src=x onerror=alert(1)>"&\u202e'


@pytest.fixture(scope="module")
def gpu_report(tmp_path_factory):
    tb = RuleTraceBuilder()
    tb.step(1, 0, 400)
    root = tb.py("train.py(10): <module>", 0, 400)
    tb.py("model.py(42): forward", 5, 300, parent=root)
    tb.typed_launch("aten::mm", ["float"], "sgemm_kernel", host=(10, 20), device=(40, 100))
    tb.op(HOSTILE, 200, 30)
    path = tb.write(tmp_path_factory.mktemp("tl") / "t.json.gz")
    return analyze_file(path).to_dict()


def svg_of(html: str) -> str:
    return re.search(r'<svg class="timeline".*?</svg>', html, re.S).group(0)


def test_timeline_svg_has_a_lane_per_thread_and_stream_and_a_rect_per_event(gpu_report):
    html = render_html(gpu_report)
    svg = svg_of(html)
    tl = gpu_report["timeline"]
    assert svg.count('<g class="lane host"') == 1 and svg.count('<g class="lane device"') == 1
    assert len(re.findall(r'<rect class="ev ', svg)) == len(tl["events"]) == 4
    assert "ProfilerStep#1, the one steady step (400 µs)" in html
    # aten::mm [10, 30) at x = 170 + 10 * 830/400: the lane's first event
    mm = '<rect class="ev c-host" x="190.8" y="22.5" width="41.5" height="10">'
    assert mm + "<title>aten::mm — 20 µs · Host</title></rect>" in svg


def test_hostile_names_in_the_timeline_are_escaped(gpu_report):
    svg = svg_of(render_html(gpu_report))
    assert (
        "<img" not in svg and "&lt;img src=x onerror=alert(1)&gt;&quot;&amp;&lt;U+202E&gt;" in svg
    )
    assert "\u202e" not in svg


def test_marks_follow_the_findings_categories():
    report = {
        "findings": [
            {"rule": "a", "category": "sync"},
            {"rule": "b", "category": "sync"},
            {"rule": "c", "category": "other"},
            {"rule": "d", "category": "nonsense"},
        ]
    }
    assert marks(report) == {"sync": ["a", "b"]}


def test_a_marked_event_is_outlined_and_says_which_finding(gpu_report):
    report = copy.deepcopy(gpu_report)
    report["findings"] = [{"rule": "my-rule", "category": "kernel", "title": "t"}]
    svg = svg_of(render_html(report))
    (rect,) = re.findall(r'<rect class="ev c-kernel marked"[^>]*><title>([^<]*)</title>', svg)
    assert rect == "sgemm_kernel — 100 µs · Kernels · finding: my-rule"
    assert 'class="ev c-host marked"' not in svg


def test_kernel_rows_name_the_launching_op_and_line(gpu_report):
    html = render_html(gpu_report)
    row = re.search(
        r'<tr><td class="num" data-v="1">1</td>'
        r'<td class="name" title="sgemm_kernel">.*?</tr>',
        html,
        re.S,
    ).group(0)
    assert '<td class="name launch">aten::mm</td>' in row
    assert '<td class="name source">model.py:42 in forward (first line of the function)</td>' in row
    assert 'data-v="100.0"' in row  # the total, as the sort key


@pytest.mark.parametrize(
    "path, base, shown",
    [
        ("/home/runner/work/x/trace.json.gz", "/home/runner/work/x/out", "../trace.json.gz"),
        ("/home/runner/work/x/out/t.json", "/home/runner/work/x/out", "t.json"),
        (
            "/home/runner/work/x/trace.json.gz",
            "/tmp/a/b/c",
            "trace.json.gz",
        ),  # 3+ folders up: the name only
        ("/home/runner/work/x/trace.json.gz", None, "trace.json.gz"),
        ("s3://bucket/t.json.gz", "/tmp", "s3://bucket/t.json.gz"),
        ("", "/tmp", ""),
    ],
)
def test_shown_path(path, base, shown):
    assert shown_path(path, base) == shown


def test_the_page_holds_no_absolute_trace_path(gpu_report, tmp_path):
    report = copy.deepcopy(gpu_report)
    report["trace"]["path"] = str(tmp_path / "runs" / "t.json.gz")
    write_outputs(report, out_dir=tmp_path / "runs" / "out")
    html = (tmp_path / "runs" / "out" / "report.html").read_text()
    assert str(tmp_path) not in html
    assert '<span class="path">../t.json.gz</span>' in html
    assert 'data-trace="../t.json.gz"' in html and "<title>perfsleuth: " in html
    assert "<th>Trace</th><td>../t.json.gz</td>" in html


def test_cpu_run_has_no_top_kernels_section_and_a_gpu_run_without_kernels_says_why():
    cpu = make_report(device=False)
    cpu["top_kernels"] = []
    html = render_html(cpu)
    assert 'id="kernels"' not in html and "Top kernels" not in html
    gpu = make_report()
    gpu["top_kernels"] = []
    assert "no kernel, copy or memset ran in the analysed steps" in render_html(gpu)


def test_every_data_table_has_a_header_to_sort_by(gpu_report):
    html = render_html(gpu_report)
    assert (
        html.count('<table class="data sortable">') == 2
    )  # kernels, ops (this trace has no shapes)
    assert (
        "sortBy(table, col, th)" in html
    )  # the page's one script sorts every table with a <thead>


def test_no_timeline_section_without_one():
    html = render_html(make_report())
    assert (
        '<section id="timeline"' not in html
        and '<button type="button" class="perfetto"' not in html
    )


def test_the_timeline_is_bounded_on_the_page(tmp_path):
    tb = TraceBuilder(device=False)
    tb.step(1, 0, 4900)  # merge threshold 4.9 µs
    for t in range(5):
        for i in range(400):  # 10 µs each, 12 µs apart, on five threads: 2,000 events, none merged
            tb.op(f"op{i}", 12 * i, 10, tid=2000 + t)
    report = analyze_file(tb.write(tmp_path / "t.json.gz")).to_dict()
    svg = svg_of(render_html(report))
    assert len(re.findall(r'<rect class="ev ', svg)) == 800
    assert report["timeline"]["dropped"] == {"events": 1200, "us": 12000.0}
    assert len(svg.encode()) < 150_000


def test_the_efficiency_table_sorts_by_numbers():
    from perfsleuth.render.efficiency_html import efficiency_html

    op = {
        "name": "aten::mm",
        "shape": "[2]",
        "dtype": "fp32",
        "count": 3,
        "time_us": 10.0,
        "flops_per_s": 1e12,
        "pct_of_roofline": 0.5,
        "bound": "compute",
        "lost_us_per_step": None,
    }
    html = efficiency_html({"efficiency": {"ops": [op]}})
    assert '<table class="data sortable">' in html
    row = html[html.index("<tbody>") :]
    assert (
        '<td>aten::mm</td><td>[2]</td><td>fp32</td><td data-v="3.0">3</td>'
        '<td data-v="10.0">10 µs</td><td data-v="1000000000000.0">1 TFLOP/s</td>'
        '<td data-v="0.5">50.0%</td><td>compute</td><td>—</td>'
    ) in row


def test_a_hostile_thread_name_is_escaped_in_its_lane(tmp_path):
    tb = TraceBuilder(device=False)
    tb.step(1, 0, 100)
    tb.op("aten::mm", 2, 20)
    tb.events.append(
        {
            "ph": "M",
            "name": "thread_name",
            "pid": 1000,
            "tid": 1000,
            "args": {"name": "<script>alert(1)</script>"},
        }
    )
    report = analyze_file(tb.write(tmp_path / "t.json")).to_dict()
    assert report["timeline"]["lanes"][0]["name"] == "<script>alert(1)</script> · pid 1000"
    svg = svg_of(render_html(report))
    assert "<script>" not in svg
    assert "<title>&lt;script&gt;alert(1)&lt;/script&gt; · pid 1000</title>" in svg


def test_a_set_page_shows_its_folder_relative_to_the_page(tmp_path):
    reports = []
    for i in range(2):
        r = make_report()
        r["trace"]["path"], r["trace"]["rank"] = str(tmp_path / "runs" / f"rank{i}.json"), i
        reports.append(r)
    data = {"schema": "perfsleuth/report-set@1", "tool": {"version": "0.1.0"},
            "path": str(tmp_path / "runs"), "reports": reports, "skipped": []}
    write_outputs(data, html=tmp_path / "out" / "set.html")
    html = (tmp_path / "out" / "set.html").read_text()
    assert str(tmp_path) not in html
    assert "2 traces in <code>../runs</code>" in html
    assert '<span class="path">../runs/rank1.json</span>' in html
