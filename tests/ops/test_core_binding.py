"""torch.ops.mkernel._bind_core / core_version: the Go core's C API table, handed over by address.

The real table needs the Go library (tests/core covers it); here a ctypes stand-in checks the
binding's rules. Only rejected tables are tried in this process: a table that binds stays bound.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from . import fake_core


def bind(address: int) -> int:
    return torch.ops.mkernel._bind_core(address)


def test_null_address():
    with pytest.raises(ValueError, match=r"mkernel\._bind_core: api_table_address is 0 \(NULL\)"):
        bind(0)


def test_negative_address():
    with pytest.raises(
        ValueError, match=r"api_table_address must be a user-space address > 0, got -8"
    ):
        bind(-8)


@pytest.mark.parametrize(
    "fields, match",
    [
        pytest.param(dict(size=0), r"the API table is empty \(size 0, version 3\)", id="size_0"),
        pytest.param(
            dict(version=0), r"the API table is empty \(size \d+, version 0\)", id="version_0"
        ),
        pytest.param(
            dict(name=b"other-lib"),
            r"the API table is not mkernel's \(name \"other-lib\", expected \"mkernel-core\"\)",
            id="wrong_name",
        ),
        pytest.param(
            dict(name=None), r"the API table is not mkernel's \(name \"\(null\)\"", id="null_name"
        ),
        pytest.param(
            dict(size=16),
            r"the mkernel core library serves ABI version 3 with a table of 16 bytes, "
            r"but this extension needs version >= 3 with >= \d+ bytes",
            id="size_too_small",
        ),
        pytest.param(
            # A core built before the device copier (ABI v3; session 10 run 1's stale core): refused
            # at bind, naming both versions, instead of GPU-direct paths that silently stage.
            dict(version=2),
            r"the mkernel core library serves ABI version 2 with a table of \d+ bytes, "
            r"but this extension needs version >= 3 .*rebuild the extension and the core library together",
            id="core_older_than_extension",
        ),
        pytest.param(
            dict(get_version=None),
            r"the API table's entry get_version is NULL",
            id="null_get_version",
        ),
        pytest.param(
            dict(session_destroy=None),
            r"the API table's entry session_destroy is NULL",
            id="null_session_destroy",
        ),
        pytest.param(
            dict(datapath_destroy=None),
            r"the API table's entry datapath_destroy is NULL",
            id="null_datapath_destroy",
        ),
    ],
)
def test_rejected_table(fields, match):
    table = fake_core.make_table(**fields)
    with pytest.raises(ValueError, match=rf"mkernel\._bind_core: {match}"):
        bind(fake_core.address(table))


def test_table_layout_matches_header():
    """The stand-in mirrors mk_api_v1 (ABI v3, the table of v2): 3 header fields, then 20 function pointers."""
    assert ctypes.sizeof(fake_core.MkApiV1) == 3 * 8 + 20 * 8


@pytest.mark.parametrize("scenario", sorted(fake_core.SCENARIOS))
def test_bind_in_fresh_process(ext, scenario):
    """Unbound -> error; bind -> version; core_version() reads through the table; rebind rules."""
    script = Path(fake_core.__file__)
    r = subprocess.run(
        [sys.executable, str(script), ext.library, scenario],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("ok")
