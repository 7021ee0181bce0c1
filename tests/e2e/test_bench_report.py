"""benchmarks/bench.py's report: the targets are judged from the numbers, and --write replaces only
its own section of docs/perf.md. (The benchmark itself is not run here: it takes minutes.)"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench  # noqa: E402


def _rows(a_s: float, hta_s: float, rss_base: float = 170.0) -> list:
    def run(wall, rss=100.0):
        return {"wall_s": wall, "rss_mb": rss, "walls": [wall]}

    return [{"times": t, "events": 216_000 * t, "mb": 42.8 * t, "gz_mb": 2.8 * t, "load": 1.5, "load_after": 2.0,
             "a": run(a_s * t / 10, rss_base + 40 * t), "c": run(0.9 * t), "a_gz": run(a_s * t / 10 + 0.3),
             "d": run(0.07 * t), "b": run(hta_s * t / 10, 240 * t), "b_other": []} for t in (1, 2, 5, 10, 20)]


def _targets(text: str) -> dict:
    table = text.split("| target | result | met |")[1]
    return {cells[1].strip(): cells[3].strip() for line in table.splitlines()[2:]
            if len(cells := line.split("|")) == 5}


def test_targets_are_judged_from_the_x10_and_x1_rows():
    met = _targets(bench.render(_rows(1.6, 40.0, rss_base=150.0), "machine", [], "python benchmarks/bench.py"))
    assert met == {"a/b ≤ 0.05": "yes", "a/c ≤ 2": "yes", "peak memory ≤ ¼ HTA's": "yes",
                   "peak memory ≤ 2.5x the file": "yes", ".json.gz costs at most its decompression on top": "yes",
                   "linear in events": "yes", "mid-size trace (x1, 216,000 events) ≤ 1 s end to end": "yes"}
    slow = _targets(bench.render(_rows(4.4, 40.0), "machine", [], ""))
    assert slow["a/b ≤ 0.05"] == "**no**"  # 0.110
    assert slow["mid-size trace (x1, 216,000 events) ≤ 1 s end to end"] == "yes"  # 0.44 s
    heavy = _targets(bench.render(_rows(1.6, 40.0, rss_base=300.0), "machine", [], ""))
    assert heavy["peak memory ≤ ¼ HTA's"] == "**no**"  # 700 MB against 2400 MB: 0.29
    rows = _rows(3.0, 40.0)
    rows[3]["a"]["rss_mb"] = 5000  # x20 jumps: not linear, and over 2.5x the file
    assert _targets(bench.render(rows, "m", [], ""))["linear in events"] == "**no**"


def test_write_replaces_only_the_marked_section(tmp_path):
    doc = tmp_path / "perf.md"
    doc.write_text(f"# Perf\n\nprose before\n\n{bench.BEGIN}\nold table\n{bench.END}\n\nprose after\n")
    bench.write_section(doc, "new table")
    assert doc.read_text() == f"# Perf\n\nprose before\n\n{bench.BEGIN}\nnew table\n{bench.END}\n\nprose after\n"


def test_write_refuses_a_file_without_markers(tmp_path):
    doc = tmp_path / "perf.md"
    doc.write_text("# Perf, written by hand\n")
    with pytest.raises(SystemExit, match="no bench markers"):
        bench.write_section(doc, "table")
    assert doc.read_text() == "# Perf, written by hand\n"


def test_the_figures_written_are_the_ones_check_reads(tmp_path):
    doc = tmp_path / "perf.md"
    doc.write_text(f"# Perf\n\n{bench.BEGIN}\n{bench.END}\n")
    rows = _rows(3.0, 40.0)
    bench.write_section(doc, bench.render(rows, "machine", [], "python benchmarks/bench.py --write"))
    recorded = bench.read_figures(doc)
    assert sorted(recorded) == ["x1", "x10", "x2", "x20", "x5"]
    x10 = recorded["x10"]
    assert (x10["a/b"], x10["a/c"], x10["rss a/b"], x10["load"]) == (0.075, 0.3333, 0.2375, 1.5)  # 3/40, 3/9, 570/2400


def test_check_flags_only_ratios_worse_than_recorded_beyond_the_tolerance():
    recorded = bench.figures(_rows(3.0, 40.0))
    same, regressions = bench.check(recorded, bench.figures(_rows(3.0, 40.0)), 0.2)
    assert regressions == [] and "0 regression(s) beyond 20%" in same
    faster_hta = _rows(3.0, 30.0)  # HTA 25% faster, perfsleuth the same: a/b is 33% worse
    text, regressions = bench.check(recorded, bench.figures(faster_hta), 0.2)
    assert sorted(set(case for case, _ in regressions)) == ["x1", "x10", "x2", "x20", "x5"]
    assert {key for _, key in regressions} == {"a/b"}  # the decode's ratio and memory did not move
    assert "| x10 | time / HTA's | 0.075 | 0.100 | +33% | **regression** |" in text
    better, regressions = bench.check(recorded, bench.figures(_rows(2.0, 40.0)), 0.2)
    assert regressions == [] and "| x10 | time / msgspec decode's | 0.333 | 0.222 | -33% | ok |" in better


def test_check_needs_recorded_figures(tmp_path):
    doc = tmp_path / "perf.md"
    doc.write_text("# Perf, no figures yet\n")
    with pytest.raises(SystemExit, match="no recorded figures"):
        bench.read_figures(doc)


def test_from_rows_writes_the_figures_of_an_earlier_runs_log(tmp_path):
    """--from-rows renders the JSON rows a run printed (a --check run's log) without measuring anything; the
    figures it writes are the ones a later --check compares with."""
    import json
    import subprocess

    rows = _rows(1.6, 40.0)
    log = tmp_path / "check.out"
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n| case | ratio |\n0 regression(s) beyond 20%\n")
    doc = tmp_path / "perf.md"
    doc.write_text(f"intro\n{bench.BEGIN}\nold\n{bench.END}\nrest\n")
    script = Path(bench.__file__)
    proc = subprocess.run([sys.executable, str(script), "--from-rows", str(log), "--write", str(doc)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert bench.read_figures(doc) == bench.figures(rows)
    assert doc.read_text().startswith("intro\n") and doc.read_text().endswith("rest\n")
    assert "rendered with --from-rows (5 cases)" in doc.read_text()
