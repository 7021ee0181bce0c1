"""benchmarks/bench.py's report: the targets are judged from the numbers, and --write replaces only
its own section of docs/perf.md. (The benchmark itself is not run here: it takes minutes.)"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench  # noqa: E402


def _rows(a_s: float, hta_s: float, rss_base: float = 170.0) -> list:
    def run(wall, rss=100.0):
        return {"wall_s": wall, "rss_mb": rss, "walls": [wall]}

    return [{"times": t, "events": 216_000 * t, "mb": 42.8 * t, "gz_mb": 2.8 * t,
             "a": run(a_s * t / 10, rss_base + 40 * t), "c": run(0.9 * t), "a_gz": run(a_s * t / 10 + 0.3),
             "d": run(0.07 * t), "b": run(hta_s * t / 10, 240 * t), "b_other": []} for t in (2, 5, 10, 20)]


def _targets(text: str) -> dict:
    table = text.split("| target | result | met |")[1]
    return {cells[1].strip(): cells[3].strip() for line in table.splitlines()[2:]
            if len(cells := line.split("|")) == 5}


def test_targets_are_judged_from_the_x10_row():
    met = _targets(bench.render(_rows(3.0, 40.0), "machine", [], "python benchmarks/bench.py"))
    assert met == {"a/b ≤ 0.1": "yes", "a/c ≤ 2": "yes", "peak memory ≤ ½ HTA's": "yes",
                   "peak memory ≤ 2.5x the file": "yes", ".json.gz costs at most its decompression on top": "yes",
                   "linear in events": "yes"}
    slow = _targets(bench.render(_rows(4.4, 40.0), "machine", [], ""))
    assert slow["a/b ≤ 0.1"] == "**no**"  # 0.110
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
