"""Opening input files safely: regular files only, errors worded for a person, gzip inflated within
bounds (docs/robustness.md).

A FIFO, a device (/dev/zero, /dev/urandom) or a socket is refused after `open` by `fstat` on the
open descriptor (no window between a check and the read); `O_NONBLOCK` keeps the open itself from
waiting for a FIFO's writer. Symlinks are followed, and a loop or a dangling link is said as such.
"""

from __future__ import annotations

import errno
import os
import stat
import zlib
from pathlib import Path
from typing import BinaryIO

from ..config import LIMITS
from ..errors import TraceError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
IN_BYTES = 1 << 20  # compressed bytes fed at a time
OUT_BYTES = 16 << 20  # inflated bytes taken at a time


def kind_of(mode: int) -> str:
    """'a regular file', 'a directory', 'a FIFO (named pipe)', ... for an st_mode."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode)
                else "not a regular file")


def describe_os_error(path, exc: OSError) -> str:
    """The problem in words: a symlink loop, a dangling link, a folder that cannot be searched, ..."""
    code = exc.errno
    if code == errno.ELOOP:
        return "a symbolic link loop (too many levels of symbolic links)"
    if code == errno.ENOENT:
        return "a symbolic link to a missing file" if os.path.islink(path) else "no such file or directory"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied (the file, or a folder on its path, is not readable for this user)"
    if code == errno.ENOTDIR:
        return "a part of the path is not a directory"
    if code == errno.ENAMETOOLONG:
        return "the file name is too long"
    return f"cannot read ({exc.strerror or exc})"


def open_regular(path: Path, *, allow_dir: bool = False) -> BinaryIO:
    """`path` opened for binary reading; TraceError unless it is a regular file (after symlinks)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise TraceError(path, describe_os_error(path, exc)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode) and not (allow_dir and stat.S_ISDIR(mode)):
            raise TraceError(path, f"is {kind_of(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def memory_bytes() -> int:
    """The machine's physical memory (0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def max_document_bytes() -> int:
    """The largest document perfsleuth will hold: a share of the machine's memory."""
    mem = memory_bytes()
    return int(mem * LIMITS.memory_share) if mem else 1 << 62


def check_size(path, size: int, ceiling: int) -> None:
    """TraceError when a document of `size` bytes is more than this machine can analyse."""
    if size > ceiling:
        raise TraceError(path, f"is larger than {ceiling / 2**30:.1f} GiB, more than this machine can analyse (the "
                               f"limit is {LIMITS.memory_share:.0%} of its memory)")


def check_inflated(path, out: int, consumed: int, ceiling: int) -> None:
    """TraceError when `out` inflated bytes (from `consumed` compressed ones) break a bound."""
    if out > ceiling:
        raise TraceError(path, f"inflates to more than {ceiling / 2**30:.1f} GiB, more than this machine can "
                               f"analyse (the limit is {LIMITS.memory_share:.0%} of its memory)")
    if out >= LIMITS.inflate_ratio_from and out > LIMITS.inflate_ratio * max(consumed, 1):
        raise TraceError(path, f"inflates to more than {LIMITS.inflate_ratio} times its compressed size "
                               "(a decompression bomb? real traces compress 5-25 times)")


def inflate(path, gz) -> bytearray:
    """A gzip stream (one or more members) inflated, within the bounds of `check_inflated`. Input
    goes in IN_BYTES at a time and output comes out OUT_BYTES at a time, so a bomb is stopped early."""
    ceiling = max_document_bytes()
    data = memoryview(gz)
    out = bytearray()
    start = 0
    while True:
        inflater = zlib.decompressobj(wbits=31)
        pos = start
        try:
            while not inflater.eof and pos < len(data):
                chunk = data[pos:pos + IN_BYTES]
                pos += len(chunk)
                out += inflater.decompress(chunk, OUT_BYTES)
                check_inflated(path, len(out), pos, ceiling)
                while inflater.unconsumed_tail and not inflater.eof:
                    out += inflater.decompress(inflater.unconsumed_tail, OUT_BYTES)
                    check_inflated(path, len(out), pos, ceiling)
        except zlib.error as exc:
            raise TraceError(path, f"corrupt or truncated gzip data ({exc})") from None
        if not inflater.eof:
            raise TraceError(path, "corrupt or truncated gzip data (the stream ends early)")
        start = pos - len(inflater.unused_data)
        if bytes(data[start:start + 2]) != b"\x1f\x8b":  # no further member (padding or garbage is ignored)
            return out
