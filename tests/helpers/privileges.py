"""Permission tests that also work as root: root reads anything through CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH, so `unprivileged()` lowers them from this thread's effective set for the block
(they stay permitted and come back afterwards), and `UNPRIVILEGED` prefixes a subprocess command
with setpriv, which drops them for good."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil

_VERSION_3 = 0x20080522
_DAC_BITS = (1 << 1) | (1 << 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _caps():
    libc = _libc()
    header, data = _Header(_VERSION_3, 0), (_Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    return libc, header, data


@contextlib.contextmanager
def unprivileged():
    """Permission bits apply in this block, also for root."""
    if os.geteuid() != 0:
        yield
        return
    libc, header, data = _caps()
    saved = data[0].effective
    data[0].effective = saved & ~_DAC_BITS
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    try:
        yield
    finally:
        data[0].effective = saved
        libc.capset(ctypes.byref(header), data)


def _prefix() -> list:
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv, "running as root: the permission tests need setpriv (util-linux) to drop CAP_DAC_*"
    return [setpriv, "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search"]


UNPRIVILEGED = _prefix()
