"""MFU beside HFU (issue 36): the model's FLOPs per step, counted by FlopCounterMode on one step by
`perfsleuth run` (record/model_flops.py) and carried in the trace's perfsleuth metadata, over the same
step time and peak as HFU; in JSON, terminal, Markdown, HTML and diff. Exact numbers on hand-built
traces; the counter itself on a matmul of known size."""

from __future__ import annotations

import json

import pytest

from perfsleuth.api import analyze_path
from perfsleuth.config import Config
from perfsleuth.record import model_flops
from tracebuilder import TraceBuilder

M, N, K = 256, 512, 1024
ADDMM = {"Input Dims": [[N], [M, K], [K, N], [], []], "Input type": ["float"] * 3 + ["Scalar"] * 2,
         "Concrete Inputs": ["", "", "", "1", "1"]}
ADDMM_FLOPS = 2 * M * N * K + M * N
MODEL = 2 * M * N * K  # FlopCounterMode leaves the bias add out
COUNTED = {"flops_per_step": MODEL, "source": model_flops.SOURCE, "by_op": {"aten.addmm": MODEL},
           "step_s": 0.01, "unprofiled_step_s": 0.002, "unavailable": None}


def _cpu_doc(final: dict | None) -> dict:
    tb = TraceBuilder(device=False)
    tb.step(1, 0, 1000)
    tb.op("aten::addmm", 100, 400, **ADDMM)
    tb.step(2, 1000, 1000)
    tb.op("aten::addmm", 1100, 200, **ADDMM)
    doc = tb.build()
    if final is not None:  # as `perfsleuth run` writes them (record/trace_metadata.py)
        doc["perfsleuth"], doc["perfsleuth_final"] = {"version": 1}, final
    return doc


def _report(tmp_path, final: dict | None, config=None) -> dict:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_cpu_doc(final)))
    return analyze_path(path, config or Config(peak_tflops=1.0)).to_dict()


def test_mfu_is_the_counted_model_flops_over_the_step_time_and_the_same_peak(tmp_path):
    e = _report(tmp_path, {"model_flops": COUNTED})["efficiency"]
    assert e["step_time_us"] == 1000.0  # two steps of 1000 µs
    assert e["hfu"] == pytest.approx(ADDMM_FLOPS / 1000e-6 / 1e12)
    assert e["model_flops_per_step"] == MODEL
    assert e["model_flops_source"] == "torch.utils.flop_counter.FlopCounterMode"
    assert e["mfu"] == pytest.approx(MODEL / 1000e-6 / 1e12)  # 0.268435456
    assert e["mfu"] == pytest.approx(0.268435456)
    assert e["mfu_unavailable"] is None
    assert e["model_flops_cost"] == {"step_s": 0.01, "unprofiled_step_s": 0.002}


def test_no_count_says_why(tmp_path):
    e = _report(tmp_path, None)["efficiency"]
    assert e["mfu"] is None and e["model_flops_per_step"] is None
    assert e["mfu_unavailable"] == model_flops_not_run()
    skipped = model_flops.blank("not counted: torch.compile ran in this run's steps, and ...")
    e = _report(tmp_path, {"model_flops": skipped})["efficiency"]
    assert e["mfu"] is None and e["mfu_unavailable"].startswith("not counted: torch.compile")


def model_flops_not_run() -> str:
    from perfsleuth.analysis.efficiency.roofline import NOT_RUN

    return NOT_RUN


def test_counted_flops_without_a_peak_are_shown_without_mfu(tmp_path):
    e = _report(tmp_path, {"model_flops": COUNTED}, Config())["efficiency"]
    assert e["peak_flops_per_s"] is None and e["hfu"] is None
    assert e["model_flops_per_step"] == MODEL and e["mfu"] is None
    assert e["mfu_unavailable"] == "no peak for the device"


def test_a_malformed_count_is_dropped_with_a_warning(tmp_path):
    d = _report(tmp_path, {"model_flops": {"flops_per_step": -5}})
    assert d["efficiency"]["mfu"] is None
    assert any("model_flops metadata was ignored" in w for w in d["warnings"])


def test_every_output_labels_hfu_and_mfu(tmp_path):
    from perfsleuth.render.html import render_html
    from perfsleuth.render.markdown import render_markdown
    from perfsleuth.render.terminal import render_terminal

    d = _report(tmp_path, {"model_flops": COUNTED})
    term, md, html = render_terminal(d), render_markdown(d), render_html(d)
    for text in (term, md, html):
        assert "HFU 26.9% of the given fp32 peak" in text  # (2·256·512·1024 + 256·512) / 1 ms / 1 TFLOP/s
        assert "MFU 26.8% of the same peak" in text
        assert "268 MFLOP/step counted by FlopCounterMode" in text
        assert "the counted step took 10.00 ms, an unprofiled one 2.00 ms" in text
    none = _report(tmp_path, None)
    assert "MFU not available: no model FLOPs" in render_terminal(none)


def test_diff_shows_the_change_in_mfu(tmp_path):
    from perfsleuth.render.efficiency_text import diff_lines, efficiency_change

    base = _report(tmp_path, {"model_flops": COUNTED})
    half = {**COUNTED, "flops_per_step": MODEL // 2}
    head = _report(tmp_path, {"model_flops": half})
    change = efficiency_change(base, head)
    assert change["mfu_change"] == pytest.approx(-MODEL / 2 / 1000e-6 / 1e12)
    assert change["head"]["model_flops_per_step"] == MODEL // 2
    line = diff_lines({"efficiency": change})[1]
    assert "MFU 26.8% → 13.4% (model FLOPs/step 268 MFLOP → 134 MFLOP, FlopCounterMode)" in line


def test_flops_step_counts_one_step_between_two_boundaries():
    import torch

    plain = [1000.0, 3000.0, 2000.0]
    step = model_flops.FlopsStep(True, "", compiled=lambda: False, plain_steps=lambda: plain)
    assert step.main_done() and step.pending
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    torch.mm(a, b)
    torch.relu(a)  # elementwise: not in FlopCounterMode's registry
    assert step.step() and not step.pending
    torch.mm(a, b)  # after the boundary: not counted
    got = step.final()
    assert got["flops_per_step"] == 2 * 8 * 16 * 4
    assert got["by_op"] == {"aten.mm": 2 * 8 * 16 * 4}
    assert got["unprofiled_step_s"] == 0.002 and got["unavailable"] is None
    assert got["step_s"] >= 0


def test_flops_step_skips_with_a_reason():
    off = model_flops.FlopsStep(False, "not counted: shapes were not recorded (--record-shapes)",
                                compiled=lambda: False, plain_steps=list)
    assert not off.main_done() and off.final()["unavailable"].endswith("(--record-shapes)")
    compiled = model_flops.FlopsStep(True, "", compiled=lambda: True, plain_steps=list)
    assert not compiled.main_done() and "torch.compile" in compiled.final()["unavailable"]
    early = model_flops.FlopsStep(True, "", compiled=lambda: False, plain_steps=list)
    assert early.final()["unavailable"].startswith("the run ended before the step")
    cut = model_flops.FlopsStep(True, "", compiled=lambda: False, plain_steps=list)
    assert cut.main_done()
    cut.finish()  # the run ended inside the counted step
    assert cut.final() == model_flops.blank("the run ended inside the step FlopCounterMode counted")


def test_run_passes_its_peak_to_the_analysis(tmp_path):
    """`perfsleuth run --peak-tflops` (RunConfig.peak_tflops) reaches the report of the run's trace."""
    from perfsleuth.record.config import RunConfig
    from perfsleuth.record.outcome import analyze

    path = tmp_path / "t.json"
    path.write_text(json.dumps(_cpu_doc({"model_flops": COUNTED})))
    e = analyze(path, (), RunConfig(peak_tflops=2.0)).to_dict()["efficiency"]
    assert e["peak_source"] == "user-given: 2 TFLOP/s" and e["peak_flops_per_s"] == 2e12
    assert e["mfu"] == pytest.approx(MODEL / 1000e-6 / 2e12)
    arch = {"mem_bw_gbps": 100, "max_achievable_tflops": {"matrix_fp32": 4.0, "vector_fp32": 1.0}}
    e = analyze(path, (), RunConfig(peak_arch=arch)).to_dict()["efficiency"]
    assert e["peak_flops_per_s"] == 4e12 and e["peak_bytes_per_s"] == 100e9
    assert analyze(path, ()).to_dict()["efficiency"]["peak_flops_per_s"] is None  # none given, none measured


def test_run_reads_the_peak_options_and_the_pyproject_before_the_script(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from perfsleuth.cli.main import main

    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    monkeypatch.chdir(tmp_path)
    bad = CliRunner().invoke(main, ["run", "--peak-arch", str(tmp_path / "missing.json"), str(script)])
    assert bad.exit_code == 2 and "missing.json: cannot read the peak file" in bad.output
    (tmp_path / "pyproject.toml").write_text("[tool.perfsleuth]\npeak_tflops = -1\n")
    bad = CliRunner().invoke(main, ["run", str(script)])
    assert bad.exit_code == 2 and "peak_tflops must be above 0" in bad.output


def test_perfsleuth_diff_shows_mfu_in_json_terminal_and_markdown(tmp_path):
    """Two runs' traces with their measured CPU peak (1 TFLOP/s) and FlopCounterMode counts: `diff`."""
    from click.testing import CliRunner

    from perfsleuth.cli.main import main
    from perfsleuth.record.cpu_peak import _peak

    peak = _peak(1.0, 10.0, 2, "measured")
    paths = []
    for name, flops in (("base.json", MODEL), ("head.json", MODEL // 2)):
        path = tmp_path / name
        path.write_text(json.dumps(_cpu_doc({"model_flops": {**COUNTED, "flops_per_step": flops},
                                             "peak": peak})))
        paths.append(str(path))
    out = CliRunner().invoke(main, ["diff", *paths, "--json", str(tmp_path / "d.json"),
                                    "--markdown", str(tmp_path / "d.md")])
    assert out.exit_code == 0, out.output
    e = json.loads((tmp_path / "d.json").read_text())["efficiency"]
    assert e["base"]["mfu"] == pytest.approx(0.268435456) and e["head"]["mfu"] == pytest.approx(0.134217728)
    assert e["mfu_change"] == pytest.approx(-0.134217728)
    said = "MFU 26.8% → 13.4% (model FLOPs/step 268 MFLOP → 134 MFLOP, FlopCounterMode)"
    assert said in out.output and said in (tmp_path / "d.md").read_text()


def test_run_takes_the_peak_from_its_options_or_the_pyproject(tmp_path, monkeypatch):
    """What `perfsleuth run` hands the run (the script itself replaced: no process starts)."""
    from click.testing import CliRunner

    from perfsleuth.cli.main import main
    from perfsleuth.record import runner

    seen = []

    def fake_run(job, config, folder, **kw):
        seen.append(config)
        raise SystemExit(7)

    monkeypatch.setattr(runner, "run_script", fake_run)
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    (tmp_path / "pyproject.toml").write_text("[tool.perfsleuth]\npeak_tflops = 3.5\n")
    assert CliRunner().invoke(main, ["run", "--record-shapes", str(script)]).exit_code == 7
    assert seen[-1].peak_tflops == 3.5 and seen[-1].record_shapes and seen[-1].count_flops
    arch = tmp_path / "arch.json"
    arch.write_text(json.dumps({"mem_bw_gbps": 50, "max_achievable_tflops": {"matrix_fp32": 1.5}}))
    got = CliRunner().invoke(main, ["run", "--peak-tflops", "9", "--peak-arch", str(arch), str(script)])
    assert got.exit_code == 7
    assert seen[-1].peak_tflops == 9.0  # the option wins over the pyproject
    assert seen[-1].peak_arch["max_achievable_tflops"]["matrix_fp32"] == 1.5


def test_the_measured_cpu_peak_names_its_thread_count_in_words():
    from perfsleuth.record.cpu_peak import _peak

    assert _peak(1.0, 10.0, 1, "measured")["name"] == "this CPU (1 thread)"
    assert _peak(1.0, 10.0, 2, "measured")["name"] == "this CPU (2 threads)"
