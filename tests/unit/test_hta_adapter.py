"""HTA's analyses run on perfsleuth's parsed trace (analyzer/analysis/hta_adapter.py, docs/hta.md)."""

import json
import logging
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from perfsleuth.analysis import hta_adapter
from perfsleuth.analysis.hta_adapter import hta_analyses, to_hta_trace
from perfsleuth.analysis.steps import find_steps
from perfsleuth.analysis.tables import _in_steps
from perfsleuth.api import analyze_file
from perfsleuth.trace.model import DEVICE_KINDS, KERNEL, load_trace
from perfsleuth.trace.names import is_comm, is_memory_kernel, name_mask

# file -> (sum of HTA's per-type kernel totals in the steps (µs), launches matched, streams in the idle
# breakdown, rank); None: CPU-only, HTA not applicable.
EXPECTED = {
    "a100_alexnet_small.json.gz": (66203.0, 98, 2, 0),
    "a100_cuda_event_sync.json.gz": (51.0, 5, 1, 0),
    "a100_nccl_2ranks.json.gz": (165183.0, 3774, 2, 0),
    "a100_rank0_of16_nccl.json.gz": (308437.0, 4934, 6, 0),  # steady steps: the first is warm-up
    "a100_trace_diff_control.json.gz": (501567.0, 9450, 4, 3),
    "a100_triton_example.json.gz": (2.0, 0, 1, 0),
    "b200_eager_inference.json.gz": (11636.0, 708, 1, 0),
    "cpu_only_tiny.pt.trace.json.gz": None,
    "cpu_rank_non_gpu.json.gz": None,
    "h100_qwen0.5b_inference.json.gz": (45336.0, 1197, 1, 0),
    "mi250_rocm_minitoy.json.gz": (146.0, 0, 1, 0),
    "mi300_resnet_act_checkpoint.json.gz": (45444.0, 0, 2, 0),  # steady steps: the first is warm-up
    "sampled_rank0_of128.json.gz": (607844.0, 1204, 5, 0),
    "v100_df_index_resolver.json.gz": (1000613.0, 22290, 2, 1),
    "v100_ns_resolution.pt.trace.json.gz": (472407.0, 6095, 1, 0),
    "v100_trace_diff_test.json.gz": (744097.0, 7681, 4, 1),  # steady steps: the first is warm-up
}


def _load(real_traces, name):
    trace = load_trace(real_traces / name)
    return trace, find_steps(trace)


def test_expected_covers_every_real_trace(real_traces):
    assert sorted(p.name for p in real_traces.glob("*.json.gz")) == sorted(EXPECTED)


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_real_trace_gives_a_small_json_dict_and_never_raises(real_traces, name):
    trace, steps = _load(real_traces, name)
    before = trace.events.copy(deep=True)
    result = hta_analyses(trace, steps)
    pd.testing.assert_frame_equal(trace.events, before)  # perfsleuth's frame is only read
    text = json.dumps(result, allow_nan=False)
    assert len(text) < 8000
    h = result["hta"]
    assert h["available"] is True and h["version"] == "0.6.1"
    if EXPECTED[name] is None:
        assert h == {"available": True, "version": "0.6.1", "applicable": False,
                     "reason": "CPU-only trace: no device work for HTA's GPU analyses"}
        return
    total, launches, streams, rank = EXPECTED[name]
    assert h["applicable"] is True and h["warnings"] == [] and h["rank"] == rank
    assert round(sum(h["kernel_type_totals_us"].values()), 3) == total
    assert h["launch_stats"]["launches"] == launches
    assert len(h["idle_time"]) == streams
    assert 1 <= len(h["top_kernels"]) <= 10
    # HTA's overlap-aware split covers the same device time as the per-type sums, less the overlaps.
    assert sum(r["time_us"] for r in h["kernel_type_breakdown"]) <= total + 1e-6


def _perfsleuth_kernel_totals_us(trace, steps) -> dict:
    """perfsleuth's own compute / communication / memory device time in the steps (its classification)."""
    ev = _in_steps(trace.events, steps)
    dev = ev[ev["kind"].isin(DEVICE_KINDS)]
    comm = name_mask(dev["name"], is_comm)
    mem = name_mask(dev["name"], is_memory_kernel) | (dev["kind"] != KERNEL).to_numpy()
    dur = dev["dur"].to_numpy()
    return {"COMMUNICATION": round(dur[comm & ~mem].sum() / 1000, 3),
            "COMPUTATION": round(dur[~comm & ~mem].sum() / 1000, 3),
            "MEMORY": round(dur[mem].sum() / 1000, 3)}


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
@pytest.mark.parametrize("name, hta_totals, own_totals, union_us", [
    ("a100_nccl_2ranks.json.gz",
     {"COMMUNICATION": 46876.0, "COMPUTATION": 115639.0, "MEMORY": 2668.0},
     {"COMMUNICATION": 46876.493, "COMPUTATION": 115655.847, "MEMORY": 2653.498}, 157490.0),
    ("a100_rank0_of16_nccl.json.gz",
     {"COMMUNICATION": 133126.0, "COMPUTATION": 143463.0, "MEMORY": 31848.0},
     {"COMMUNICATION": 133126.0, "COMPUTATION": 143463.0, "MEMORY": 31848.0}, 301303.0),
    ("v100_ns_resolution.pt.trace.json.gz",
     {"COMPUTATION": 468090.0, "MEMORY": 4317.0},
     {"COMMUNICATION": 0.0, "COMPUTATION": 468153.602, "MEMORY": 4300.839}, 472407.0),
])
def test_kernel_type_totals_match_perfsleuths_own_within_1_percent(real_traces, name, hta_totals, own_totals,
                                                                    union_us):
    report = analyze_file(real_traces / name)
    h = hta_analyses(report.trace, report.steps)["hta"]
    assert h["scope"] == "steps"
    assert h["kernel_type_totals_us"] == hta_totals
    own = _perfsleuth_kernel_totals_us(report.trace, report.steps)
    assert own == own_totals
    for kind, value in own.items():
        assert h["kernel_type_totals_us"].get(kind, 0.0) == pytest.approx(value, rel=0.01, abs=1.0)
    assert sum(h["kernel_type_totals_us"].values()) == pytest.approx(sum(own.values()), rel=0.01)
    # HTA's kernel-type split (intervals merged) sums to perfsleuth's device-busy time.
    split = sum(r["time_us"] for r in h["kernel_type_breakdown"])
    assert split == union_us
    assert split == pytest.approx(float(report.breakdown.steady()[1].sum()) / 1000, rel=0.01)  # steady steps


def test_a100_nccl_details(real_traces):
    h = hta_analyses(*_load(real_traces, "a100_nccl_2ranks.json.gz"))["hta"]
    assert h["kernel_type_breakdown"] == [
        {"kernel_type": "COMPUTATION", "time_us": 108318.0, "percentage": 68.8},
        {"kernel_type": "COMMUNICATION", "time_us": 39183.0, "percentage": 24.9},
        {"kernel_type": "COMPUTATION overlapping COMMUNICATION", "time_us": 7321.0, "percentage": 4.6},
        {"kernel_type": "MEMORY", "time_us": 2296.0, "percentage": 1.5},
        {"kernel_type": "COMMUNICATION overlapping MEMORY", "time_us": 372.0, "percentage": 0.2},
    ]
    assert h["top_kernels"][0] == {
        "name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "kernel_type": "COMMUNICATION", "total_us": 46761.0, "share": 0.2831, "mean_us": 3117.4,
        "max_us": 5993.0, "min_us": 1689.0}
    assert h["idle_time"] == [
        {"stream": 40, "idle_us": 583924.0, "host_wait_us": 583924.0, "kernel_wait_us": 0.0, "other_us": 0.0},
        {"stream": 7, "idle_us": 542244.0, "host_wait_us": 540058.0, "kernel_wait_us": 2186.0, "other_us": 0.0},
    ]
    assert h["launch_stats"] == {
        "launches": 3774, "cutoffs_us": {"runtime": 50, "launch_delay": 100},
        "cpu_duration_us": {"median": 9.0, "p90": 12.0, "max": 76.0},
        "gpu_duration_us": {"median": 6.0, "p90": 92.0, "max": 5993.0},
        "launch_delay_us": {"median": 2.0, "p90": 75.0, "max": 965.0},
        "short_kernels": 2026, "runtime_outliers": 1, "launch_delay_outliers": 266}


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_mi300_and_h100_do_not_crash(real_traces):
    # HTA's own parser raises TypeError on the MI300 trace, and its temporal breakdown an AssertionError
    # on the H100 one (docs/hta.md); the adapter never runs HTA's parser.
    mi300 = hta_analyses(*_load(real_traces, "mi300_resnet_act_checkpoint.json.gz"))["hta"]
    assert mi300["kernel_type_totals_us"] == {"COMMUNICATION": 31335.0, "COMPUTATION": 12803.0, "MEMORY": 1306.0}
    assert mi300["launch_stats"]["launches"] == 0
    assert "HIP launch calls are not followed" in mi300["launch_stats"]["note"]
    assert [r["stream"] for r in mi300["idle_time"]] == [0, 4]
    h100 = hta_analyses(*_load(real_traces, "h100_qwen0.5b_inference.json.gz"))["hta"]
    assert h100["kernel_type_totals_us"] == {"COMPUTATION": 45133.0, "MEMORY": 203.0}
    assert h100["warnings"] == []


def test_without_steps_the_whole_trace_is_analysed(real_traces):
    trace = load_trace(real_traces / "a100_alexnet_small.json.gz")
    h = hta_analyses(trace)["hta"]
    assert h["scope"] == "trace"
    dev = trace.events[trace.events["kind"].isin(DEVICE_KINDS)]
    assert sum(h["kernel_type_totals_us"].values()) == 66203.0 == dev["dur"].sum() / 1000


def test_hta_trace_frame_has_what_htas_analyses_read(real_traces):
    trace, steps = _load(real_traces, "a100_nccl_2ranks.json.gz")
    t = to_hta_trace(trace, steps)
    assert t.is_parsed and list(t.traces) == [0] and t.meta_data[0]["device_type"] == "NVIDIA GPU"
    df = t.get_trace(0)
    for col in ("index", "ts", "dur", "end", "cat", "name", "pid", "tid", "stream", "correlation",
                "external_id", "index_correlation", "iteration"):
        assert df[col].dtype == np.int64, col
    assert (df.index == df["index"]).all() and df["index"].iloc[0] == 1
    sym = t.symbol_table.get_sym_table()
    names = pd.Series(sym)[df["name"]].to_numpy()
    cats = pd.Series(sym)[df["cat"]].to_numpy()
    ev = _in_steps(trace.events, steps)
    assert (names == ev["name"].astype(str).to_numpy()).all()
    assert ((cats == "kernel") == (ev["kind"] == KERNEL).to_numpy()).all()
    # stream: the device tid for device work, -1 for everything on the host
    dev = np.isin(cats, ["kernel", "gpu_memcpy", "gpu_memset"])
    assert (df["stream"][~dev] == -1).all() and set(df["stream"][dev]) == {7, 40}
    # index_correlation links each kernel to its launch call and back
    k = df[(cats == "kernel") & (df["index_correlation"] > 0).to_numpy()]
    partner = df.loc[k["index_correlation"]]
    assert len(k) == 2700
    assert (partner["correlation"].to_numpy() == k["correlation"].to_numpy()).all()
    assert (partner["stream"] == -1).all() and (partner["index_correlation"].to_numpy() == k["index"].to_numpy()).all()
    # iteration from ProfilerStep#4..6, kernels inherit their launch's
    assert sorted(set(df["iteration"])) == [4, 5, 6]
    assert (df.loc[k.index, "iteration"].to_numpy() == partner["iteration"].to_numpy()).all()
    assert (df["dur"] == df["end"] - df["ts"]).all()


def test_hta_not_importable_gives_available_false(real_traces, monkeypatch):
    trace, steps = _load(real_traces, "a100_cuda_event_sync.json.gz")
    monkeypatch.setitem(sys.modules, "hta", None)
    h = hta_analyses(trace, steps)["hta"]
    assert h["available"] is False
    assert h["reason"].startswith("HolisticTraceAnalysis (pip install traceinsight) cannot be imported: ")
    assert set(h) == {"available", "reason"}


def test_an_hta_failure_is_a_warning_not_a_crash(real_traces, monkeypatch):
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis

    def boom(*a, **k):
        raise ValueError("No objects to concatenate")

    monkeypatch.setattr(BreakdownAnalysis, "get_idle_time_breakdown", boom)
    h = hta_analyses(*_load(real_traces, "a100_cuda_event_sync.json.gz"))["hta"]
    assert h["warnings"] == ["HTA idle_time failed: ValueError: No objects to concatenate"]
    assert "idle_time" not in h
    assert h["kernel_type_totals_us"] == {"COMPUTATION": 49.0, "MEMORY": 2.0}
    assert h["launch_stats"]["launches"] == 5


def test_hta_stays_quiet_and_draws_nothing(real_traces, monkeypatch, capsys, caplog):
    import plotly.basedatatypes

    def no_show(*a, **k):
        raise AssertionError("HTA tried to show a plotly figure")

    monkeypatch.setattr(plotly.basedatatypes.BaseFigure, "show", no_show)
    hta_logger = logging.getLogger("hta")
    level = hta_logger.level
    trace, steps = _load(real_traces, "a100_triton_example.json.gz")
    # Unsilenced, HTA logs "Processing stream 7" (INFO) and pandas emits Pandas4Warning/FutureWarning
    # for HTA's inplace= calls on every run.
    with caplog.at_level(logging.DEBUG), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        h = hta_analyses(trace, steps)["hta"]
    assert h["warnings"] == []
    assert [str(w.message) for w in caught] == []
    assert [r for r in caplog.records if r.name.startswith("hta")] == []
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    assert hta_logger.level == level


def test_report_json_carries_the_hta_block(real_traces):
    report = analyze_file(real_traces / "a100_cuda_event_sync.json.gz")
    report.extra.update(hta_analyses(report.trace, report.steps))
    d = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert d["hta"]["launch_stats"]["launches"] == 5
    assert d["hta"]["kernel_type_totals_us"] == {"COMPUTATION": 49.0, "MEMORY": 2.0}


def test_module_import_does_not_import_hta():
    import importlib
    import subprocess

    code = ("import sys; import perfsleuth.analysis.hta_adapter; "
            "print(any(m == 'hta' or m.startswith('hta.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    assert importlib.import_module("perfsleuth.analysis.hta_adapter") is hta_adapter
