"""benchmarks/memory_categories.py (docs/accuracy.md, "Issue 35, unseen"): torch's own tools'
categories mapped onto perfsleuth's with exact numbers, and the section in docs/accuracy.md is what
the benchmark renders from its recorded results."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bench():
    spec = importlib.util.spec_from_file_location("memory_categories",
                                                  ROOT / "benchmarks" / "memory_categories.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_torchs_columns_in_perfsleuths_categories():
    b = bench()
    timeline = {"parameter": 1, "optimizer_state": 2, "input": 3, "temporary": 4, "activation": 5,
                "gradient": 6, "autograd_detail": 70, "unknown": 800}
    assert b.timeline_as_ours(timeline) == {"parameter": 1, "gradient": 6, "optimizer_state": 2,
                                            "activation": 5, "input": 3, "temporary": 74,
                                            "other": 800}
    tracker = {"parameter": 1, "buffer": 20, "gradient": 3, "activation": 4, "temporary": 5,
               "optimizer_state": 6, "other": 300}
    assert b.memtracker_as_ours(tracker) == {"parameter": 1, "gradient": 3, "optimizer_state": 6,
                                             "activation": 4, "input": 0, "temporary": 5,
                                             "other": 320}


def test_the_accuracy_section_is_the_recorded_results_rendered():
    b = bench()
    results = ROOT / "fixtures" / "accuracy" / "memory_categories" / "results.json"
    doc = json.loads(results.read_text())
    text = b.render(doc["rows"], doc["meta"])
    assert text in (ROOT / "docs" / "accuracy.md").read_text()
    assert "| **peak** | 174,953,900 | 174,953,900 | +0 | 174,948,988 | |" in text  # Transformer
