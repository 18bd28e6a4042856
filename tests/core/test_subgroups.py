"""mkernel.init(group) for sub-groups whose first rank is not the job's rank 0 and whose ranks
span emulated nodes (the Megatron TP/EP layout): the group's first rank opens the rendezvous on
ITS OWN host's address (MKERNEL_BOOTSTRAP_HOST differs per emulated node here: 127.0.0.1 for
node 0, 127.0.0.2 for node 1 — both loopback, so the ranks still reach each other) and publishes
the id under a key unique to the member list; an op then runs across each sub-group."""

from __future__ import annotations

import pytest

from mkernel import runtime
from tests.launch import run_ranks

RANK = r"""
import base64, json, math, os
import torch, torch.distributed as dist
import mkernel
from mkernel import runtime

node = int(os.environ["MKERNEL_EMULATED_NODE"])
os.environ["MKERNEL_BOOTSTRAP_HOST"] = f"127.0.0.{1 + node}"  # this "host's" own interface
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
world_ctx = mkernel.init()
# ranks 0, 1 on node 0 and 2, 3 on node 1. Every rank creates every process group, in order.
groups = [[1, 2], [2, 3], [3, 1], [1, 2, 3], [2, 3]]  # the last: a second init of [2, 3]
inits = {}
for ranks in groups:
    pg = dist.new_group(sorted(ranks))
    if rank not in ranks:
        continue
    members = dist.get_process_group_ranks(pg)
    seq = inits[tuple(members)] = inits.get(tuple(members), 0) + 1
    ctx = mkernel.init(pg)
    assert ctx.world_size == len(members) and ctx.rank == members.index(rank)
    # The id in the store names the leader's own address, not MASTER_ADDR's.
    job_id = runtime._store_for(pg).get(runtime._store_key(members, seq)).decode()
    raw = base64.urlsafe_b64decode(job_id.split(".", 1)[1] + "=" * (-len(job_id.split(".", 1)[1]) % 4))
    leader_host = f"127.0.0.{1 + members[0] // 2}:"
    assert leader_host.encode() in raw, (members, raw[-24:])
    # An op across the sub-group (host reference: loopback within a node, tcp across).
    g = torch.Generator().manual_seed(100 + seq)
    xs = [torch.randn(6, 8 + i, generator=g) for i in range(len(members))]
    ws = [torch.randn(5, 8 + i, generator=g) for i in range(len(members))]
    me = members.index(rank)
    if len(members) > 1:
        y = mkernel.gemm_ar(xs[me], ws[me], group=ctx)
        ref = sum(x.double() @ w.double().T for x, w in zip(xs, ws))
        err = ((y.double() - ref).norm() / ref.norm()).item()
        assert err < 1e-5, (members, err)
    print("GROUP", json.dumps({"members": members, "seq": seq, "leader": members[0]}), flush=True)
    ctx.close()
world_ctx.barrier()
mkernel.shutdown()
dist.destroy_process_group()
print("OK", rank, flush=True)
"""


@pytest.mark.multiproc
def test_subgroups_led_from_another_node():
    res = run_ranks(RANK, 4, nodes=2, timeout=180, fork=True)
    for r in res:
        assert r.returncode == 0 and f"OK {r.rank}" in r.stdout, (
            f"rank {r.rank}: rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    led = {line for r in res for line in r.stdout.splitlines() if line.startswith("GROUP")}
    assert len(led) == 5, led  # [1,2], [2,3] twice, [1,3], [1,2,3]


def test_store_keys_cover_every_rank():
    """Keys differ for member lists that share their first 8 ranks and their size."""
    a = runtime._store_key(list(range(9)), 1)
    b = runtime._store_key(list(range(8)) + [10], 1)
    assert a != b and a.endswith("x9/1") and b.endswith("x9/1")
    assert runtime._store_key([0, 1], 1) != runtime._store_key([0, 1], 2)


def test_rendezvous_host(monkeypatch):
    """MKERNEL_BOOTSTRAP_HOST wins; else this host's side of the route to MASTER_ADDR, never
    MASTER_ADDR itself."""
    monkeypatch.setenv("MKERNEL_BOOTSTRAP_HOST", "127.0.0.3")
    assert runtime._rendezvous_host() == "127.0.0.3"
    monkeypatch.delenv("MKERNEL_BOOTSTRAP_HOST")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert runtime._rendezvous_host() == "127.0.0.1"  # loopback routes to loopback
    monkeypatch.setattr(runtime, "_route_address", lambda peer: "10.1.2.3" if peer == "10.9.9.9" else None)
    monkeypatch.setenv("MASTER_ADDR", "10.9.9.9")
    assert runtime._rendezvous_host() == "10.1.2.3"
