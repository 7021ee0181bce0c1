"""docs/img/report.png is current: the PNG is the one docs/img/report.json records, taken of the
trace it names as that trace is now, and today's analysis of it gives the figures the picture shows
(scripts/report_screenshot.py; rerun it when this fails)."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "report_screenshot", ROOT / "scripts" / "report_screenshot.py"
)
shot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(shot)


@pytest.fixture(scope="module")
def today():
    return shot.analyse()


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_the_report_picture_is_current(today):
    saved = json.loads(shot.RECORD.read_text())
    assert shot.problems(saved, today) == [], "run: python scripts/report_screenshot.py"
    assert saved["png_size"] == shot.png_size(shot.PNG) and saved["png_size"][0] == shot.WIDTH
    assert saved["figures"]["timeline_step"] == today["timeline"]["step"]


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_the_check_finds_a_stale_picture(today, tmp_path, monkeypatch):
    saved = json.loads(shot.RECORD.read_text())
    moved = {**saved, "figures": {**saved["figures"], "median_step": "1.23 ms"}}
    assert any(
        p.startswith("median_step: the picture shows '1.23 ms'")
        for p in shot.problems(moved, today)
    )
    other = tmp_path / "report.png"
    other.write_bytes(shot.PNG.read_bytes() + b"\0")
    monkeypatch.setattr(shot, "PNG", other)
    assert "the PNG is not the one docs/img/report.json records" in shot.problems(saved, today)
