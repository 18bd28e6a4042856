"""The GPU-driven inter-node path (csrc/comm/net_path.h, kernels/comm/net_ops.cuh) between two
ranks of two emulated nodes sharing a GPU: GPU kernels push WRITE / WRITE_SIGNAL commands into the
host-mapped FIFO, the Go proxy moves the bytes over the transport, the peer kernel waits on the
host-mapped arrival flags (torch.ops.mkernel._net_pingpong). GPU only; fast with MPS (without it
the two ranks' spinning kernels time-slice, which is slow but still exact)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.launch import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")

RANK = r"""
import json, os, torch, torch.distributed as dist, mkernel
torch.cuda.set_device(0)
dist.init_process_group("gloo")
ctx = mkernel.init()
if not hasattr(torch.ops.mkernel, "_net_pingpong"):
    print("NOOP")
    raise SystemExit(0)
data = 3 * (1 << 20) + 48  # ragged: the last 1 MiB command is partial
for net in os.environ["TEST_NETS"].split(","):
    # tcp: offer GPU memory too (tcp cannot register it: exercises the fall-back to host staging)
    os.environ["MKERNEL_NET_GPU_MEMORY"] = "1" if net == "tcp" else "0"
    # tcp also re-creates the path half-way (NetPath::ensure, growth) and runs again on it.
    out = torch.ops.mkernel._net_pingpong(ctx.handle, 200, data, 4, 4, net, net == "tcp").tolist()
    print("RES " + json.dumps({"net": net, "rank": ctx.rank, "out": out}))
mkernel.shutdown()
dist.destroy_process_group()
"""


@pytest.mark.parametrize("nets", ["loopback,tcp"])
def test_pingpong_data_and_latency(nets):
    res = run_ranks(RANK, 2, nodes=2, timeout=240, env={"TEST_NETS": nets, "MKERNEL_OP_TIMEOUT": "60"})
    for r in res:
        assert r.returncode == 0, f"rank {r.rank}: {r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    if "NOOP" in res[0].stdout:
        pytest.skip("this build has no CUDA kernels (_net_pingpong missing)")
    recs = [json.loads(l[4:]) for r in res for l in r.stdout.splitlines() if l.startswith("RES ")]
    for net in nets.split(","):
        a = next(x["out"] for x in recs if x["net"] == net and x["rank"] == 0)
        b = next(x["out"] for x in recs if x["net"] == net and x["rank"] == 1)
        assert a[0] == 0 and b[0] == 0, f"{net}: {a[0]} / {b[0]} corrupt 16-byte words"
        assert a[2] > a[1] and a[5] > a[4], f"{net}: data/bulk phases did not run: {a[:6]}"
        assert a[3] == 0 and b[3] == 0, f"{net}: buffers claim to be GPU memory on a non-RDMA transport"
        iters = (len(a) - 6) // 2
        one_way = sorted(b[6 + 2 * i] - a[6 + 2 * i] for i in range(iters))
        rtt = sorted(a[7 + 2 * i] - a[6 + 2 * i] for i in range(iters))
        # Causality on one clock: the pong comes back after the ping arrived.
        assert one_way[0] >= 0 and all(rtt[i] > 0 for i in range(iters)), (net, one_way[:3], rtt[:3])
        print(f"{net}: one way p50 {one_way[iters // 2] / 1e3:.2f} us, RTT/2 p50 {rtt[iters // 2] / 2e3:.2f} us")


FAULT = r"""
import json, os, time, torch, torch.distributed as dist, mkernel
torch.cuda.set_device(0)
dist.init_process_group("gloo")
ctx = mkernel.init()
if not hasattr(torch.ops.mkernel, "_net_pingpong"):
    print("NOOP", flush=True)
    os._exit(0)
t0 = time.monotonic()
try:
    # Rank 1 answers 10 pings, then its kernel leaves: rank 0's wait for pong 11 must time out.
    torch.ops.mkernel._net_pingpong(ctx.handle, 50, 0, 0, 0, "loopback", False, 10 if ctx.rank == 1 else -1)
    print("RES " + json.dumps({"rank": ctx.rank, "ok": True}), flush=True)
except RuntimeError as e:
    print("RES " + json.dumps({"rank": ctx.rank, "ok": False, "s": time.monotonic() - t0, "msg": str(e)}),
          flush=True)
os._exit(0)  # rank 0's CUDA context is dead after the trap: no orderly shutdown
"""


def test_silent_peer_is_named_within_the_timeout():
    """A peer that stops answering: the waiting kernel records what it waited for (inter-node
    data from rank 1, the slot, expected and seen values) and traps; the op raises with it
    within MKERNEL_OP_TIMEOUT instead of hanging."""
    res = run_ranks(FAULT, 2, nodes=2, timeout=180, env={"MKERNEL_OP_TIMEOUT": "5"})
    if "NOOP" in res[0].stdout:
        pytest.skip("this build has no CUDA kernels (_net_pingpong missing)")
    recs = {json.loads(l[4:])["rank"]: json.loads(l[4:]) for r in res for l in r.stdout.splitlines()
            if l.startswith("RES ")}
    assert 0 in recs, f"rank 0 printed nothing: {res[0].stdout[-2000:]}\n{res[0].stderr[-3000:]}"
    r0 = recs[0]
    assert not r0["ok"], "rank 0 finished although its peer stopped answering"
    msg = r0["msg"]
    assert "inter-node data from peer 1" in msg and "want >= 11" in msg and "saw 10" in msg, msg
    assert r0["s"] < 5 + 30, r0["s"]
