"""issue 18: report files are put in place as a set (render/safe_write.py): never over a device, never
over a file another process wrote meanwhile, private files stay private, a failure or a signal
leaves neither a temporary file nor a mixed set, and every failure is one line with exit code 2."""

import errno
import json
import os
import resource
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_promise import cli, one_line, small_trace
from perfsleuth.errors import UsageError
from perfsleuth.render import safe_write
from perfsleuth.render.outputs import write_outputs
from privileges import unprivileged
from report_factory import make_report
from tracebuilder import TraceBuilder


def listing(d: Path) -> list:
    return sorted(p.name for p in d.iterdir())


@pytest.fixture
def trace(tmp_path):
    return small_trace(tmp_path)


def _char_device(tmp_path) -> Path:
    """A character device to aim at: a private null device when root may make one (so a regression
    could never replace the system's /dev/null), else /dev/null itself (which a user cannot replace)."""
    if os.geteuid() == 0:
        node = tmp_path / "null"
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        return node
    return Path("/dev/null")


@pytest.mark.parametrize("how", ["device", "link to a device", "link to a pipe"])
def test_a_device_is_refused_even_with_force_and_never_replaced(tmp_path, trace, how):
    device = _char_device(tmp_path)
    target, kind = device, "a character device"
    if how == "link to a device":
        target = tmp_path / "r.json"
        target.symlink_to(device)
    elif how == "link to a pipe":
        r, w = os.pipe()
        target, kind = tmp_path / "r.json", "a FIFO (named pipe)"
        target.symlink_to(f"/proc/{os.getpid()}/fd/{w}")  # what /dev/stdout is when stdout is a pipe
    for force in ([], ["--force"]):
        result = cli("analyze", trace, "--json", target, *force)
        one_line(result, f"{target}: is {kind}; perfsleuth writes reports only to regular files")
        assert "--force" not in result.stderr
    assert stat.S_ISCHR(os.stat(device).st_mode)
    if how != "device":
        assert target.is_symlink()


def test_a_link_to_a_regular_file_is_written_through(tmp_path, trace):
    real = tmp_path / "runs" / "r1.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(real)
    result = cli("analyze", trace, "--json", link, "--force")
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and json.loads(real.read_text())["schema"] == "perfsleuth/report@1"


def test_a_file_written_meanwhile_by_another_process_is_not_overwritten(tmp_path, monkeypatch):
    out = tmp_path / "o"
    real_stage = safe_write._stage

    def stage_then_race(folder, name, text, like):
        staged = real_stage(folder, name, text, like)
        if name == "report.json":  # the other analysis places its set between our check and our placing
            (out / "report.html").write_text("theirs")
        return staged

    monkeypatch.setattr(safe_write, "_stage", stage_then_race)
    with pytest.raises(UsageError, match=r"report\.html: exists \(written by another process meanwhile\); "
                                         r"nothing was written"):
        write_outputs(make_report(), out_dir=out)
    assert listing(out) == ["report.html"] and (out / "report.html").read_text() == "theirs"


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_two_analyses_racing_for_the_same_new_folder(tmp_path):
    """Started together, over and over: one wins with a whole set, the other says so; never a mix."""
    traces = []
    for n in (1, 2):
        tb = TraceBuilder()
        tb.step(1, 0, 100 * n)
        tb.launch("k", host=(1, 2), device=(10, 50))
        traces.append(tb.write(tmp_path / f"t{n}.json"))
    for trial in range(4):
        out = tmp_path / f"o{trial}"
        procs = [subprocess.Popen([sys.executable, "-m", "perfsleuth", "analyze", str(t), "-o", str(out)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for t in traces]
        results = [(p.wait(60), p.stderr.read()) for p in procs]
        assert sorted(code for code, _ in results) == [0, 2], results
        loser = next(err for code, err in results if code == 2)
        assert loser.count("\n") == 1 and ": exists" in loser, loser  # checked before, or found when placing
        assert listing(out) == ["report.html", "report.json", "summary.md"]
        winner = Path(json.loads((out / "report.json").read_text())["trace"]["path"]).name
        assert winner in (out / "summary.md").read_text() and winner in (out / "report.html").read_text()


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_files_respect_the_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        write_outputs(make_report(), out_dir=tmp_path / "o")
    finally:
        os.umask(old)
    assert {stat.S_IMODE((tmp_path / "o" / n).stat().st_mode) for n in listing(tmp_path / "o")} == {mode}


def test_force_over_a_private_file_keeps_it_private(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("secret")
    target.chmod(0o600)
    write_outputs(make_report(), json_path=target, force=True)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert json.loads(target.read_text())["schema"] == "perfsleuth/report@1"


def _old_set(out: Path) -> dict:
    out.mkdir()
    old = {n: f"old {n}" for n in ("report.html", "summary.md", "report.json")}
    for n, text in old.items():
        (out / n).write_text(text)
    return old


def _stage_fails(monkeypatch, file_name: str, error: BaseException) -> None:
    """Staging `file_name` raises `error` (a full disk, Ctrl-C); the other files stage as usual."""
    real_stage = safe_write._stage

    def stage(folder, name, text, like):
        if name == file_name:
            raise error
        return real_stage(folder, name, text, like)

    monkeypatch.setattr(safe_write, "_stage", stage)


def test_a_full_disk_leaves_the_old_set_and_no_temporary_file(tmp_path, monkeypatch):
    out = tmp_path / "o"
    old = _old_set(out)
    _stage_fails(monkeypatch, "report.json", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    with pytest.raises(UsageError, match=r"report\.json: cannot write \(no space left on device\)"):
        write_outputs(make_report(), out_dir=out, force=True)
    assert {n: (out / n).read_text() for n in listing(out)} == old


def test_a_failure_while_placing_puts_the_old_files_back(tmp_path, monkeypatch):
    out = tmp_path / "o"
    old = _old_set(out)
    real_replace = os.replace

    def third_fails(src, dst):
        if str(dst).endswith("report.json"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_replace(src, dst)

    monkeypatch.setattr(safe_write.os, "replace", third_fails)
    with pytest.raises(UsageError, match=r"report\.json: cannot write \(Input/output error\)"):
        write_outputs(make_report(), out_dir=out, force=True)
    monkeypatch.undo()
    assert {n: (out / n).read_text() for n in listing(out)} == old


def test_an_interrupt_while_staging_leaves_nothing_behind(tmp_path, monkeypatch):
    out = tmp_path / "o"
    old = _old_set(out)
    _stage_fails(monkeypatch, "summary.md", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        write_outputs(make_report(), out_dir=out, force=True)
    assert {n: (out / n).read_text() for n in listing(out)} == old


_SLOW_WRITER = textwrap.dedent("""
    import os, sys, time
    from perfsleuth.record.signals import as_interrupts
    from perfsleuth.render import safe_write
    from perfsleuth.render.outputs import write_outputs
    sys.path.insert(0, sys.argv[3])
    from report_factory import make_report
    phase, out = sys.argv[1], sys.argv[2]
    real_stage, real_replace = safe_write._stage, os.replace

    def slow_stage(*a):
        if phase == "staging":
            print("staging", flush=True)
            time.sleep(0.5)
        return real_stage(*a)

    def slow_replace(src, dst):
        if phase == "placing":
            print("placing", flush=True)
            time.sleep(0.5)
        real_replace(src, dst)

    safe_write._stage, safe_write.os.replace = slow_stage, slow_replace
    with as_interrupts():
        try:
            write_outputs(make_report(), out_dir=out, force=True)
        except KeyboardInterrupt:
            sys.exit(143)
    sys.exit(0)
""")


@pytest.mark.parametrize("phase", ["staging", "placing"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_real_signal_while_writing_leaves_a_whole_set(tmp_path, phase, sig):
    out = tmp_path / "o"
    old = _old_set(out)
    helpers = Path(__file__).resolve().parents[1] / "helpers"  # report_factory, for the child
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, phase, str(out), str(helpers)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == phase
    proc.send_signal(sig)
    proc.wait(60)
    assert proc.returncode in (143, 1 if sig == signal.SIGINT else 143), proc.stderr.read()
    files = {n: (out / n).read_text() for n in listing(out)}
    assert list(files) == ["report.html", "report.json", "summary.md"]  # no .perfsleuth-*.tmp folder
    if phase == "staging":
        assert files == old  # stopped before placing: the old set
    else:
        assert all(text != old[n] for n, text in files.items())  # placing finished first: the new set


def test_ctrl_c_exits_130_with_one_line(trace, monkeypatch):
    from perfsleuth import api

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "analyze_path", interrupted)
    result = cli("analyze", trace)
    assert result.exit_code == 130 and result.stderr == "perfsleuth: interrupted (SIGINT)\n"


# --- write failures: one line, before the analysis where they can be seen then -----------------------
def test_a_read_only_folder(tmp_path, trace):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    with unprivileged():
        result = cli("analyze", trace, "--json", ro / "r.json")
    one_line(result, f"{ro / 'r.json'}: cannot write in {ro} (permission denied)")
    assert listing(ro) == []


def test_a_parent_path_that_is_a_file(tmp_path, trace):
    (tmp_path / "file").write_text("x")
    one_line(cli("analyze", trace, "-o", tmp_path / "file" / "sub"),
             f"{tmp_path / 'file' / 'sub' / 'report.html'}: cannot write (a part of the path is not a directory)")
    one_line(cli("analyze", trace, "--html", tmp_path / "file" / "r.html"),
             f"{tmp_path / 'file' / 'r.html'}: cannot write (a part of the path is not a directory)")


def test_a_name_too_long(tmp_path, trace):
    long = tmp_path / ("x" * 300 + ".json")
    one_line(cli("analyze", trace, "--json", long), "cannot write (file name too long)")


@pytest.mark.slow  # seconds: a real trace or real processes (tests/README.md)
def test_a_real_write_failure_from_the_kernel(tmp_path, trace):
    """RLIMIT_FSIZE makes the kernel refuse a write (EFBIG) the way a full disk does (ENOSPC)."""
    out = tmp_path / "o"

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # the HTML is larger
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    proc = subprocess.run([sys.executable, "-m", "perfsleuth", "analyze", str(trace), "-o", str(out)],
                          capture_output=True, text=True, timeout=60, preexec_fn=small_files)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"perfsleuth: error: {out / 'report.html'}: cannot write (file too large)\n"
    assert listing(out) == []  # no partial set, no staging folder


def test_diff_outputs_are_written_the_same_way(tmp_path, trace):
    device = _char_device(tmp_path)
    one_line(cli("diff", trace, trace, "--json", device, "--force"), "is a character device")
    md = tmp_path / "d.md"
    md.write_text("old")
    md.chmod(0o600)
    result = cli("diff", trace, trace, "--markdown", md, "--force")
    assert result.exit_code == 0 and stat.S_IMODE(md.stat().st_mode) == 0o600 and md.read_text() != "old"
