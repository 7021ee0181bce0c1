"""issue 18: `perfsleuth run` with unwritable output folders, a trace export that fails, and a script that
writes files of the report's names into the output folder (real SIGTERM/SIGHUP: test_run_failures.py)."""

import gzip
import json
from pathlib import Path

from privileges import unprivileged
from test_run_failures import SMALL, run
from test_run_failures import script as failures_script


def script(tmp_path: Path, before="", body="pass") -> Path:
    """test_run_failures' training script, with `before` run first (at the top level)."""
    path = failures_script(tmp_path, body=body)
    path.write_text(f"import os\n{before}\n" + path.read_text())
    return path


def _marker_script(tmp_path):
    marker = tmp_path / "ran"
    return script(tmp_path, before=f"open({str(marker)!r}, 'w').close()"), marker


def test_an_output_folder_under_a_file_is_refused_before_the_script_runs(tmp_path):
    path, marker = _marker_script(tmp_path)
    (tmp_path / "file").write_text("x")
    code, out, err = run(*SMALL, "-o", tmp_path / "file" / "o", path)
    assert code == 2 and err.count("\n") == 1 and "a part of the path is not a directory" in err, err
    assert not marker.exists()


def test_a_read_only_output_folder_is_refused_before_the_script_runs(tmp_path):
    path, marker = _marker_script(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    with unprivileged():
        code, out, err = run(*SMALL, "-o", ro / "o", path)
    assert code == 2 and f"cannot write in {ro} (permission denied)" in err, err
    assert not marker.exists()


def test_a_device_as_report_target_is_refused_before_the_script_runs(tmp_path):
    path, marker = _marker_script(tmp_path)
    link = tmp_path / "r.json"
    link.symlink_to("/dev/null")
    code, out, err = run(*SMALL, "--force", "--json", link, "-o", tmp_path / "o", path)
    assert code == 2 and "is a character device; perfsleuth writes reports only to regular files" in err, err
    assert not marker.exists() and link.is_symlink()


def test_a_failing_trace_export_is_not_blamed_on_the_script(tmp_path):
    out_dir = tmp_path / "o"
    # at step 1 the script turns the output folder into a file: the export at the end of the window fails
    body = (f"if step == 1:\n        import shutil; shutil.rmtree({str(out_dir)!r}, ignore_errors=True); "
            f"open({str(out_dir)!r}, 'w').write('mine')")
    path = script(tmp_path, body=body)
    code, out, err = run(*SMALL, "-o", out_dir, path)
    assert code == 2, err
    assert "the script raised" not in err and "Traceback" not in err
    assert f"perfsleuth: could not write the trace to {out_dir}" in err and "it was saved to" in err
    saved = Path(err.split("it was saved to ")[1].split(" instead")[0])
    assert saved.is_file() and json.loads(gzip.decompress(saved.read_bytes()))["traceEvents"]
    assert (saved.parent / "report.json").is_file()  # the reports went beside it
    assert out_dir.read_text() == "mine"


def test_files_the_script_writes_into_the_output_folder_are_not_replaced(tmp_path):
    out_dir = tmp_path / "o"
    before = (f"os.makedirs({str(out_dir)!r}, exist_ok=True)\n"
              f"open(os.path.join({str(out_dir)!r}, 'summary.md'), 'w').write('my summary')\n"
              f"open(os.path.join({str(out_dir)!r}, 'report.json'), 'w').write('my report')")
    path = script(tmp_path, before=before)
    for force in ([], ["--force"]):  # --force covers files that were there before the run, not the script's
        code, out, err = run(*SMALL, *force, "-o", out_dir, path)
        assert code == 0, err
        assert (out_dir / "summary.md").read_text() == "my summary"
        assert (out_dir / "report.json").read_text() == "my report"
        assert "the script wrote" in err and "left as it is; the report went to" in err, err
        folder = Path(err.split("the report went to ")[1].split("/\n")[0])
        assert json.loads((folder / "report.json").read_text())["schema"] == "perfsleuth/report@1"
        assert sorted(p.name for p in folder.iterdir()) == ["report.html", "report.json", "summary.md"]
    assert sorted(p.name for p in out_dir.iterdir() if p.name.startswith("perfsleuth-report")) == [
        "perfsleuth-report", "perfsleuth-report-2"]  # the second run (--force) kept the first one's too


def test_a_signal_handler_that_raises_while_the_traceback_is_formatted():
    """torch's SIGCHLD handler raises 'DataLoader worker ... exited unexpectedly' at any bytecode, also
    while perfsleuth formats the script's own error (a broken pipe to that worker): that error is the
    real cause, reported chained to the first, never perfsleuth's own traceback."""
    from perfsleuth.record.outputs import user_traceback
    from perfsleuth.record.target import format_user_traceback

    calls = []

    def cut_once(exc):
        calls.append(type(exc).__name__)
        if len(calls) == 1:
            raise RuntimeError("DataLoader worker (pid 1) exited unexpectedly with exit code 7")
        return format_user_traceback(exc)

    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError as exc:
        first = exc  # (the `as` name is gone after the block)
        text, shown = user_traceback(first, cut_once)
    assert calls == ["ConnectionResetError", "RuntimeError"]
    assert isinstance(shown, RuntimeError) and shown.__context__ is first
    assert "ConnectionResetError" in text and text.rstrip().endswith(
        "RuntimeError: DataLoader worker (pid 1) exited unexpectedly with exit code 7")


def test_child_signals_are_quiet_while_perfsleuth_reports_and_restored_after():
    import signal

    from perfsleuth.record.outputs import quiet_child_signals

    def torch_like(signum, frame):
        raise RuntimeError("DataLoader worker (pid 1) exited unexpectedly")

    previous = signal.signal(signal.SIGCHLD, torch_like)
    try:
        with quiet_child_signals():
            assert signal.getsignal(signal.SIGCHLD) is signal.SIG_DFL
            signal.raise_signal(signal.SIGCHLD)  # would raise inside perfsleuth's reporting
        assert signal.getsignal(signal.SIGCHLD) is torch_like
    finally:
        signal.signal(signal.SIGCHLD, previous)
