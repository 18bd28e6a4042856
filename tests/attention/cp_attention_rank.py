"""The program of every rank of the ContextParallelAttention host test (test_ring_attention_host.py):
all ranks draw the same full sequence in Megatron's [s, b, heads, head_dim] layout (seeded),
take their shard along s (zigzag when causal, contiguous otherwise), run the module forward and
backward, and compare the output [s, b, h * d] and the input gradients with float64 autograd
of the full sequence, sharded the same way."""

from __future__ import annotations

import enum

import torch
import torch.distributed as dist

import mkernel
from mkernel.nn import ContextParallelAttention
from tests.attention.reference import attention_ref
from tests.attention.ring_rank import _shard as shard_sequence


class AttnMaskType(enum.Enum):  # Megatron-core's enum, by name
    padding = 1
    causal = 2
    no_mask = 3


class Config:  # the TransformerConfig fields the module reads
    attention_dropout = 0.0
    softmax_scale = None


CASES = [  # (mask type, b, local s, h, h_kv, d, softmax_scale)
    (AttnMaskType.causal, 2, 6, 4, 2, 8, None),
    (AttnMaskType.no_mask, 1, 5, 3, 1, 16, 0.3),
    ("causal", 1, 4, 2, 2, 8, None),
]


def _shard(x: torch.Tensor, rank: int, world: int, causal: bool) -> torch.Tensor:
    return shard_sequence(x, rank, world, causal, dim=0)  # Megatron's layout: s first


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ctx = mkernel.init()
    rank, world = dist.get_rank(), dist.get_world_size()
    for i, (mask, b, s, h, h_kv, d, scale) in enumerate(CASES):
        causal = getattr(mask, "name", mask) == "causal"
        gen = torch.Generator().manual_seed(3000 + i)
        full = [torch.randn(s * world, b, hh, d, generator=gen, dtype=torch.float64)
                for hh in (h, h_kv, h_kv)]
        grad = torch.randn(s * world, b, h * d, generator=gen, dtype=torch.float64)
        # The reference in the op's [b, s, h, d] layout, back to [s, b, h * d].
        refs = [x.clone().requires_grad_() for x in full]
        ref_out, _ = attention_ref(*(x.transpose(0, 1) for x in refs), causal, scale)
        ref_out = ref_out.transpose(0, 1).reshape(s * world, b, h * d)
        (ref_out * grad).sum().backward()
        layer = ContextParallelAttention(Config(), 1, mask, softmax_scale=scale, group=ctx)
        mine = [_shard(x, rank, world, causal).float().requires_grad_() for x in full]
        out = layer(*mine, None, attn_mask_type=mask)
        assert out.shape == (s, b, h * d) and out.dtype == torch.float32, (i, out.shape)
        want = _shard(ref_out.detach(), rank, world, causal)
        rel = ((out.double() - want).norm() / want.norm()).item()
        assert rel <= 1e-5, ("out", i, rel)
        out.backward(_shard(grad, rank, world, causal).float())
        for name, x, r in zip(("query", "key", "value"), mine, refs):
            want = _shard(r.grad, rank, world, causal)
            rel = ((x.grad.double() - want).norm() / want.norm()).item()
            assert rel <= 1e-5, ("grad", i, name, rel)
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()
    print("OK", rank, flush=True)


if __name__ == "__main__":
    main()
