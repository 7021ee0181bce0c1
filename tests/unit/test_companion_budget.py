"""The stacks companion costs an analysis no more than the main trace (issue 24): it is loaded only when a
finding cites a location table that is empty, never when it is larger on disk than the main trace (beyond
`Config.companion_free_bytes`), and then a one-line note says how to get its lines. Hand-built traces."""

import gzip
import json

import pytest
from perfsleuth.api import analyze_file
from perfsleuth.config import Config
from perfsleuth.facts import stacks
from tracebuilder_rules import DTOH, RuleTraceBuilder

COMPANION = "trace.stacks.pt.trace.json.gz"


def waited_item(tb: RuleTraceBuilder, t0: float) -> None:
    """A kernel, then `.item()` waiting for it (item-sync, which cites `sync_sites`), then another kernel."""
    tb.launch("k1", host=(t0, 5), device=(t0 + 10, 300))
    tb.op("aten::item", t0 + 100, 220)
    tb.op("aten::_local_scalar_dense", t0 + 101, 218)
    tb.copy(DTOH, host=(t0 + 102, 216), device=(t0 + 311, 1), nbytes=4)
    tb.launch("k2", host=(t0 + 500, 5), device=(t0 + 510, 400))


def kernels_only(tb: RuleTraceBuilder, t0: float) -> None:
    tb.launch("k1", host=(t0, 5), device=(t0 + 10, 900))


def run_folder(tmp_path, step, companion_meta=None, pad: int = 0):
    """A run's folder: the main trace (no stacks, 3 steps of `step`) naming its companion (1 step of `step`,
    with the user frame `train.py(57): train_step` around the `.item()`, and `pad` more python frames)."""
    main = RuleTraceBuilder()
    for i in range(3):
        main.step(7 + i, i * 1000, 1000)
        step(main, i * 1000)
    doc = main.build()
    doc["perfsleuth"] = {"version": 1, "stacks_trace": COMPANION}
    path = tmp_path / "trace.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    comp = RuleTraceBuilder()
    comp.step(1, 0, 1000)
    step(comp, 0)
    frame = comp.py("train.py(57): train_step", 90, 300)
    comp.py("<built-in method item of Tensor object at 0x7f>", 99, 222, parent=frame)
    for k in range(pad):
        comp.py(f"train.py({100 + k}): helper", 600 + k * 0.1, 0.05)
    comp.run_metadata = {"version": 1, "role": "stacks", **(companion_meta or {})}
    comp.write(tmp_path / COMPANION)
    return path


@pytest.fixture
def loads(monkeypatch):
    """The companion paths `facts/stacks.py` loaded."""
    seen = []
    real = stacks.load_trace

    def load(path, *a, **kw):
        seen.append(path.name)
        return real(path, *a, **kw)

    monkeypatch.setattr(stacks, "load_trace", load)
    return seen


def test_loaded_only_when_a_finding_cites_an_empty_location_table(tmp_path, loads):
    report = analyze_file(run_folder(tmp_path, waited_item)).to_dict()
    item = next(f for f in report["findings"] if f["rule"] == "item-sync")
    assert item["locations"] == [{"file": "train.py", "line": 57, "function": "train_step", "count": 1,
                                  "line_kind": "function"}]
    assert "Most frequent call site: `train.py:57` in `train_step` (1 per step)" in item["message"]
    assert "with_stack=True" not in item["message"] and loads == [COMPANION]


def test_not_loaded_when_no_finding_cites_lines(tmp_path, loads):
    report = analyze_file(run_folder(tmp_path, kernels_only)).to_dict()
    assert all(not f.get("locations") for f in report["findings"])
    assert loads == [] and report["trace"]["stacks_trace"] == str(tmp_path / COMPANION)


def test_a_companion_larger_than_the_trace_is_skipped_with_a_note(tmp_path, loads):
    path = run_folder(tmp_path, waited_item, pad=400)
    main_size, comp_size = path.stat().st_size, (tmp_path / COMPANION).stat().st_size
    assert comp_size > main_size
    report = analyze_file(path, Config(companion_free_bytes=0)).to_dict()
    item = next(f for f in report["findings"] if f["rule"] == "item-sync")
    assert item["locations"] == [] and loads == []
    note = (f"source lines not loaded: the stacks trace {COMPANION} ({comp_size / 1e6:.1f} MB) is larger than the "
            f"trace ({main_size / 1e6:.1f} MB); `perfsleuth analyze {tmp_path / COMPANION}` shows the findings of "
            f"its own steps with their lines")
    assert report["warnings"].count(note) == 1
    # within the floor (the default: 4 MB) it is loaded, larger than the main trace or not
    report = analyze_file(path).to_dict()
    assert next(f for f in report["findings"] if f["rule"] == "item-sync")["locations"][0]["line"] == 57
    assert loads == [COMPANION] and not any("not loaded" in w for w in report["warnings"])


def test_a_window_cut_inside_a_step_scales_its_per_step_numbers(tmp_path):
    """A stacks window that recorded one closure call of a 4-call step: 1 call per recorded step is 4 per step."""
    meta = {"stacks_window": {"steps": 1, "cut": "closure", "scale": 4.0}}
    report = analyze_file(run_folder(tmp_path, waited_item, meta)).to_dict()
    item = next(f for f in report["findings"] if f["rule"] == "item-sync")
    assert "Most frequent call site: `train.py:57` in `train_step` (4 per step)" in item["message"]
    assert item["locations"][0]["count"] == 1  # what was recorded


def test_a_memory_companion_that_is_the_stacks_companion_is_read_once(tmp_path, loads, monkeypatch):
    """A run that names one file as both its stacks and its memory companion: the memory section and
    the source lines come from it, and it is read from disk once (the memory analysis reads it; the
    stacks companion takes that trace)."""
    from memorybuilder import MemoryTraceBuilder
    from perfsleuth import analysis

    memory_loads = []
    real = analysis.memory.load_trace

    def load(path, *a, **kw):
        memory_loads.append(path.name)
        return real(path, *a, **kw)

    monkeypatch.setattr(analysis.memory, "load_trace", load)
    main = RuleTraceBuilder()
    for i in range(3):
        main.step(7 + i, i * 1000, 1000)
        waited_item(main, i * 1000)
    doc = main.build()
    doc["perfsleuth"] = {"version": 1, "stacks_trace": COMPANION, "memory_trace": COMPANION}
    path = tmp_path / "trace.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    comp = MemoryTraceBuilder(device_type=0, device_id=-1)
    comp.step(1, 0, 1000)
    waited_item(comp, 0)
    frame = comp.py("train.py(57): train_step", 90, 300)
    comp.py("<built-in method item of Tensor object at 0x7f>", 99, 222, parent=frame)
    comp.alloc(120, 4096, addr=1)
    comp.alloc(130, 1024, addr=2)
    comp.free(140, addr=1)
    comp.run_metadata = {"version": 1, "role": "stacks"}
    comp.write(tmp_path / COMPANION)

    report = analyze_file(path).to_dict()
    item = next(f for f in report["findings"] if f["rule"] == "item-sync")
    assert item["locations"][0]["file"] == "train.py" and item["locations"][0]["line"] == 57
    assert report["memory"]["trace"] == COMPANION
    assert report["memory"]["devices"][0]["peak_allocated_bytes"] == 5120
    assert memory_loads == [COMPANION] and loads == []
