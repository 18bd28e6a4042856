"""benchmarks/bench_collectives.py's driver when a world size fails, without a GPU (the rank
processes are replaced by recorded results): the rows of the world sizes that finished are still
printed and written, the JSON says which ranks failed and why, every failing rank's own reason
(its RANKFAIL line) is printed, and the run still exits non-zero. Session 8 run 2 lost its W=2/4
rows and the first failing rank's reason because a W=8 rank failed."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
import bench_collectives  # noqa: E402
import common  # noqa: E402
import tests.launch  # noqa: E402


def _row(world: int) -> dict:
    return {"world": world, "nodes": 2, "op": "all_gather", "bytes": 16 << 20, "median_ms": 1.5,
            "baseline_ms": 0.05, "busbw_gbs": 5.3, "baseline_busbw_gbs": 300.0, "ratio": 0.02,
            "net": "loopback", "net_stage": "parallel", "transport_gbs": 18.0, "net_gbs": 5.3,
            "pcie_d2h_gbs": 27.0, "pcie_h2d_gbs": 27.0, "pcie_gbs": 13.5,
            "proxy_p50_us": 64.0, "proxy_p90_us": 128.0, "overlap_ms": 1.2, "overlap_speedup": 1.25}


def test_a_failing_world_keeps_earlier_rows_and_every_rank_reason(monkeypatch, capsys):
    def run_ranks(code, world, **kwargs):
        assert "RANKFAIL" in code  # the rank code reports its own failure on stdout
        if world == 2:
            return [SimpleNamespace(rank=0, returncode=0, stdout="RESULT " + json.dumps(_row(2)) + "\n", stderr=""),
                    SimpleNamespace(rank=1, returncode=0, stdout="", stderr="")]
        return [SimpleNamespace(rank=0, returncode=-6, stdout="RESULT " + json.dumps(_row(world)) + "\n",
                                stderr="bystander: unspecified launch failure"),
                SimpleNamespace(rank=4, returncode=1, stdout="RANKFAIL rank 4: SystemExit: differs\n", stderr="tb")]

    written = {}
    monkeypatch.setattr(common, "start_mps", lambda name: ({}, lambda: None))
    monkeypatch.setattr(common, "write_result", lambda name, payload: written.update(payload))
    monkeypatch.setattr(common, "commit", lambda: "test")
    monkeypatch.setattr(common, "device_info", lambda: {})
    monkeypatch.setattr(tests.launch, "run_ranks", run_ranks)
    monkeypatch.setattr(sys, "argv", ["bench_collectives.py", "--worlds", "2,8,4", "--nodes", "2", "--overlap-ab"])
    with pytest.raises(SystemExit) as exc:
        bench_collectives.main()
    assert "failed" in str(exc.value)
    out, err = capsys.readouterr()
    table = [line for line in out.splitlines() if line.lstrip()[:1].isdigit()]
    assert [line.split()[0] for line in table] == ["2", "8"], out  # W=4 never ran: W=8 failed first
    assert "overlap x1.25" in table[0] and "64/128" in table[0], table[0]
    assert "rank 4 failed (rc 1): RANKFAIL rank 4: SystemExit: differs" in err, err
    assert "rank 0 failed (rc -6): (no RANKFAIL line)" in err, err
    assert [r["world"] for r in written["rows"]] == [2, 8]
    assert written["failed"] == [{"world": 8, "ranks": {0: -6, 4: 1}, "reasons": ["RANKFAIL rank 4: SystemExit: differs"]}]
