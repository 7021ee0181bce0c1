"""issue 28: inputs read within bounds wherever they come from (fsspec URLs, bz2/xz, other text encodings), Dask
scheduler addresses checked and reached within a deadline (listeners on 127.0.0.1 only), diff's gate on a base
of 0 µs, reports never written over an input, hooks inert in other threads. End to end: tests/e2e/test_corpus.py."""

import bz2
import codecs
import gzip
import json
import lzma
import os
import re
import struct
import threading
import time
import zipfile

import badcorpus
import fsspec
import numpy as np
import pytest
from perfsleuth.errors import TraceError, UsageError
from perfsleuth.trace import encodings, sources
from perfsleuth.trace.model import load_trace
from tracebuilder import TraceBuilder


def _doc() -> bytes:
    tb = TraceBuilder(device=False)
    for i in range(4):
        tb.step(i + 1, i * 100.0, 100.0)
        tb.op("aten::mm", i * 100.0 + 5, 90.0)
    return json.dumps(tb.build()).encode()


def _events(path) -> int:
    return load_trace(path).event_count


@pytest.mark.parametrize("name,encode", [
    ("bom.json", lambda b: codecs.BOM_UTF8 + b), ("u16.json", lambda b: b.decode().encode("utf-16")),
    ("u16be.json", lambda b: b.decode().encode("utf-16-be")), ("u32.json", lambda b: b.decode().encode("utf-32")),
    ("t.json.bz2", bz2.compress), ("t.json.xz", lzma.compress),
    ("bom.json.gz", lambda b: gzip.compress(codecs.BOM_UTF8 + b)),
    ("u16.json.gz", lambda b: gzip.compress(b.decode().encode("utf-16")))])
def test_other_encodings_and_compressions_read_the_same_events(tmp_path, name, encode):
    plain = tmp_path / "plain.json"
    plain.write_bytes(_doc())
    other = tmp_path / name
    other.write_bytes(encode(_doc()))
    assert _events(other) == _events(plain) == 8


@pytest.mark.parametrize("head,said", [(b"PK\x03\x04", "is a zip archive: unzip it first"),
                                       (b"\x28\xb5\x2f\xfd", "is zstd-compressed: decompress it first (zstd -d)"),
                                       (b"\x80\x05", "is a Python pickle"), (b"SQLite format 3\x00", "an SQLite database")])
def test_formats_that_are_no_trace_are_named(tmp_path, head, said):
    path = tmp_path / "t.json"
    path.write_bytes(head + b"\x00" * 64)
    with pytest.raises(TraceError, match=re.escape(said)):
        load_trace(path)


def test_bz2_and_xz_are_inflated_within_gzips_bounds(tmp_path):
    spaces = b" " * (80 << 20)  # past the 64 MiB from which the ratio counts, at ~1000x
    for name, data in (("b.json.bz2", bz2.compress(spaces, 1)), ("x.json.xz", lzma.compress(spaces, preset=0))):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(TraceError, match="inflates to more than 100 times its compressed size"):
            load_trace(tmp_path / name)
    (tmp_path / "cut.json.xz").write_bytes(lzma.compress(_doc())[:-30])
    with pytest.raises(TraceError, match="corrupt or truncated xz data"):
        load_trace(tmp_path / "cut.json.xz")
    assert encodings.decompress("x", b"BZ") == b"BZ"  # too short to be bz2: left alone


def test_memory_urls_are_read_and_bounded():
    fs = fsspec.filesystem("memory")
    fs.pipe("/robust/t.json.gz", gzip.compress(_doc()))
    assert load_trace("memory://robust/t.json.gz").event_count == 8
    buf = __import__("io").BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("trace.json", "w", force_zip64=True) as f:
            for _ in range(80):
                f.write(b" " * (1 << 20))
    fs.pipe("/robust/bomb.zip", buf.getvalue())
    started = time.monotonic()
    with pytest.raises(TraceError, match="inflates to more than 100 times its compressed size"):
        load_trace("zip://trace.json::memory://robust/bomb.zip")
    assert time.monotonic() - started < 5  # refused from the member's sizes, before it is read
    fs.mkdir("/robust/dir")
    with pytest.raises(TraceError, match="is a directory"):
        sources.read_url("memory://robust/dir")


def test_local_urls_take_the_local_readers_checks(tmp_path):
    os.mkfifo(tmp_path / "fifo.json")
    for url, said in ((f"local://{tmp_path / 'fifo.json'}", "is a FIFO (named pipe), not a regular file"),
                      ("local:///dev/zero", "is a character device, not a regular file"),
                      (f"zip://t.json::file://{tmp_path / 'fifo.json'}", "is a FIFO (named pipe), not a regular file"),
                      (f"local://{tmp_path / 'none.json'}", "no such file or directory")):
        with pytest.raises(TraceError, match=said.replace("(", r"\(").replace(")", r"\)")):
            load_trace(url)
    (tmp_path / "t.json").write_bytes(_doc())
    assert load_trace(f"local://{tmp_path / 't.json'}").event_count == 8


def test_a_call_that_never_answers_is_bounded():
    started = time.monotonic()
    with pytest.raises(TraceError, match=r"no answer within 0.2 s while reading \(an unreachable or silent server\?\)"):
        sources._within("s3://b/t.json", 0.2, "reading", lambda: time.sleep(30))
    assert time.monotonic() - started < 5
    with pytest.raises(ZeroDivisionError):  # an error in the call is the caller's to word
        sources._within("s3://b/t.json", 5, "reading", lambda: 1 / 0)


@pytest.mark.parametrize("address,said", [
    ("tcp://a:b", "the port must be a number from 1 to 65535, got 'b'"),
    ("tcp://127.0.0.1:99999", "the port must be a number from 1 to 65535, got '99999'"),
    ("tcp://127.0.0.1:0", "the port must be a number from 1 to 65535, got '0'"),
    ("tcp://[::1:1", "an IPv6 address needs its closing ']'"),
    ("tcp://[::g]:1", "'::g' is not an IPv6 address"),
    ("tcp://::1:8786", "an IPv6 address goes in brackets"),
    ("tcp://host", "no port (tcp://HOST:PORT)"),
    ("tcp://:8786", "no host"),
    ("tcp://bad_host!:1", "'bad_host!' is not a host name or an IP address"),
    ("tcp://1.2.3.4:5/x", "got '5/x'"),
    ("ws://127.0.0.1:8786", "must start with tcp:// or tls://"),
    ("127.0.0.1:8786", "must start with tcp:// or tls://")])
def test_scheduler_addresses_are_checked(address, said):
    from perfsleuth.trace.cluster import check_scheduler

    with pytest.raises(UsageError) as err:
        check_scheduler(address)
    assert said in str(err.value) and str(err.value).count("\n") == 0


def test_good_scheduler_addresses_pass():
    from perfsleuth.trace.cluster import check_scheduler

    for address in ("tcp://127.0.0.1:8786", "tls://sched.example.org:8786", "tcp://[::1]:8786", "local", None):
        check_scheduler(address)


_listener = badcorpus._listener  # a 127.0.0.1 listener that sends `answer` and then holds the connection


def test_a_listener_that_never_answers_is_bounded_and_a_huge_frame_is_no_memory_error():
    from perfsleuth.trace.cluster import _hello

    started = time.monotonic()
    with pytest.raises(UsageError, match=r"cannot reach the Dask scheduler at tcp://127.0.0.1:\d+: no answer within 2 s"):
        _hello(f"tcp://127.0.0.1:{_listener(b'')}", 2)
    assert time.monotonic() - started < 15
    with pytest.raises(UsageError, match="is not a Dask scheduler: its first answer announces a message too large"):
        _hello(f"tcp://127.0.0.1:{_listener(struct.pack('Q', 2 ** 62))}", 5)


def test_diff_gate_on_a_base_of_zero_or_denormal_steps():
    from perfsleuth.cli.diff import DiffConfig, step_change
    from perfsleuth.cli.gates import check_regression, growth

    head = np.array([2000.0, 2100.0, 2200.0])
    for base_us in (0.0, 5e-324, 1e-300):
        step = step_change(np.full(3, base_us), head, DiffConfig())
        assert step["change"] is None and step["call"] == "regression"
        [line] = check_regression({"step_time": step}, 0.10)
        assert "no percentage against it, and more than any --fail-on-regression" in line and len(line) < 300
    assert step_change(np.full(3, 0.001), head, DiffConfig())["change"] == 2099999.0
    assert (growth(0.123), growth(8.99), growth(2099999.0)) == ("+12.3%", "+899.0%", "×2,100,000")


def test_no_report_over_an_input_whatever_force_says(tmp_path):
    from perfsleuth.render import safe_write

    trace = tmp_path / "t.json"
    trace.write_bytes(_doc())
    (tmp_path / "sym.json").symlink_to(trace)
    os.link(trace, tmp_path / "hard.json")
    safe_write.protect([trace, "memory://not/a/file", tmp_path / "missing.json"])
    try:
        for target, how in ((trace, ""), (tmp_path / "sym.json", " through a symbolic link"),
                            (tmp_path / "hard.json", " under another name (a hard link)")):
            with pytest.raises(UsageError) as err:
                safe_write.check_target(target, "json", force=True)
            assert str(err.value) == (f"{target}: is the input {trace}{how}; perfsleuth never writes a report over "
                                      "its input, --force or not")
        (tmp_path / "other.json").write_text("{}")
        assert safe_write.check_target(tmp_path / "other.json", "json", force=True) is not None
    finally:
        safe_write._INPUTS.clear()


def test_hooks_belong_to_the_thread_and_process_that_installed_them():
    from perfsleuth.record.forks import Owner

    owner, seen = Owner(), []
    assert owner.here() and owner.in_process()
    thread = threading.Thread(target=lambda: seen.append((owner.here(), owner.in_process())))
    thread.start()
    thread.join()
    assert seen == [(False, True)]
