"""The bad-input corpus (docs/robustness.md): every input that once crashed, hung, clobbered or misled
perfsleuth, with what the real CLI must answer now. tests/e2e/test_corpus.py runs each case end to end
(`python -m perfsleuth` in a fresh process, in a scratch folder).

A case is a name, a `make(folder)` that lays out what it needs there (copying files from
tests/helpers/corpus/files/, or making FIFOs, links, bombs ...) and returns (argv, the file the error must
name or None), the exit code expected, and a text expected in the one error line (exit 2) or in the
output (exit 0). Inputs that need no making are stored in tests/helpers/corpus/files/; examples the fuzzers
found go to tests/helpers/corpus/found/ and are run by test_corpus.py as they are (see the README there).
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import json
import lzma
import os
import shutil
import socket
import stat
import struct
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tracebuilder import TraceBuilder

FILES = Path(__file__).resolve().parent / "corpus" / "files"
FOUND = Path(__file__).resolve().parent / "corpus" / "found"


@dataclass
class Case:
    name: str
    make: Callable[[Path], tuple]
    expect: int = 2
    text: str = ""
    unprivileged: bool = False  # run with the permission bits applied (also as root)
    prefix: list = field(default_factory=list)  # a command the CLI runs under (e.g. prlimit)
    absent: str = ""  # a text that must not be in the output (a false warning, a wrong verdict)


def _file(name: str, *extra: str, command: str = "analyze") -> Callable:
    def make(folder: Path) -> tuple:
        path = folder / name
        shutil.copy(FILES / name, path)
        return [command, str(path), *extra], path
    return make


def _good_trace(folder: Path, name: str = "good.json") -> Path:
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.launch("k", host=(1, 2), device=(10, 50))
    return tb.write(folder / name)


def _diff(name: str) -> Callable:
    def make(folder: Path) -> tuple:
        good, bad = folder / "report_good.json", folder / name
        shutil.copy(FILES / "report_good.json", good)
        shutil.copy(FILES / name, bad)
        return ["diff", str(good), str(bad)], bad
    return make


def _pyproject(name: str, *extra_files: str) -> Callable:
    def make(folder: Path) -> tuple:
        shutil.copy(FILES / name, folder / "pyproject.toml")
        for f in extra_files:
            shutil.copy(FILES / f, folder / f)
        return ["analyze", str(_good_trace(folder))], Path(extra_files[0] if extra_files else "pyproject.toml")
    return make


def _rules(name: str) -> Callable:
    def make(folder: Path) -> tuple:
        shutil.copy(FILES / name, folder / name)
        return ["analyze", str(_good_trace(folder)), "--rules", str(folder / name)], folder / name
    return make


def _set(value: str) -> Callable:
    def make(folder: Path) -> tuple:
        return ["analyze", str(_good_trace(folder)), "--set", f"num-workers.min_share={value}"], None
    return make


def _fifo(command: str) -> Callable:
    def make(folder: Path) -> tuple:
        fifo = folder / "trace.json"
        os.mkfifo(fifo)
        return [command, str(fifo)] + ([str(fifo)] if command == "diff" else []), fifo
    return make


def _link_to(target: str) -> Callable:
    def make(folder: Path) -> tuple:
        link = folder / "trace.json.gz"
        link.symlink_to(target)
        return ["analyze", str(link)], link
    return make


def _symlink_loop(folder: Path) -> tuple:
    (folder / "a.json").symlink_to(folder / "b.json")
    (folder / "b.json").symlink_to(folder / "a.json")
    return ["analyze", str(folder / "a.json")], folder / "a.json"


def _bomb(payload: bytes, wrap: bool, jobs: str) -> Callable:
    def make(folder: Path) -> tuple:
        path = folder / "bomb.json.gz"
        with gzip.open(path, "wb", compresslevel=1) as f:
            if wrap:
                f.write(b'{"traceEvents": [')
            chunk = payload * (1 << 20)
            for _ in range(96):
                f.write(chunk)
            if wrap:
                f.write(b"]}")
        return ["analyze", str(path), "-j", jobs], path
    return make


def _unsearchable_file(folder: Path) -> tuple:
    locked = folder / "locked"
    locked.mkdir()
    path = _good_trace(locked, "t.json")
    locked.chmod(0o644)  # listable, not searchable
    return ["analyze", str(path)], path


def _directory_with_bad_files(jobs: str) -> Callable:
    def make(folder: Path) -> tuple:
        d = folder / "logs"
        d.mkdir()
        _good_trace(d, "a_good.json")
        shutil.copy(FILES / "deep_args.json", d / "b_deep.json")
        shutil.copy(FILES / "zero_single_event.json", d / "c_zero.json")
        os.mkfifo(d / "d_fifo.json")
        sub = d / "e_locked"
        sub.mkdir()
        _good_trace(sub, "t.json")
        sub.chmod(0)
        return ["analyze", str(d), "-j", jobs], None
    return make


def _device_target(force: bool) -> Callable:
    def make(folder: Path) -> tuple:
        if os.geteuid() == 0:  # a private null device: a regression could never replace the system's
            device = folder / "null"
            os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        else:
            device = Path("/dev/null")
        link = folder / "out.json"
        link.symlink_to(device)
        return ["analyze", str(_good_trace(folder)), "--json", str(link)] + (["--force"] if force else []), link
    return make


def _read_only_folder(folder: Path) -> tuple:
    ro = folder / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    return ["analyze", str(_good_trace(folder)), "-o", str(ro / "out")], ro / "out" / "report.html"


def _parent_is_a_file(folder: Path) -> tuple:
    (folder / "file").write_text("x")
    target = folder / "file" / "r.json"
    return ["analyze", str(_good_trace(folder)), "--json", str(target)], target


def _name_too_long(folder: Path) -> tuple:
    target = folder / ("x" * 300 + ".json")
    return ["analyze", str(_good_trace(folder)), "--json", str(target)], target


def _full_disk(folder: Path) -> tuple:
    return ["analyze", str(_good_trace(folder)), "-o", str(folder / "o")], folder / "o" / "report.html"


# The kernel refuses writes past 4 KiB (EFBIG), as a full disk would (ENOSPC); Python ignores SIGXFSZ.
SMALL_FILES = ["prlimit", "--fsize=4096:4096"]


def _hostile_name(folder: Path) -> tuple:
    path = folder / "evil\x1b]0;pwned\x07\x1b[31m\u202etxt.json"
    path.write_text("")
    return ["analyze", str(path)], None


def _second_traceevents(layout: str, jobs: str) -> Callable:
    def make(folder: Path) -> tuple:
        events = [{"ph": "X", "cat": "cpu_op", "name": "decoy", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5,
                   "args": {"pad": "x" * 200}} for i in range(70_000)]  # ~17 MB: the byte-range path
        decoy = json.dumps(events)
        text = ('{"distributedInfo": {"traceEvents": %s}, "traceEvents": []}' if layout == "nested"
                else '{"traceEvents": %s, "traceEvents": []}') % decoy
        path = folder / f"{layout}.json"
        path.write_text(text)
        return ["analyze", str(path), "-j", jobs], path
    return make


def _many_jobs(folder: Path) -> tuple:
    d = folder / "logs"
    d.mkdir()
    for i in range(3):
        _good_trace(d, f"rank{i}.json")
    return ["analyze", str(d), "-j", "256"], None


# --- issue 28 -------------------------------------------------------------------------------------------
HTA = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "hta"


def _encoded(name: str, encode: Callable[[bytes], bytes]) -> Callable:
    """The good trace, stored another way (a byte-order mark, UTF-16, bz2, xz, a zip ...)."""
    def make(folder: Path) -> tuple:
        path = folder / name
        path.write_bytes(encode(_good_trace(folder, "plain.json").read_bytes()))
        return ["analyze", str(path)], path
    return make


def _bz2_bomb(folder: Path) -> tuple:
    path = folder / "bomb.json.bz2"
    with bz2.open(path, "wb") as f:
        chunk = b" " * (1 << 20)
        for _ in range(200):
            f.write(chunk)
    return ["analyze", str(path)], path


def _hta(relative: str) -> Callable:
    def make(folder: Path) -> tuple:
        path = folder / Path(relative).name
        shutil.copy(HTA / relative, path)
        return ["analyze", str(path)], path
    return make


def _ts_1e17(folder: Path) -> tuple:
    """Steps back to back at 1e17 µs, where a double resolves 16 µs: rounding made them 'overlap'."""
    tb = TraceBuilder(device=False)
    for i in range(6):
        tb.step(i + 1, 1e17 + i * 103.0, 103.0)
        tb.op("aten::mm", 1e17 + i * 103.0 + 5, 90.0)
    return ["analyze", str(tb.write(folder / "ts_1e17.json"))], None


def _url(make_target: Callable[[Path], str]) -> Callable:
    def make(folder: Path) -> tuple:
        url = make_target(folder)
        return ["analyze", url], None
    return make


def _local_fifo(folder: Path) -> str:
    os.mkfifo(folder / "fifo.json")
    return f"local://{folder / 'fifo.json'}"


def _zip_bomb(folder: Path) -> str:
    """A zip whose member inflates ~1000 times (300 MiB of spaces): fsspec read it whole."""
    path = folder / "bomb.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("trace.json", "w", force_zip64=True) as f:
            chunk = b" " * (1 << 20)
            for _ in range(300):
                f.write(chunk)
    return f"zip://trace.json::file://{path}"


def _zip_over_fifo(folder: Path) -> str:
    os.mkfifo(folder / "archive.zip")
    return f"zip://trace.json::file://{folder / 'archive.zip'}"


def _zip_good(folder: Path) -> str:
    with zipfile.ZipFile(folder / "t.zip", "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.write(_good_trace(folder), "trace.json")
    return f"zip://trace.json::file://{folder / 't.zip'}"


def _listener(answer: bytes) -> int:
    """A server on 127.0.0.1 that accepts and sends `answer` (nothing: it never answers); its port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []

    def serve() -> None:
        while True:
            conn, _ = server.accept()
            if answer:
                conn.sendall(answer)
            held.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def _scheduler(address: Callable[[], str]) -> Callable:
    def make(folder: Path) -> tuple:
        d = folder / "logs"
        d.mkdir()
        for i in range(2):
            _good_trace(d, f"rank{i}.json")
        return ["analyze", str(d), "--scheduler", address()], None
    return make


def _diff_base(value: float) -> Callable:
    """A base report whose steps all last `value` µs: 0 µs passed the gate, 1e-300 printed 300 digits."""
    def make(folder: Path) -> tuple:
        good = json.loads((FILES / "report_good.json").read_text())
        for s in good["steps"]:
            s["duration_us"] = value
        (folder / "base.json").write_text(json.dumps(good))
        shutil.copy(FILES / "report_good.json", folder / "head.json")
        return ["diff", str(folder / "base.json"), str(folder / "head.json"), "--fail-on-regression", "10%"], None
    return make


def _input_as_output(how: str) -> Callable:
    def make(folder: Path) -> tuple:
        trace = _good_trace(folder, "t.json")
        target = folder / "out.json"
        if how == "symlink":
            target.symlink_to(trace)
        elif how == "hardlink":
            os.link(trace, target)
        else:
            target = trace
        return ["analyze", str(trace), "--json", str(target), "--force"], target
    return make


def _many_files(folder: Path) -> tuple:
    d = folder / "logs"
    d.mkdir()
    first = _good_trace(d, "rank0000.json")
    for i in range(1, 400):
        shutil.copy(first, d / f"rank{i:04d}.json")
    return ["analyze", str(d), "-j", "2"], None


CASES_28 = [
    Case("bom-utf8", _encoded("bom.json", lambda b: codecs.BOM_UTF8 + b), 0, "verdict:"),
    Case("utf16", _encoded("utf16.json", lambda b: b.decode().encode("utf-16")), 0, "verdict:"),
    Case("utf16le-no-bom", _encoded("utf16le.json", lambda b: b.decode().encode("utf-16-le")), 0, "verdict:"),
    Case("utf32", _encoded("utf32.json", lambda b: b.decode().encode("utf-32")), 0, "verdict:"),
    Case("bz2", _encoded("t.json.bz2", bz2.compress), 0, "verdict:"),
    Case("xz", _encoded("t.json.xz", lzma.compress), 0, "verdict:"),
    Case("xz-truncated", _encoded("t.json.xz", lambda b: lzma.compress(b)[:-24]), 2, "corrupt or truncated xz data"),
    Case("zip-file", _encoded("t.json", lambda b: b"PK\x03\x04" + b), 2, "is a zip archive: unzip it first"),
    Case("zstd-file", _encoded("t.json", lambda b: b"\x28\xb5\x2f\xfd" + b), 2, "is zstd-compressed"),
    Case("bz2-bomb", _bz2_bomb, 2, "inflates to more than 100 times its compressed size"),
    Case("memory-timeline", _hta("memory_analysis/memory_timeline.raw.gz"), 2,
         "a JSON list of lists, as in torch.profiler's memory timeline"),
    Case("mtia-inference", _hta("mtia_inference_trace/mtia_inference_rank_0.json.gz"), 0, "device: ARTEMIS (mtia)",
         absent="no device activity"),
    Case("cupti-profiler", _hta("cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz"), 0,
         "77 CUPTI profiler ranges (cuda_profiler_range)", absent="KERNEL-BOUND"),
    Case("ts-1e17", _ts_1e17, 0, "timestamps around 1e+17 µs are resolved to only 16 µs", absent="overlap"),
    Case("url-local-dev-zero", _url(lambda f: "local:///dev/zero"), 2, "is a character device, not a regular file"),
    Case("url-local-fifo", _url(_local_fifo), 2, "is a FIFO (named pipe), not a regular file"),
    Case("url-zip-bomb", _url(_zip_bomb), 2, "inflates to more than 100 times its compressed size"),
    Case("url-zip-over-fifo", _url(_zip_over_fifo), 2, "is a FIFO (named pipe), not a regular file"),
    Case("url-zip-good", _url(_zip_good), 0, "verdict:"),
    *[Case(f"scheduler-{name}", _scheduler(lambda a=address: a), 2, text) for name, address, text in (
        ("not-a-port", "tcp://a:b", "the port must be a number from 1 to 65535, got 'b'"),
        ("port-99999", "tcp://127.0.0.1:99999", "the port must be a number from 1 to 65535, got '99999'"),
        ("ipv6-unclosed", "tcp://[::1:1", "an IPv6 address needs its closing ']'"),
        ("ipv6-bare", "tcp://::1:8786", "an IPv6 address goes in brackets"),
        ("scheme", "http://127.0.0.1:8786", "the address must start with tcp:// or tls://"))],
    Case("scheduler-tls-unconfigured", _scheduler(lambda: "tls://127.0.0.1:1"), 2, "cannot reach the Dask scheduler at "
         "tls://127.0.0.1:1", absent="Exception ignored"),
    Case("scheduler-silent", _scheduler(lambda: f"tcp://127.0.0.1:{_listener(b'')}"), 2,
         "within 20 s (is one listening there?)", absent="Exception ignored"),
    Case("scheduler-huge-frame", _scheduler(lambda: f"tcp://127.0.0.1:{_listener(struct.pack('Q', 2**62))}"), 2,
         "is not a Dask scheduler: its first answer announces a message too large", absent="out of memory"),
    *[Case(f"diff-base-{name}", _diff_base(v), 1, "no percentage against it, and more than any --fail-on-regression")
      for name, v in (("zero", 0.0), ("denormal", 5e-324), ("tiny", 1e-300))],
    *[Case(f"input-as-output-{how}", _input_as_output(how), 2, "perfsleuth never writes a report over its input, "
           "--force or not") for how in ("same", "symlink", "hardlink")],
    # 400 traces, analysed whole (the count a log gets after 10 s is test_progress.py's: how long 400 take is the
    # machine's, and a quick one finished them without it)
    Case("many-small-files", _many_files, 0, "400 traces in logs"),
]

CASES = [
    # crashes on small malformed traces
    *[Case(f"zero-{n}", _file(f"zero_{n}.json"), 2, "the trace spans no time (every event has zero duration)")
      for n in ("single_step", "single_event", "all_steps", "optimizer_step")],
    Case("deep-args", _file("deep_args.json"), 2, "JSON nested too deeply"),
    Case("deep-header", _file("deep_header.json"), 2, "JSON nested too deeply"),
    Case("meta-pid-object", _file("meta_pid_object.json"), 0, "verdict: HOST-BOUND"),
    Case("file-in-unsearchable-folder", _unsearchable_file, 2, "permission denied", unprivileged=True),
    Case("directory-bad-files-j1", _directory_with_bad_files("1"), 0, "warning: skipped", unprivileged=True),
    Case("directory-bad-files-j2", _directory_with_bad_files("2"), 0, "warning: skipped", unprivileged=True),
    # special files
    Case("fifo-analyze", _fifo("analyze"), 2, "is a FIFO (named pipe), not a regular file"),
    Case("fifo-diff", _fifo("diff"), 2, "is a FIFO (named pipe), not a regular file"),
    Case("link-to-dev-zero", _link_to("/dev/zero"), 2, "is a character device, not a regular file"),
    Case("link-to-dev-urandom", _link_to("/dev/urandom"), 2, "is a character device, not a regular file"),
    Case("gzip-bomb-zeros", _bomb(b"\0", False, "1"), 2, "inflates to more than 100 times its compressed size"),
    Case("gzip-bomb-spaces-j2", _bomb(b" ", True, "2"), 2, "inflates to more than 100 times its compressed size"),
    # clobbering
    Case("json-to-device", _device_target(False), 2, "is a character device; perfsleuth writes reports only"),
    Case("json-to-device-force", _device_target(True), 2, "is a character device; perfsleuth writes reports only"),
    # write failures
    Case("read-only-folder", _read_only_folder, 2, "(permission denied)", unprivileged=True),
    Case("parent-is-a-file", _parent_is_a_file, 2, "cannot write (a part of the path is not a directory)"),
    Case("name-too-long", _name_too_long, 2, "cannot write (file name too long)"),
    Case("full-disk", _full_disk, 2, "cannot write (file too large)", prefix=SMALL_FILES),
    # diff on damaged reports
    *[Case(f"diff-{n[7:-5]}", _diff(n), 2, "not a valid perfsleuth report (") for n in sorted(
        p.name for p in FILES.glob("report_*.json") if p.name not in ("report_good.json", "report_deep.json",
                                                                      "report_sorted_keys.json"))],
    Case("diff-deep", _diff("report_deep.json"), 2, "JSON nested too deeply"),
    Case("diff-sorted-keys", _file("report_sorted_keys.json", str(FILES / "report_sorted_keys.json"),
                                   command="diff"), 0, "within noise"),
    # configuration from the working directory
    Case("pyproject-tool-string", _pyproject("pyproject_tool_string.toml"), 2, "'tool' must be a table"),
    Case("pyproject-thresholds-string", _pyproject("pyproject_thresholds_string.toml"), 2,
         "Expected `object`, got `str` - at `tool.perfsleuth.thresholds`"),
    Case("pyproject-thresholds-list", _pyproject("pyproject_thresholds_list.toml"), 2,
         "Expected `object`, got `array` - at `tool.perfsleuth.thresholds`"),
    Case("pyproject-deep", _pyproject("pyproject_deep.toml"), 2, "nested too deeply"),
    Case("pyproject-nan", _pyproject("pyproject_threshold_nan.toml"), 2, "must be a finite number, got nan"),
    Case("pyproject-evil-rules", _pyproject("pyproject_evil_rules.toml", "rule_nested_loops.toml"), 2,
         "rule 'evil' takes more than 200,000 steps"),
    Case("rule-nested-loops", _rules("rule_nested_loops.toml"), 2, "rule 'evil' takes more than 200,000 steps"),
    Case("rule-huge-string", _rules("rule_huge_string.toml"), 2, "builds a string or list of 1,000,000,000 items"),
    Case("rule-huge-format", _rules("rule_huge_format.toml"), 2, "formats with a width or precision of a million"),
    Case("rule-huge-power", _rules("rule_huge_power.toml"), 2, "computes 10 ** 1000"),
    Case("rule-macro", _rules("rule_macro.toml"), 2, "message uses macros, which rule templates may not use"),
    Case("rule-saving-overflow", _rules("rule_saving_overflow.toml"), 0, "saving_us is not a finite number"),
    *[Case(f"set-{v}", _set(v), 2, text) for v, text in (
        ("nan", "must be a finite number, got nan"), ("inf", "must be a finite number, got inf"),
        ("-1", "must not be negative, got -1"), ("7", "is a share of the step, between 0 and 1, got 7"),
        ("1e300", "is out of range"))],
    # terminal injection
    Case("hostile-file-name", _hostile_name, 2, "evil\\x1b]0;pwned\\x07\\x1b[31m<U+202E>txt.json: empty file"),
    # misleading results
    Case("duplicate-step-names", _file("duplicate_step_names.json"), 0, "occur at separate times"),
    Case("zero-first-step", _file("zero_first_step.json"), 0, "1 step(s) of zero duration were dropped"),
    Case("negative-first-step", _file("negative_first_step.json"), 0, "1 step(s) of zero duration were dropped"),
    Case("symlink-loop", _symlink_loop, 2, "a symbolic link loop"),
    Case("ts-1e308", _file("ts_1e308.json"), 0, "absurd timestamps or durations were dropped (e.g. ts 1e+308"),
    Case("ts-1e308-lenient", _file("ts_1e308_lenient_chunk.json"), 0, "(e.g. ts 1e+308"),
    *[Case(f"second-traceevents-{layout}-j{j}", _second_traceevents(layout, j), 2, "no complete events to analyze")
      for layout in ("nested", "duplicate") for j in ("1", "2")],
    # scale
    Case("jobs-256", _many_jobs, 0, "-j 256 is more than the"),
    *CASES_28,
]
