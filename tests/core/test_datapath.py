"""The inter-node data path (Go: gocore/datapath) from Python: symmetric buffers, the
command FIFO, the proxy and a transport across W local processes in emulated nodes."""

import pytest

from tests.launch import run_ranks

ROUND_TRIP = """
import ctypes, json, os, sys, time
import torch.distributed as dist
import mkernel
from mkernel._native import core
dist.init_process_group("gloo")
ctx = mkernel.init()
rank, world = ctx.rank, ctx.world_size
nodes = int(os.environ["TEST_NODES"])
per = max(1, world // nodes)
node = [r // per for r in range(world)]
cfg = {"buffers": {"1": 1 << 20, "2": 1 << 20}, "node": node, "net": os.environ["TEST_NET"], "timeout_ms": 20000}
h = core.DatapathCreate(ctx.handle, json.dumps(cfg))
def view(buf):
    b = json.loads(core.DatapathBuffer(h, buf))
    return (ctypes.c_ubyte * b["bytes"]).from_address(b["address"])
src, dst = view(2), view(1)
n = 1000 + 37 * rank  # ragged
for i in range(n):
    src[i] = (rank * 31 + i) % 251
peers = [p for p in range(world) if node[p] != node[rank]]
for p in peers:
    core.DatapathPush(h, json.dumps({"kind": "write", "peer": p, "local_buf": 2, "remote_buf": 1,
                                     "remote_off": rank * 4096, "bytes": n}), 10000)
    core.DatapathPush(h, json.dumps({"kind": "write_signal", "peer": p, "arrival_slot": rank, "arrival_seq": 1}), 10000)
for p in peers:
    core.DatapathWaitFlag(h, p, 1, 20000)
    m = 1000 + 37 * p
    got = bytes(dst[p * 4096 : p * 4096 + m])
    want = bytes((p * 31 + i) % 251 for i in range(m))
    assert got == want, f"rank {rank}: data from rank {p} differs"
if peers:
    core.DatapathPush(h, json.dumps({"kind": "barrier", "arrival_slot": 100, "arrival_seq": 1}), 10000)
    for p in peers:
        core.DatapathWaitFlag(h, 100 + p, 1, 20000)
core.DatapathCheck(h)
want = 2 * len(peers) + 1 if peers else 0  # writes and signals, one barrier
deadline = time.monotonic() + 20
while True:  # our own barrier may still be in flight: wait until every command finished
    stats = json.loads(core.DatapathStatsJSON(h))
    if stats["finished"] == want or time.monotonic() > deadline:
        break
    time.sleep(0.01)
assert stats["rank"] == rank and "error" not in stats, stats
assert stats["consumed"] == want and stats["finished"] == want and stats["queue_depth"] == 0, stats
assert stats["latency"]["count"] <= want, stats
assert len(stats["latency"]["counts"]) == 32, stats
# LL slots are the default; MKERNEL_FIFO_LL=0 opts out (the ranks inherit the test's environment)
assert stats["fifo_format"] == ("seq" if os.environ.get("MKERNEL_FIFO_LL") == "0" else "ll"), stats
ctx.barrier()
core.DatapathDestroy(h)
try:
    core.DatapathCheck(h)
    sys.exit("check after destroy must raise")
except Exception as e:
    assert "unknown or closed" in str(e), e
mkernel.shutdown()
dist.destroy_process_group()
print("OK", rank, stats["transport"], stats["latency"]["p50_ns"])
"""


@pytest.mark.multiproc
@pytest.mark.parametrize("world,nodes,net", [(2, 2, "tcp"), (4, 2, "tcp"), (3, 3, "loopback")])
def test_datapath_round_trip(world, nodes, net):
    res = run_ranks(ROUND_TRIP, world, timeout=120, env={"TEST_NODES": str(nodes), "TEST_NET": net})
    for r in res:
        assert r.returncode == 0, f"rank {r.rank}: rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        assert f"OK {r.rank} {net}" in r.stdout, r.stdout


KILLED = """
import json, os, sys, time
import torch.distributed as dist
import mkernel
from mkernel._native import core
dist.init_process_group("gloo")
ctx = mkernel.init()
rank, world = ctx.rank, ctx.world_size
cfg = {"buffers": {"1": 1 << 20}, "net": "tcp", "timeout_ms": 5000}
h = core.DatapathCreate(ctx.handle, json.dumps(cfg))
ctx.barrier()
if rank == 1:
    print("DYING", flush=True)
    os._exit(9)  # dies mid-job, without closing anything
nxt = (rank + 1) % world
try:
    for seq in range(1, 100000):
        core.DatapathPush(h, json.dumps({"kind": "write_signal", "peer": nxt, "local_buf": 1, "remote_buf": 1,
                                         "bytes": 65536, "arrival_slot": rank, "arrival_seq": seq}), 5000)
        core.DatapathWaitFlag(h, (rank + world - 1) % world, seq, 5000)
    sys.exit("no failure")
except Exception as e:
    print("ERR", e, flush=True)
"""


@pytest.mark.multiproc
def test_killed_rank_is_named():
    res = run_ranks(KILLED, 3, timeout=90)
    for r in res:
        if r.rank == 1:
            assert r.returncode == 9
            continue
        assert r.returncode is not None, f"rank {r.rank} hung:\n{r.stdout}\n{r.stderr[-2000:]}"
        assert "ERR" in r.stdout and "rank 1" in r.stdout, f"rank {r.rank}:\n{r.stdout}\n{r.stderr[-2000:]}"
