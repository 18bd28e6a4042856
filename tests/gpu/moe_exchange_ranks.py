"""Rank program of tests/gpu/test_moe_ranks.py's exchange test: mkernel._moe_exchange (csrc/moe_net.h)
with every rank alone on its node, against the substrate's all_gather: the gather bit for bit, the
all-to-all against the blocks it must deliver, at sizes of 1 piece and of 8 uneven pieces (bytes not
a multiple of the 256-byte piece alignment), outputs poisoned first, back to back and repeated."""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

import mkernel

# rows x cols: 1 piece (tiny), 8 pieces of ~1.1 MiB with a ragged tail, bf16 and fp32; each twice.
SHAPES = ((5, 24, torch.bfloat16), (1234, 3581, torch.bfloat16), (777, 2051, torch.float32))
REPEATS = 2
CASES_PER_RANK = len(SHAPES) * REPEATS


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ctx = mkernel.init()
    rank, world = ctx.rank, ctx.world_size
    torch.cuda.set_device(0)
    gen = torch.Generator(device="cuda").manual_seed(100 + rank)
    for rows, cols, dt in SHAPES:
        x = torch.randn(rows, cols, device="cuda", generator=gen).to(dt)
        a2a = torch.randn(world * rows, cols, device="cuda", generator=gen).to(dt)
        for rep in range(REPEATS):  # repeated: the READY / DONE fences between calls
            want = mkernel.all_gather(x, group=ctx)
            got = torch.ops.mkernel._moe_exchange(x, False, ctx.handle, world)
            ok_gather = bool(torch.equal(got, want))
            # Rank s's block for this rank is rows [rank*rows, (rank+1)*rows) of s's a2a: every
            # rank's a2a through the all_gather, then picked here.
            every = mkernel.all_gather(a2a, group=ctx).view(world, world * rows, cols)
            want2 = every[:, rank * rows:(rank + 1) * rows].reshape(world * rows, cols)
            got2 = torch.ops.mkernel._moe_exchange(a2a, True, ctx.handle, world)
            ok_a2a = bool(torch.equal(got2, want2))
            print("CASE", json.dumps(dict(case=f"exchange/{rows}x{cols}/{dt}/{rep}", rank=rank,
                                          gather=ok_gather, a2a=ok_a2a)), flush=True)
            if not (ok_gather and ok_a2a):
                raise AssertionError(f"rank {rank}: exchange {rows}x{cols} {dt} rep {rep}: "
                                     f"gather {ok_gather} a2a {ok_a2a}")
    torch.cuda.synchronize()
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()
    print("OK", rank, flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
