"""issue 37, item 5: the HTML report's way into the trace, through the real CLI on real traces: the
timeline of the median steady step (named as the trace names it), kernel -> op cells on a GPU trace,
no Top kernels section on a CPU run, and no absolute path of the machine in the page."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from click.testing import CliRunner
from perfsleuth.cli.main import main


def analyze(real_traces, tmp_path, name: str) -> tuple[str, dict]:
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(real_traces / name, runs / name)
    out = runs / "out"
    run = CliRunner().invoke(main, ["analyze", str(runs / name), "-o", str(out)])
    assert run.exit_code == 0, run.output
    return (out / "report.html").read_text(), json.loads((out / "report.json").read_text())


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_cpu_run_page(real_traces, tmp_path):
    html, report = analyze(real_traces, tmp_path, "cpu_only_tiny.pt.trace.json.gz")
    assert 'id="kernels"' not in html and "Top kernels" not in html
    assert str(tmp_path) not in html  # the path is shown relative to the page
    assert '<span class="path">../cpu_only_tiny.pt.trace.json.gz</span>' in html
    tl = report["timeline"]
    assert re.fullmatch(r"ProfilerStep#\d+", tl["step"])
    assert {lane["kind"] for lane in tl["lanes"]} == {"host"}
    assert html.count('<rect class="ev ') == len(tl["events"]) > 0
    assert tl["steady_steps"] == 1 and f"{tl['step']}, the one steady step (" in html
    assert "host threads (the trace holds no device activity in this step)" in html
    assert 'data-trace="../cpu_only_tiny.pt.trace.json.gz"' in html


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_gpu_run_page(real_traces, tmp_path):
    html, report = analyze(real_traces, tmp_path, "a100_alexnet_small.json.gz")
    assert str(tmp_path) not in html
    tl = report["timeline"]
    assert {lane["kind"] for lane in tl["lanes"]} == {"host", "device"}
    assert len(tl["events"]) <= 800 and tl["events_in_step"] >= len(tl["events"])
    linked = [k for k in report["top_kernels"] if k["op"]]
    assert linked, "no kernel of a real GPU trace linked to its launching op"
    for k in linked[:5]:
        assert 0 < k["op_share"] <= 1
    assert html.count('<td class="name launch">') == min(len(report["top_kernels"]), 30)
    assert 'id="kernels"' in html and "): host threads, then device streams;" in html
