"""An unfused float64 reference of the MoE ops, from every rank's inputs (pure torch, loops).

The layout it derives is the one csrc/moe_host.h specifies: rank ``d`` holds experts
``d*E_local .. (d+1)*E_local - 1``; local expert ``e``'s rows are ordered by (source rank,
token, choice); with ``capacity`` C > 0 the first C are kept at rows ``e*C ..``, with C == 0
all are kept and packed back to back. The values are computed per token from the global
weights, independently of that layout (autograd of a dense per-token formula).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class RankInputs:
    x: torch.Tensor             # [T, H]
    topk_idx: torch.Tensor      # [T, k] int64
    topk_weights: torch.Tensor  # [T, k] fp32


@dataclass
class Layout:
    rows: int                   # R: rows of the destination's packed (or padded, E_local*C) space
    origin: list                # per row: (source rank, token, choice, local expert) or None
    recv_counts: torch.Tensor   # [W, E_local] int32
    counts: torch.Tensor        # [E_local] int32


def routing(kind: str, tokens: int, k: int, num_experts: int, gen: torch.Generator) -> torch.Tensor:
    """[T, k] int64 expert ids, k distinct per token: uniform, skewed (most tokens pick the
    first experts) or with empty experts (only the even ones are ever picked)."""
    if kind == "uniform":
        scores = torch.rand(tokens, num_experts, generator=gen)
    elif kind == "skewed":
        bias = torch.linspace(4.0, 0.0, num_experts)
        scores = torch.rand(tokens, num_experts, generator=gen) + bias
    elif kind == "empty":
        scores = torch.rand(tokens, num_experts, generator=gen)
        if num_experts >= 2 * k:
            scores[:, 1::2] = -1.0
    else:
        raise ValueError(kind)
    return scores.topk(k, dim=1).indices.to(torch.int64).contiguous()


def make_inputs(seed: int, rank: int, tokens: int, h: int, k: int, num_experts: int,
                kind: str, dtype: torch.dtype) -> RankInputs:
    """Rank `rank`'s inputs of case `seed` (every rank can regenerate every other rank's)."""
    g = torch.Generator().manual_seed(seed * 7919 + rank)
    x = torch.randn(tokens, h, generator=g, dtype=torch.float64).to(dtype)
    idx = routing(kind, tokens, k, num_experts, g)
    w = torch.rand(tokens, k, generator=g, dtype=torch.float64).float()
    return RankInputs(x, idx, w)


def make_weights(seed: int, num_experts: int, f: int, h: int, dtype: torch.dtype) -> torch.Tensor:
    """Every expert's w1 [E, F, H] (rank r holds rows r*E_local ..)."""
    g = torch.Generator().manual_seed(seed * 104729 + 17)
    return (torch.randn(num_experts, f, h, generator=g, dtype=torch.float64) / math.sqrt(h)).to(dtype)


def layouts(idxs: list[torch.Tensor], num_experts: int, capacity: int):
    """(routes [per source rank, [T, k] int64], layouts [per destination rank])."""
    world = len(idxs)
    e_local = num_experts // world
    lists = [[[] for _ in range(e_local)] for _ in range(world)]
    for s, idx in enumerate(idxs):
        for t in range(idx.shape[0]):
            for j in range(idx.shape[1]):
                g = int(idx[t, j])
                lists[g // e_local][g % e_local].append((s, t, j))
    routes = [torch.full(tuple(idx.shape), -1, dtype=torch.int64) for idx in idxs]
    out = []
    for d in range(world):
        origin, base = [], 0
        recv_counts = torch.zeros(world, e_local, dtype=torch.int32)
        for e in range(e_local):
            kept = lists[d][e][:capacity] if capacity else lists[d][e]
            start = e * capacity if capacity else base
            if capacity:
                origin += [None] * (start - len(origin))
            for i, (s, t, j) in enumerate(kept):
                routes[s][t, j] = (d << 32) | (start + i)
                recv_counts[s, e] += 1
                origin.append((s, t, j, e))
            base += len(kept)
        rows = e_local * capacity if capacity else base
        origin += [None] * (rows - len(origin))
        out.append(Layout(rows, origin, recv_counts, recv_counts.sum(0, dtype=torch.int32)))
    return routes, out


def dispatch_out(layout: Layout, ins: list[RankInputs], w1_all: torch.Tensor, rank: int,
                 e_local: int) -> torch.Tensor:
    """Rank `rank`'s expected dispatch output [R, F] (float64; unused rows zero)."""
    f = w1_all.shape[1]
    out = torch.zeros(layout.rows, f, dtype=torch.float64)
    for row, o in enumerate(layout.origin):
        if o is not None:
            s, t, _, e = o
            out[row] = ins[s].x[t].double() @ w1_all[rank * e_local + e].double().T
    return out


def moe_forward(x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, w1_all: torch.Tensor,
                route: torch.Tensor, act) -> torch.Tensor:
    """The dense per-token formula of dispatch -> act -> combine on one rank's tokens:
    out[t] = sum_j w[t, j] * act(x[t] @ w1[idx[t, j]].T) over kept choices (differentiable in
    x, w1_all and w; all float64)."""
    rows = []
    kept = (route >= 0).to(torch.float64)
    for j in range(idx.shape[1]):
        z = torch.einsum("th,tfh->tf", x, w1_all[idx[:, j]])
        rows.append(act(z) * (w[:, j].unsqueeze(1) * kept[:, j].unsqueeze(1)))
    if not rows:
        return x.new_zeros(x.shape[0], w1_all.shape[1])
    return torch.stack(rows, 0).sum(0)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    diff = (out.double() - ref).norm().item()
    norm = ref.norm().item()
    return diff / norm if norm > 0 else diff
