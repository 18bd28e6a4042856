"""The autotuner's plans as data (csrc/gemm_plan_store.cpp): the table every process keeps, its
file (persistent across processes, atomic, tolerant to corruption) and the sharing of one rank's
plans with the group (mkernel.share_gemm_plans, gemm_plan(..., group=)). All CPU: the plans are
strings; which plan the CUDA tuner picks is tested in test_gemm_autotune.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mkernel

DEV = "NVIDIA H200;sm90;sms132;drv13000;rt13000;tune2"


def table(plans: dict[str, str]) -> str:
    return json.dumps({"format": "mkernel-gemm-plans-1", "plans": plans})


def exported() -> dict[str, str]:
    doc = json.loads(torch.ops.mkernel.gemm_plans_export())
    assert doc["format"] == "mkernel-gemm-plans-1"
    return doc["plans"]


class FakeGroup:
    """A rank of a group whose all-gather returns what each rank would send (recorded)."""

    def __init__(self, rank: int, others: list[bytes]):
        self.rank, self.others, self.sent = rank, others, None

    def allgather_bytes(self, blob: bytes) -> list[bytes]:
        self.sent = blob
        out = list(self.others)
        out[self.rank] = blob
        return out


def test_import_export_round_trip_and_bad_tables():
    key = f"{DEV}|bf16|e0|m512|n4096|k1024"
    assert torch.ops.mkernel.gemm_plans_import(table({key: "coop_128x256_c2x1/s8/n"})) == 1
    assert exported()[key] == "coop_128x256_c2x1/s8/n"
    odd = f'{DEV} "quoted" \\ back|fp16|e0|m1|n8|k8'  # escaped both ways
    torch.ops.mkernel.gemm_plans_import(table({odd: "ping_64x128_c1x1/s1/m"}))
    assert exported()[odd] == "ping_64x128_c1x1/s1/m"
    for bad in ["", "{}", "not json", '{"format": "other", "plans": {}}', table({"k": "v"})[:-3],
                '{"format": "mkernel-gemm-plans-1", "plans": {"k": 3}}']:
        with pytest.raises(ValueError, match="not a GEMM plan table"):
            torch.ops.mkernel.gemm_plans_import(bad)


def test_share_gemm_plans_sends_roots_table_and_installs_it():
    key = f"{DEV}|bf16|e0|m1024|n7168|k8192"
    root_table = table({key: "ping_128x128_c1x2/s4/m"})
    # Rank 1 receives root's table: installed, replacing its own plan for the key.
    torch.ops.mkernel.gemm_plans_import(table({key: "coop_256x128_c1x2/s1/m"}))
    peer = FakeGroup(1, [root_table.encode(), b""])
    assert mkernel.share_gemm_plans(peer) == 1
    assert peer.sent == b"", "a non-root rank sends nothing"
    assert exported()[key] == "ping_128x128_c1x2/s4/m"
    # Root sends its whole table and changes nothing of its own.
    before = exported()
    root = FakeGroup(0, [b"", b""])
    assert mkernel.share_gemm_plans(root) == len(before)
    assert json.loads(root.sent)["plans"] == before == exported()
    # Another root: rank 0 takes rank 2's table.
    key2 = f"{DEV}|fp16|e8|m2048|n1024|k512"
    r0 = FakeGroup(0, [b"", b"", table({key2: "coop_128x128_c2x1/s8/n"}).encode()])
    mkernel.share_gemm_plans(r0, root=2)
    assert exported()[key2] == "coop_128x128_c2x1/s8/n"
    with pytest.raises(ValueError, match="root 5 is not a rank"):
        mkernel.share_gemm_plans(FakeGroup(0, [b"", b""]), root=5)
    with pytest.raises(TypeError, match="mkernel context"):
        mkernel.share_gemm_plans(object())


def test_gemm_plan_with_group_tunes_on_root_only(monkeypatch):
    calls = []
    real = torch.ops.mkernel.gemm_plan.default

    def counting(a, b, sm_count):
        calls.append(sm_count)
        return real(a, b, sm_count)

    monkeypatch.setattr(torch.ops.mkernel.gemm_plan, "default", counting)
    a, b = torch.randn(5, 16), torch.randn(8, 16)
    payload = table({}).encode()
    assert mkernel.gemm_plan(a, b, group=FakeGroup(1, [payload, b""])) == "host reference"
    assert len(calls) == 1, "a non-root rank queries once, after the plans arrived"
    calls.clear()
    assert mkernel.gemm_plan(a, b, group=FakeGroup(0, [b"", b""])) == "host reference"
    assert len(calls) == 2, "root tunes (query 1), shares, then answers (query 2)"


RUN = """
import json, sys, torch, mkernel
what = sys.argv[1]
if what == "import":
    n = torch.ops.mkernel.gemm_plans_import(sys.argv[2], True)
    print("IMPORTED", n)
print("FILE", mkernel.gemm_plans_file())
print("PLANS", json.dumps(json.loads(torch.ops.mkernel.gemm_plans_export())["plans"]))
"""


def run(env: dict[str, str], *args: str) -> tuple[str, dict[str, str], str]:
    r = subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **env})
    assert r.returncode == 0, r.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    return lines["FILE"], json.loads(lines["PLANS"]), r.stderr


def test_plans_persist_across_processes_and_survive_a_corrupt_file(tmp_path: Path):
    env = {"MKERNEL_CACHE_DIR": str(tmp_path / "cache"), "MKERNEL_GEMM_PLAN_CACHE": "1"}
    k1, k2 = f"{DEV}|bf16|e0|m64|n8192|k8192", f"{DEV}|bf16|e0|m4096|n8192|k8192"
    path, plans, _ = run(env, "import", table({k1: "ping_64x128_c1x1/s1/m"}))
    assert path == str(tmp_path / "cache" / "gemm_plans.json")  # the directory is created
    assert plans == {k1: "ping_64x128_c1x1/s1/m"}
    # A new process reads the file; its own plans merge into it (nothing of the first is lost).
    _, plans, _ = run(env, "import", table({k2: "coop_128x256_c2x1/s1/m"}))
    assert plans == {k1: "ping_64x128_c1x1/s1/m", k2: "coop_128x256_c2x1/s1/m"}
    on_disk = json.loads(Path(path).read_text())["plans"]
    assert on_disk == plans
    assert not [p for p in Path(path).parent.iterdir() if ".tmp." in p.name], "temporary file left"
    # A torn or foreign file: ignored with a warning, then replaced whole by the next store.
    Path(path).write_text('{"format": "mkernel-gemm-plans-1", "plans": {"x": ')
    _, plans, err = run(env, "list")
    assert plans == {} and "is not a plan table" in err
    _, plans, _ = run(env, "import", table({k1: "ping_64x128_c1x1/s1/m"}))
    assert json.loads(Path(path).read_text())["plans"] == {k1: "ping_64x128_c1x1/s1/m"}
    # MKERNEL_GEMM_PLAN_CACHE=0: memory only, the file is neither read nor written.
    path, plans, _ = run({**env, "MKERNEL_GEMM_PLAN_CACHE": "0"}, "import",
                         table({k2: "coop_128x128_c2x1/s1/m"}))
    assert path == "" and plans == {k2: "coop_128x128_c2x1/s1/m"}
    assert json.loads(Path(path or tmp_path / "cache" / "gemm_plans.json").read_text())["plans"] == {
        k1: "ping_64x128_c1x1/s1/m"}
