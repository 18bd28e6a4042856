"""The GPU-direct copier helper's protocol on the CPU (csrc/comm/gdr_copier_protocol.h): the
rank's side (CopierProcess) drives the real helper executable (csrc/tools/gdr_copier_main.cpp),
built here with g++, over a stand-in CUDA runtime whose "device memory" is host shared memory
(gdr_copier_mock_cudart.cpp). Checks: copies of two paths (a group's growth keeps the
earlier path open) land byte for byte through one shared helper, each path on its channel, with a
re-mapping and two proxy threads at once; a copy outside the mapped areas is refused with a
message and the next path gets a new helper; a slow start ends in a bounded error naming the stage the helper reached, a CUDA
failure and a missing runtime are reported, and the helper exits when its rank is killed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path, Path]:
    d = tmp_path_factory.mktemp("gdr_copier")
    exe, mock, driver = d / "mkernel-gdr-copier", d / "libcudart_mock.so", d / "driver"
    cc = ["g++", "-O1", "-std=c++17", "-Wall", "-Werror", f"-I{ROOT / 'csrc'}"]
    subprocess.check_call(cc + [str(ROOT / "csrc/tools/gdr_copier_main.cpp"),
                                str(ROOT / "csrc/comm/gdr_copier_serve.cpp"), "-o", str(exe), "-ldl", "-pthread"])
    subprocess.check_call(cc + ["-shared", "-fPIC", str(HERE / "gdr_copier_mock_cudart.cpp"), "-o", str(mock)])
    subprocess.check_call(cc + [str(HERE / "gdr_copier_driver.cpp"), str(ROOT / "csrc/comm/gdr_copier_process.cpp"),
                                "-o", str(driver), "-pthread"])
    return exe, mock, driver


def drive(built, mode: str, env: dict[str, str] | None = None, runtime: str | None = None) -> str:
    exe, mock, driver = built
    import os
    r = subprocess.run([str(driver), str(exe), runtime or str(mock), mode], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, **(env or {})))
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout + r.stderr


def test_paths_share_one_helper(built) -> None:
    out = drive(built, "copies")
    assert re.search(r"paths ok \(helper pid \d+, channels 0 1\)", out), out
    assert "COPIES OK" in out and "lies outside the mapped areas" in out, out


def submit_of(out: str) -> dict:
    import json
    m = re.search(r"^SUBMIT (\{.*\})$", out, re.M)
    assert m, out
    return json.loads(m.group(1))


# The copies' submission (xnode7): the copy engines by default (cudaMemcpyBatchAsync, one copy,
# stream order, PreferOverlapWithCompute; the mock refuses any other attributes), plain
# cudaMemcpyAsync when asked, and the fallback (noted once, on stderr and in the path info) where
# the runtime has no batch API or refuses it. Every case moves the same bytes (COPIES OK) and
# counts every copy: 3 path rounds x 300 copies of 4 KiB.
@pytest.mark.parametrize("case,env,ran,note", [
    ("ce", {}, "batch_ce", ""),
    ("plain", {"DRIVER_SUBMIT": "plain"}, "memcpy", ""),
    ("old_runtime", {"MOCK_RUNTIME_VERSION": "12060"}, "memcpy_fallback", "CUDA < 12.8"),
    ("refused", {"MOCK_BATCH_REFUSE": "1"}, "memcpy_fallback", "refused the copy: operation not supported"),
])
def test_the_submission_path(built, case, env, ran, note) -> None:
    out = drive(built, "copies", env=env)
    assert "COPIES OK" in out, out
    s = submit_of(out)
    assert s["where"] == "process" and s["ran"] == ran, s
    assert s["asked"] == ("memcpy" if case == "plain" else "batch_ce"), s
    assert (note in s["note"]) if note else s["note"] == "", s
    assert s["copies"] == 900 and abs(s["mib"] - 900 * 4096 / 2**20) < 1e-3, s
    assert 0 <= s["service_us_mean"] <= s["latency_us_mean"] + 1e-6, s
    assert s["latency_us_max"] >= s["latency_us_mean"] - 1e-6, s
    # the fallback is said once on the helper's stderr (the rank's), never when plain was asked
    assert out.count("submitted as plain cudaMemcpyAsync") == (1 if note else 0), out


def test_the_helper_exits_with_its_rank(built) -> None:
    out = drive(built, "orphan")
    m = re.search(r"ORPHAN GONE after ([0-9.]+) s", out)
    assert m and float(m.group(1)) < 1.0, out


def test_a_slow_start_names_the_stage(built) -> None:
    out = drive(built, "500", env={"MOCK_SETDEVICE_MS": "3000"})
    m = re.search(r"ERROR after ([0-9.]+) s: (.*)", out)
    assert m and 0.45 < float(m.group(1)) < 2.0, out
    assert "within 500 ms" in m.group(2) and "creating its CUDA context" in m.group(2), out
    u = re.search(r"UNMAP after failure: ([0-9.]+) s", out)  # the failed path's teardown does not wait
    assert u and float(u.group(1)) < 0.5, out


def test_a_cuda_failure_is_reported(built) -> None:
    out = drive(built, "5000", env={"MOCK_SETDEVICE_FAIL": "1"})
    assert "failed while starting" in out and "cudaSetDevice" in out and "no CUDA-capable device" in out, out


def test_a_missing_runtime_is_reported(built) -> None:
    out = drive(built, "5000", runtime="/nonexistent/libcudart.so")
    assert "exited (exit status 3)" in out and "cannot load the CUDA runtime" in out, out
