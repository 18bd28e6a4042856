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
                                str(ROOT / "csrc/comm/gdr_copier_serve.cpp"), str(ROOT / "csrc/env_knobs.cpp"),
                                "-o", str(exe), "-ldl", "-pthread"])
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


# The copies' submission (xnode7): the copy engines by default (cudaMemcpyBatchAsync, the posted
# copies of a batch with one attribute entry: stream order, PreferOverlapWithCompute; the mock
# refuses any other attributes), plain
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
    assert 1 <= s["submits"] <= s["copies"] and s["submit_us_mean"] >= 0, s
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


def burst(built, env: dict[str, str]) -> tuple[float, dict]:
    out = drive(built, "burst", env=env)
    m = re.search(r"^BURST 512 65536 ([0-9.]+)$", out, re.M)
    assert m, out
    return float(m.group(1)), submit_of(out)


# Session 17: fused gemm_rs across 2 emulated nodes posts ~512 copies of 64 KiB per call, and the
# helper retired them at ~0.5 ms each (queueing 15-22 ms) on the device — the signature of a fixed
# cost per submission on the GPU side (work launch, the event's release), since this loop's own
# cost is ~0.2 us per copy. Modelled here: 200 us per submission call however many copies it
# holds (MOCK_OP_US; the batch call of the ce path), or per event (MOCK_EVENT_US; both paths record
# one event per submission). One copy per submission (MKERNEL_NET_GDR_COPIER_BATCH=1, the old
# helper) takes 512 x 200 us; the batched helper submits what is posted together, with one event
# each, and takes a few submissions' cost. Every copy still lands and is counted.
@pytest.mark.parametrize("submit,cost", [("ce", "MOCK_OP_US"), ("ce", "MOCK_EVENT_US"), ("plain", "MOCK_EVENT_US")])
def test_a_burst_pays_the_per_submission_cost_once_per_batch(built, submit, cost) -> None:
    env = {cost: "200", "DRIVER_SUBMIT": submit}
    slow, s1 = burst(built, dict(env, MKERNEL_NET_GDR_COPIER_BATCH="1"))
    fast, sb = burst(built, env)
    assert s1["copies"] == sb["copies"] == 512 and s1["submits"] == 512, (s1, sb)
    assert slow >= 512 * 0.2 * 0.99, (slow, s1)
    # at most 256 copies (16 MiB) per submission: >= 2 submissions; far fewer than 512
    assert 2 <= sb["submits"] <= 64, sb
    # The counts above are the signature; the time bound is loose: on a loaded 2-core machine
    # (session 26: a compile beside the suite) the batched burst took 36.6 ms against 107.7,
    # its poster slowed more than its <= 64 submissions' 12.8 ms of modelled cost.
    assert fast < 0.5 * slow, (fast, slow, sb)


# Batching amortises a per-submission cost, not a per-copy one (MOCK_COPY_US: 100 us per copy):
# then the burst takes 512 x 100 us either way — the emulation gets no faster than its copies.
def test_a_per_copy_cost_is_not_hidden_by_batching(built) -> None:
    took, s = burst(built, {"MOCK_COPY_US": "100"})
    assert took >= 512 * 0.1 * 0.99 and s["copies"] == 512, (took, s)


# The copies of one batch call may run in any order: a destination that overlaps one already in
# the batch starts the next batch (8 slots reused in turn: at most 8 copies per submission).
def test_overlapping_destinations_never_share_a_batch(built) -> None:
    _, s = burst(built, {"BURST_SLOTS": "8", "MOCK_OP_US": "20"})
    assert s["copies"] == 512 and s["submits"] >= 512 // 8, s


def test_a_bad_batch_value_is_refused(built) -> None:
    exe, mock, driver = built
    import os
    r = subprocess.run([str(driver), str(exe), str(mock), "burst"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, MKERNEL_NET_GDR_COPIER_BATCH="0"))
    assert r.returncode != 0 and "MKERNEL_NET_GDR_COPIER_BATCH=\"0\": want 1..512" in r.stdout + r.stderr, r
