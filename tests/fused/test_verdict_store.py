"""The fused ops' verdict cache on the host (csrc/fused_verdict_store.cpp on csrc/cache_file.cpp,
built by tests/fused/verdict_store_check.cpp): the codecs; a verdict written by one process is
read by the next; MKERNEL_FUSED_VERDICT_CACHE=0 neither reads nor writes; a corrupt file is
ignored with a warning and replaced whole; concurrent writers lose no entry; the GEMM plan file
beside it is another file. The GPU side (choose_path's agreement, the reuse lines):
tests/gpu/test_fused_ops.py::test_verdict_cache_across_processes. Skipped without g++."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.host_check import build_check, run_check

KEY = ("NVIDIA H100 80GB HBM3;sm90;sms66;drv13000;rt13000;tune2|so123.456|mkernel.ag_gemm|nodes 0,0|"
       "M~1024 N=4096 K=8192 BFloat16 W=2 peertma=auto paths=coop_128x256_c2x1 grid 28 peer-TMA "
       "order 0/0; unfused gate=auto")
VERDICT = "coop_128x256_c2x1 grid 28 peer-TMA order 0/0@M=1024 N=4096 K=8192 BFloat16 W=2 peertma=auto"


@pytest.fixture(scope="module")
def exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_check(Path(__file__).parent / "verdict_store_check.cpp",
                       tmp_path_factory.mktemp("verdict_store"),
                       flags=("-O1", "-Wall", "-Wextra", "-Werror"))


def run(exe: Path, cache: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "MKERNEL_CACHE_DIR": str(cache), "MKERNEL_FUSED_VERDICT_CACHE": "1", **env}
    return subprocess.run([str(exe), *args], env=full, capture_output=True, text=True, timeout=60)


def test_codecs(exe: Path) -> None:
    run_check(exe)


def test_a_verdict_reaches_the_next_process(exe: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert run(exe, cache, "path").stdout.strip() == str(cache / "fused_verdicts.json")
    assert run(exe, cache, "read", KEY).stdout.strip() == "none"
    assert run(exe, cache, "write", KEY, VERDICT).returncode == 0
    assert run(exe, cache, "read", KEY).stdout.strip() == VERDICT
    assert run(exe, cache, "read", KEY + " (fused forced)").stdout.strip() == "none"
    doc = json.loads((cache / "fused_verdicts.json").read_text())
    assert doc == {"format": "mkernel-fused-verdicts-1", "verdicts": {KEY: VERDICT}}
    # A later verdict for the key replaces the earlier one.
    later = "unfused@M=768 N=4096 K=8192 BFloat16 W=2 peertma=auto"
    assert run(exe, cache, "write", KEY, later).returncode == 0
    assert run(exe, cache, "read", KEY).stdout.strip() == later


def test_the_knob_keeps_verdicts_in_memory(exe: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert run(exe, cache, "path", MKERNEL_FUSED_VERDICT_CACHE="0").stdout.strip() == ""
    assert run(exe, cache, "write", KEY, VERDICT, MKERNEL_FUSED_VERDICT_CACHE="0").returncode == 0
    assert not (cache / "fused_verdicts.json").exists()
    assert run(exe, cache, "write", KEY, VERDICT).returncode == 0
    assert run(exe, cache, "read", KEY, MKERNEL_FUSED_VERDICT_CACHE="0").stdout.strip() == "none"


def test_a_corrupt_file_is_ignored_and_replaced(exe: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "fused_verdicts.json").write_text('{"format": "mkernel-fused-verdicts-1", "verdicts": {')
    r = run(exe, cache, "read", KEY)
    assert r.stdout.strip() == "none"
    assert "fused verdict cache" in r.stderr and "is not a verdict table" in r.stderr, r.stderr
    assert run(exe, cache, "write", KEY, VERDICT).returncode == 0
    assert run(exe, cache, "read", KEY).stdout.strip() == VERDICT


def test_concurrent_writers_lose_nothing(exe: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "MKERNEL_CACHE_DIR": str(cache), "MKERNEL_FUSED_VERDICT_CACHE": "1"}
    procs = [subprocess.Popen([str(exe), "write", f"{KEY} #{i}", f"unfused@M={i}"], env=env)
             for i in range(12)]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    entries = json.loads((cache / "fused_verdicts.json").read_text())["verdicts"]
    assert entries == {f"{KEY} #{i}": f"unfused@M={i}" for i in range(12)}


def test_the_gemm_plan_file_is_another_file(exe: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    plans = '{\n  "format": "mkernel-gemm-plans-1",\n  "plans": {}\n}\n'
    (cache / "gemm_plans.json").write_text(plans)
    assert run(exe, cache, "write", KEY, VERDICT).returncode == 0
    assert (cache / "gemm_plans.json").read_text() == plans


def test_python_names_the_file(tmp_path: Path) -> None:
    """mkernel.fused_verdicts_file(): the file under MKERNEL_CACHE_DIR, "" with the cache off (the
    installed extension, on any machine)."""
    code = "import mkernel; print('FILE', repr(mkernel.fused_verdicts_file()))"
    for knob, want in (("1", str(tmp_path / "c" / "fused_verdicts.json")), ("0", "")):
        env = {**os.environ, "MKERNEL_CACHE_DIR": str(tmp_path / "c"), "MKERNEL_FUSED_VERDICT_CACHE": knob}
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert f"FILE {want!r}" in r.stdout, (knob, r.stdout)
