"""mkernel.init / shutdown across several CPU processes (gloo)."""

import pytest

import mkernel
from tests.launch import run_ranks

INIT = """
import json, os, sys
import torch.distributed as dist
import mkernel
dist.init_process_group("gloo")
ctx = mkernel.init()
assert mkernel.init() is ctx, "init must be idempotent"
assert (ctx.rank, ctx.world_size) == (dist.get_rank(), dist.get_world_size())
blobs = ctx.allgather_bytes(os.urandom(ctx.rank * 1000) + bytes([ctx.rank]) * (ctx.rank + 1))
assert [b[-1] for b in blobs] == list(range(ctx.world_size)), blobs
assert [len(b) for b in blobs] == [r * 1000 + r + 1 for r in range(ctx.world_size)]
ctx.barrier()
sub = dist.new_group([0, 1]) if ctx.world_size >= 2 else None
if sub is not None and ctx.rank < 2:
    c2 = mkernel.init(sub)
    assert c2 is not ctx and c2.world_size == 2 and c2.rank == ctx.rank
    c2.close(); c2.close()
mkernel.shutdown(); mkernel.shutdown()
try:
    mkernel.current_group()
    sys.exit("current_group after shutdown must raise")
except RuntimeError:
    pass
dist.destroy_process_group()
print("OK", ctx.rank)
"""


@pytest.mark.multiproc
@pytest.mark.parametrize("world", [1, 2, 4])
def test_init_shutdown_across_processes(world):
    res = run_ranks(INIT, world, timeout=120)
    for r in res:
        assert r.returncode == 0, f"rank {r.rank}: rc={r.returncode}\n{r.stderr[-3000:]}"
        assert f"OK {r.rank}" in r.stdout


MISSING = """
import torch.distributed as dist, mkernel, datetime, sys
dist.init_process_group("gloo")
try:
    mkernel.init(timeout=3)
except Exception as e:
    print("ERR", type(e).__name__, e)
    sys.exit(0)
sys.exit("init succeeded without rank 3")
"""


@pytest.mark.multiproc
def test_rank_that_never_joins_is_named():
    """Rank 3 passes the torch rendezvous but never calls mkernel.init."""
    code_never = ("import torch.distributed as dist, time; dist.init_process_group('gloo'); time.sleep(20)")
    import os
    import subprocess
    import sys

    from tests.launch import free_port

    port = free_port()
    procs = []
    for rank in range(4):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="4", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), PYTHONUNBUFFERED="1")
        procs.append(subprocess.Popen([sys.executable, "-c", code_never if rank == 3 else MISSING],
                                      env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    try:
        for rank, p in enumerate(procs[:3]):
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err[-2000:]
            assert "ERR" in out, out
            # Every rank reports rank 0's verdict, naming exactly the missing rank.
            assert "waiting for ranks [3] of 4" in out, out
    finally:
        for p in procs:
            p.kill()
            p.communicate()


def test_world_of_one_without_distributed():
    ctx = mkernel.init()
    try:
        assert (ctx.rank, ctx.world_size) == (0, 1)
        assert mkernel.current_group() is ctx
        assert ctx.allgather_bytes(b"abc") == [b"abc"]
    finally:
        mkernel.shutdown()
    with pytest.raises(RuntimeError, match="init"):
        mkernel.current_group()
