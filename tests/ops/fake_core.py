"""A stand-in for the Go core's C API table (csrc/include/mkernel/core_api.h), built with ctypes.

Used to test torch.ops.mkernel._bind_core without the Go library. A table that binds stays bound
for the life of the process, so tests that bind one run in a subprocess (`python fake_core.py
LIBRARY SCENARIO`); tests of rejected tables may run in-process.
"""

from __future__ import annotations

import ctypes
import sys

# mk_api_v1's entries after (size, version, name), in order.
ENTRIES = (
    "get_version",
    "status_string",
    "last_error",
    "log_set_level",
    "log_emit",
    "topology_json",
    "bootstrap_listen",
    "session_create",
    "session_rank",
    "session_allgather",
    "session_gathered",
    "session_barrier",
    "session_destroy",
    "datapath_create",
    "datapath_buffer",
    "datapath_fifo",
    "datapath_check",
    "datapath_stats_json",
    "datapath_destroy",
    "datapath_buffer_info",  # ABI v2
)
API_VERSION = 3  # MK_API_VERSION of csrc/include/mkernel/core_api.h (the table layout is v2's: v3 grew a config struct)
VERSION_TEXT = b"9.9.9-fake"


class MkApiV1(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("version", ctypes.c_uint32), ("name", ctypes.c_char_p)]
    _fields_ += [(name, ctypes.c_void_p) for name in ENTRIES]


GetVersion = ctypes.CFUNCTYPE(ctypes.c_void_p)
_version_buf = ctypes.create_string_buffer(VERSION_TEXT)
_get_version = GetVersion(lambda: ctypes.addressof(_version_buf))
_unused = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 0)  # stands in for entries never called


def make_table(**fields) -> MkApiV1:
    """A valid table of this ABI, with `fields` (size=..., name=..., get_version=None, ...)
    replaced."""
    table = MkApiV1(size=ctypes.sizeof(MkApiV1), version=API_VERSION, name=b"mkernel-core")
    for name in ENTRIES:
        setattr(table, name, ctypes.cast(_unused, ctypes.c_void_p))
    table.get_version = ctypes.cast(_get_version, ctypes.c_void_p)
    for key, value in fields.items():
        setattr(table, key, value)
    return table


def address(table: MkApiV1) -> int:
    return ctypes.addressof(table)


def _bind_lifecycle() -> None:
    import torch

    ops = torch.ops.mkernel
    try:
        ops.core_version()
        raise AssertionError("core_version() worked before any table was bound")
    except RuntimeError as e:
        assert "mkernel core not bound: call mkernel.init() / import mkernel first" in str(e), e
    table = make_table()
    assert ops._bind_core(address(table)) == API_VERSION
    assert ops.core_version() == VERSION_TEXT.decode()
    assert ops._bind_core(address(table)) == API_VERSION, "binding the same table again must be a no-op"
    other = make_table()
    try:
        ops._bind_core(address(other))
        raise AssertionError("a second, different table was accepted")
    except RuntimeError as e:
        assert "already bound" in str(e) and "exactly one Go library" in str(e), e
    assert ops.core_version() == VERSION_TEXT.decode()


def _bind_newer_abi() -> None:
    """A newer library's table (appended fields, bumped version) serves this extension."""
    import torch

    class MkApiV2(ctypes.Structure):
        _fields_ = [("v1", MkApiV1), ("appended", ctypes.c_void_p)]

    table = MkApiV2(v1=make_table(size=ctypes.sizeof(MkApiV2), version=API_VERSION + 1))
    assert torch.ops.mkernel._bind_core(ctypes.addressof(table)) == API_VERSION + 1
    assert torch.ops.mkernel.core_version() == VERSION_TEXT.decode()


SCENARIOS = {"bind_lifecycle": _bind_lifecycle, "bind_newer_abi": _bind_newer_abi}

if __name__ == "__main__":
    import torch

    torch.ops.load_library(sys.argv[1])
    SCENARIOS[sys.argv[2]]()
    print("ok")
