"""write_outputs: the files it writes, overwrite protection, atomic replacement, strict JSON."""

import json
import os
import stat

import pytest
from perfsleuth.errors import UsageError
from perfsleuth.render import outputs, safe_write
from perfsleuth.render.outputs import check_outputs, json_safe, to_json, write_outputs
from report_factory import make_report


def listing(d):
    return sorted(p.name for p in d.iterdir())


def test_out_dir_writes_the_three_files(tmp_path):
    out = tmp_path / "report"
    written = write_outputs(make_report(), out_dir=out)
    assert written == [out / "report.html", out / "summary.md", out / "report.json"]
    assert listing(out) == ["report.html", "report.json", "summary.md"]
    assert (out / "report.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert (out / "summary.md").read_text(encoding="utf-8").startswith("### perfsleuth: `kernel-bound`")
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["verdict"] == "kernel-bound"
    assert stat.S_IMODE((out / "report.html").stat().st_mode) == 0o644


def test_single_files_and_their_folders(tmp_path):
    written = write_outputs(make_report(), html=tmp_path / "a" / "r.html", markdown=tmp_path / "s.md",
                            json_path=str(tmp_path / "r.json"))
    assert written == [tmp_path / "a" / "r.html", tmp_path / "s.md", tmp_path / "r.json"]
    assert listing(tmp_path) == ["a", "r.json", "s.md"]


def test_nothing_requested_writes_nothing(tmp_path):
    assert write_outputs(make_report()) == []


def test_existing_file_is_not_overwritten_without_force(tmp_path):
    target = tmp_path / "r.html"
    target.write_text("keep me")
    with pytest.raises(UsageError, match=r"r\.html: exists; use --force to overwrite"):
        write_outputs(make_report(), html=target, markdown=tmp_path / "s.md")
    assert target.read_text() == "keep me"
    assert listing(tmp_path) == ["r.html"]  # nothing else written either


def test_force_overwrites(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")
    write_outputs(make_report(), json_path=target, force=True)
    assert json.loads(target.read_text())["schema"] == "perfsleuth/report@1"


def test_non_empty_out_dir_needs_force(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="exists and is not empty; use --force to overwrite"):
        write_outputs(make_report(), out_dir=tmp_path)
    write_outputs(make_report(), out_dir=tmp_path, force=True)
    assert listing(tmp_path) == ["notes.txt", "report.html", "report.json", "summary.md"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_empty_existing_out_dir_is_fine(tmp_path):
    assert len(write_outputs(make_report(), out_dir=tmp_path)) == 3


def test_bad_targets_are_usage_errors(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="exists and is not a directory"):
        write_outputs(make_report(), out_dir=tmp_path / "file")
    with pytest.raises(UsageError, match="is a directory"):
        write_outputs(make_report(), html=tmp_path)
    with pytest.raises(UsageError, match="asked for twice"):
        write_outputs(make_report(), out_dir=tmp_path / "o", html=tmp_path / "o" / "report.html")


def test_check_outputs_fails_early_and_writes_nothing(tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "report.html").write_text("old")
    with pytest.raises(UsageError, match="exists and is not empty; use --force to overwrite"):
        check_outputs(out_dir=tmp_path / "o")
    assert check_outputs(out_dir=tmp_path / "o", force=True) == [
        ("html", tmp_path / "o" / "report.html"), ("markdown", tmp_path / "o" / "summary.md"),
        ("json", tmp_path / "o" / "report.json")]
    assert listing(tmp_path / "o") == ["report.html"]


def test_atomic_write_leaves_no_temp_files(tmp_path):
    write_outputs(make_report(), out_dir=tmp_path / "o")
    write_outputs(make_report(), out_dir=tmp_path / "o", force=True)
    assert listing(tmp_path / "o") == ["report.html", "report.json", "summary.md"]


def test_failed_write_keeps_the_old_file_and_removes_the_temp(tmp_path, monkeypatch):
    target = tmp_path / "r.md"
    target.write_text("old summary")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(safe_write.os, "replace", boom)
    with pytest.raises(UsageError, match=r"r\.md: cannot write \(disk full\)"):  # one line, no traceback (issue 18)
        write_outputs(make_report(), markdown=target, force=True)
    assert target.read_text() == "old summary"
    assert listing(tmp_path) == ["r.md"]


def test_render_error_writes_nothing(tmp_path, monkeypatch):
    def broken(report):
        raise RuntimeError("template bug")

    monkeypatch.setitem(outputs._RENDERERS, "markdown", broken)
    with pytest.raises(RuntimeError):
        write_outputs(make_report(), out_dir=tmp_path / "o")
    assert not (tmp_path / "o").exists() or listing(tmp_path / "o") == []


def test_temp_file_is_in_a_staging_folder_beside_the_target(tmp_path, monkeypatch):
    seen = []
    real = os.link

    def spy(src, dst):
        seen.append((os.path.dirname(os.path.dirname(src)), os.path.basename(os.path.dirname(src)),
                     os.path.basename(src), dst))
        real(src, dst)

    monkeypatch.setattr(safe_write.os, "link", spy)
    write_outputs(make_report(), json_path=tmp_path / "r.json")
    (folder, staging, name, dst), = seen
    assert folder == str(tmp_path) and staging.startswith(".perfsleuth-") and staging.endswith(".tmp")
    assert name == "r.json" and dst == tmp_path / "r.json"
    assert listing(tmp_path) == ["r.json"]


def test_json_is_strict_and_nan_becomes_null(tmp_path):
    report = make_report(steps=2)
    report["summary"]["device_busy"] = float("nan")
    report["steps"][0]["time_us"]["kernel"] = float("inf")
    report["extra"] = (1, -float("inf"))
    write_outputs(report, json_path=tmp_path / "r.json")
    text = (tmp_path / "r.json").read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    data = json.loads(text)
    assert data["summary"]["device_busy"] is None
    assert data["steps"][0]["time_us"]["kernel"] is None
    assert data["extra"] == [1, None]
    assert text.startswith('{\n  "schema": "perfsleuth/report@1",\n  "tool": {\n    "name": "perfsleuth"')


def test_json_safe_handles_numpy_like_objects_and_paths(tmp_path):
    class Scalar:
        def tolist(self):
            return float("nan")

    assert json_safe({"a": Scalar(), "p": tmp_path, 3: True}) == {"a": None, "p": str(tmp_path), "3": True}
    assert to_json({"x": [1.5]}) == '{\n  "x": [\n    1.5\n  ]\n}\n'


def test_json_safe_converts_numpy_values():
    import numpy as np

    assert json_safe({"a": np.float64("nan"), "b": np.arange(2), "c": np.float32(0.5)}) == {"a": None, "b": [0, 1], "c": 0.5}
