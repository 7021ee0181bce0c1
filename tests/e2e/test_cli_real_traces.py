"""Integration: the real CLI on the real traces in fixtures/traces/real."""

import gzip
import json
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner
from perfsleuth.analysis.attribution import CATEGORIES
from perfsleuth.cli.main import main

# file -> (steps, steps_source, device_type, device name prefix, rank, world_size)
EXPECTED = {
    "a100_alexnet_small.json.gz": (1, "whole-trace", "cuda", "NVIDIA A100-PG509-200", 0, None),
    "a100_cuda_event_sync.json.gz": (1, "ProfilerStep", "cuda", "NVIDIA A100-PG509-200", 0, None),
    "a100_nccl_2ranks.json.gz": (3, "ProfilerStep", "cuda", "NVIDIA A100-PG509-200", 0, 2),
    "a100_rank0_of16_nccl.json.gz": (5, "ProfilerStep", "cuda", "NVIDIA A100-SXM4-80GB", 0, 16),
    "a100_trace_diff_control.json.gz": (6, "ProfilerStep", "cuda", "NVIDIA A100-PG509-200", 3, 8),
    "a100_triton_example.json.gz": (1, "ProfilerStep", "cuda", "NVIDIA A100-PG509-200", None, None),
    "b200_eager_inference.json.gz": (1, "whole-trace", "cuda", "NVIDIA B200", 0, 8),
    "cpu_only_tiny.pt.trace.json.gz": (1, "ProfilerStep", "cpu", None, 34, 300),
    "cpu_rank_non_gpu.json.gz": (1, "ProfilerStep", "cpu", None, 0, None),
    "h100_qwen0.5b_inference.json.gz": (1, "ProfilerStep", "cuda", "NVIDIA H100 80GB HBM3", None, None),
    "mi250_rocm_minitoy.json.gz": (2, "ProfilerStep", "rocm", "AMD Radeon Graphics", None, None),
    "mi300_resnet_act_checkpoint.json.gz": (3, "ProfilerStep", "rocm", "AMD Instinct MI300X", 0, 8),
    "sampled_rank0_of128.json.gz": (2, "ProfilerStep", "cuda", None, 0, 128),
    "v100_df_index_resolver.json.gz": (5, "ProfilerStep", "cuda", "Tesla V100-SXM2-32GB", 1, 2),
    "v100_ns_resolution.pt.trace.json.gz": (5, "ProfilerStep", "cuda", "Tesla V100-SXM2-32GB", 0, 1),
    "v100_trace_diff_test.json.gz": (6, "ProfilerStep", "cuda", "Tesla V100-SXM2-16GB", 1, 2),
}

# Verdicts the trace itself justifies (see docs/attribution.md, "The real traces").
VERDICTS = {
    # sync 33% (6 blocking device-to-host reads per step), but removing them is forecast at 1.005x: host 32%
    "a100_rank0_of16_nccl.json.gz": "host-bound",
    "v100_ns_resolution.pt.trace.json.gz": "kernel-bound",  # device busy 98 % of each step
    "h100_qwen0.5b_inference.json.gz": "kernel-bound",  # device busy 92 %
    "a100_alexnet_small.json.gz": "host-bound",  # 43 s of CPU-only work before 0.1 s of GPU work
    "b200_eager_inference.json.gz": "host-bound",  # eager decode: tiny kernels, device busy 13 %
    "mi250_rocm_minitoy.json.gz": "host-bound",  # toy model: microsecond kernels, ms of Python
}


def analyze_json(path, tmp_path):
    out = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["analyze", str(path), "--json", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result, json.loads(out.read_text())


def test_expected_table_covers_every_real_trace(real_traces):
    assert sorted(p.name for p in real_traces.glob("*.json.gz")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_trace(name, real_traces, tmp_path):
    result, rep = analyze_json(real_traces / name, tmp_path)
    n_steps, source, dtype, device, rank, world = EXPECTED[name]
    assert rep["schema"] == "perfsleuth/report@1"
    assert len(rep["steps"]) == n_steps
    assert rep["steps_source"] == source
    assert rep["trace"]["device_type"] == dtype
    assert rep["trace"]["device"] == device
    assert (rep["trace"]["rank"], rep["trace"]["world_size"]) == (rank, world)
    for st in rep["steps"]:
        assert list(st["time_us"]) == list(CATEGORIES)
        assert all(v >= 0 for v in st["time_us"].values())
        assert sum(st["time_us"].values()) == pytest.approx(st["duration_us"], abs=0.01)
    assert sum(rep["summary"]["time_share"].values()) == pytest.approx(1.0, abs=1e-3)
    assert rep["verdict"] in ("dataloader-bound", "kernel-bound", "sync-bound", "transfer-bound",
                              "host-bound", "communication-bound")
    if name in VERDICTS:
        assert rep["verdict"] == VERDICTS[name]
    if dtype == "cpu":
        assert rep["summary"]["device_busy"] is None
        assert rep["summary"]["time_share"]["sync"] == 0.0
    assert f"verdict: {rep['verdict'].upper()}" in result.output
    if source != "ProfilerStep":
        assert "warning:" in result.output


def test_directory_gives_one_report_per_trace(real_traces, tmp_path):
    d = tmp_path / "tb_logs"
    d.mkdir()
    for name in ("mi250_rocm_minitoy.json.gz", "cpu_only_tiny.pt.trace.json.gz"):
        shutil.copy(real_traces / name, d / name)
    (d / "notes.txt").write_text("not a trace")
    out = tmp_path / "set.json"
    result = CliRunner().invoke(main, ["analyze", str(d), "--json", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["schema"] == "perfsleuth/report-set@1"
    assert [r["trace"]["device_type"] for r in data["reports"]] == ["cpu", "rocm"]
    assert data["path"] == str(d) and all(r["trace"]["path"].startswith(str(d) + "/") for r in data["reports"])
    # the terminal: an index, one row per file (by rank, then path), not the full reports
    lines = result.stdout.splitlines()
    assert lines[0] == f"perfsleuth 0.1.0 — 2 traces in {d}"
    assert lines[2].split() == ["rank", "verdict", "median", "step", "top", "finding", "file"]
    cpu, rocm = (r for r in data["reports"])
    assert lines[3].split()[0] == str(cpu["trace"]["rank"]) and lines[3].endswith("  cpu_only_tiny.pt.trace.json.gz")
    assert lines[4].split()[:2] == ["-", "host-bound"] and lines[4].endswith("  mi250_rocm_minitoy.json.gz")
    # the top finding with the number its report shows (exposed-communication has no forecast), never "up to"
    assert lines[3].split()[1] == cpu["verdict"] and f" {cpu['findings'][0]['rule']} (no forecast) " in lines[3]
    assert lines[5:] == ["", "(perfsleuth analyze DIR --details prints each trace's full report)", f"wrote {out}"]
    assert "verdict:" not in result.stdout
    verbose = CliRunner().invoke(main, ["analyze", str(d), "--details"], catch_exceptions=False)
    assert verbose.exit_code == 0 and verbose.stdout.startswith("\n".join(lines[:5]) + "\n\nperfsleuth 0.1.0 — ")
    assert verbose.stdout.count("verdict:") == 2
    assert verbose.stdout.index("cpu_only_tiny") < verbose.stdout.index("verdict: ") < verbose.stdout.rindex("mi250")
    # --verbose, its old name, still works and says the new one; -v is logging only
    old = CliRunner().invoke(main, ["analyze", str(d), "--verbose"], catch_exceptions=False)
    assert (old.exit_code, old.stdout) == (0, verbose.stdout)
    assert old.stderr == "perfsleuth: analyze --verbose is now --details (-v before the command is more logging)\n"
    assert "--verbose" not in CliRunner().invoke(main, ["analyze", "--help"]).stdout
    assert "-v, --verbose" in CliRunner().invoke(main, ["--help"]).stdout


def test_console_script_runs(real_traces):
    exe = shutil.which("perfsleuth")
    assert exe, "the perfsleuth console script is installed by `pip install -e .`"
    proc = subprocess.run([exe, "analyze", str(real_traces / "mi250_rocm_minitoy.json.gz")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "verdict: HOST-BOUND" in proc.stdout


def _bad_inputs(tmp_path):
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "notjson.json").write_text("hello")
    (tmp_path / "truncated.json").write_text('{"traceEvents": [{"ph": "X", ')
    full = gzip.compress(json.dumps({"traceEvents": [{"ph": "X", "ts": 1, "dur": 2}] * 50}).encode())
    (tmp_path / "truncated.json.gz").write_bytes(full[: len(full) // 2])
    (tmp_path / "list.json").write_text("[1, 2, 3]")
    (tmp_path / "obj.json").write_text('{"hello": 1}')
    (tmp_path / "noevents.json").write_text('{"traceEvents": []}')
    (tmp_path / "emptydir").mkdir()
    return {
        "missing.json": "no such file",
        "empty.json": "empty file",
        "notjson.json": "not valid JSON",
        "truncated.json": "not valid JSON",
        "truncated.json.gz": "gzip",
        "list.json": "not a PyTorch profiler trace",
        "obj.json": "no 'traceEvents'",
        "noevents.json": "no complete events",
        "emptydir": "no trace files",
    }


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for name, problem in _bad_inputs(tmp_path).items():
        result = CliRunner().invoke(main, ["analyze", str(tmp_path / name)])
        assert result.exit_code == 2, (name, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1, (name, result.output)
        assert str(tmp_path / name) in lines[0] and problem in lines[0], (name, lines[0])
        assert "Traceback" not in result.output


def test_existing_json_is_not_overwritten(real_traces, tmp_path):
    out = tmp_path / "report.json"
    out.write_text("precious")
    result = CliRunner().invoke(main, ["analyze", str(real_traces / "mi250_rocm_minitoy.json.gz"),
                                       "--json", str(out)])
    assert result.exit_code == 2
    assert "exists" in result.output
    assert out.read_text() == "precious"
