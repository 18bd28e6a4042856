"""CPU twins of the several-node dispatch's packed layout (capacity 0) in csrc/moe_nodes.cpp:

- ``aten_layout``: the ATen sequence (sort, searchsorted, index ops), op for op, with the route;
- ``kernel_layout``: moe14's MKERNEL_MOE_LAYOUT=kernel path, i.e. moe_routing.cu's route() over
  every rank's choices (expert / pos / cnt) followed by nodes_layout_kernel, written as the
  kernel's per-thread code (loops over the threads' work, the shared-memory bases first).

test_moe_nodes_layout.py checks that both give the same route, counts, recv_counts and counted
rows (token_live), and the ATen one against tests/moe_reference.py's layout.
"""

from __future__ import annotations

import torch

RANK_SHIFT = 1 << 32


def aten_layout(idx_all: torch.Tensor, tm: int, t: int, k: int, e: int, w: int, me: int,
                rows_out: int) -> dict:
    """dispatch_nodes' ATen layout (capacity 0); idx_all [W*Tm, k] int32, -1 = no expert."""
    el = e // w
    n = w * tm * k
    flat = idx_all.reshape(-1).long()
    key = torch.where(flat >= 0, flat, torch.full_like(flat, e))
    skey, perm = torch.sort(key, stable=True)
    starts = torch.searchsorted(skey, torch.arange(e + 1))
    i = torch.arange(n)
    owner = torch.div(skey, el, rounding_mode="floor")
    le = skey - owner * el
    row = i - starts.index_select(0, (owner * el).clamp_max(e))
    keep = (skey < e) & (row < rows_out)
    code = torch.where(keep, owner.clamp_max(w - 1) * RANK_SHIFT + row, torch.full_like(row, -1))
    route_all = torch.empty(n, dtype=torch.long).index_copy_(0, perm, code)
    route = route_all.view(w, tm, k)[me, :t].contiguous()
    mine = starts[me * el + 1:me * el + 1 + el] - starts[me * el:me * el + el]
    base = starts[me * el:me * el + el] - starts[me * el:me * el + 1]
    counts = ((base + mine).clamp_max(rows_out) - base.clamp_max(rows_out)).int()
    src = torch.div(perm, tm * k, rounding_mode="floor")
    bin_ = torch.where(keep & (owner == me), src * el + le, torch.full_like(src, w * el))
    recv_counts = torch.zeros(w * el + 1, dtype=torch.long).index_add_(
        0, bin_, torch.ones(n, dtype=torch.long))[:w * el].view(w, el).int()
    sorted_pos = starts[me * el:me * el + 1] + torch.arange(rows_out)
    token = torch.div(perm.index_select(0, sorted_pos.clamp_max(n - 1)), k, rounding_mode="floor")
    live = torch.arange(rows_out) < counts.sum().long()
    token_live = torch.where(live, token, torch.full_like(token, -1))
    return dict(route=route, counts=counts, recv_counts=recv_counts, token_live=token_live)


def routing_arrays(idx_all: torch.Tensor, e: int) -> tuple[list[int], list[int], list[int]]:
    """moe_routing.cu route() over [W*Tm, k]: expert (-1: none), pos (index among the choices of
    the same bucket in choice order; out-of-range ids share bucket E), cnt [E]."""
    flat = idx_all.reshape(-1).tolist()
    expert, pos = [], []
    run = [0] * (e + 1)
    for v in flat:
        b = v if 0 <= v < e else e
        expert.append(b if b < e else -1)
        pos.append(run[b])
        run[b] += 1
    return expert, pos, run[:e]


def kernel_layout(idx_all: torch.Tensor, tm: int, t: int, k: int, e: int, w: int, me: int,
                  rows_out: int, grid: int = 3, threads: int = 4) -> dict:
    """route() then nodes_layout_kernel, thread by thread (grid x threads, grid-stride)."""
    el = e // w
    n = w * tm * k
    expert, pos, cnt = routing_arrays(idx_all, e)
    route = [None] * (t * k)           # every entry must be written
    token = [None] * rows_out          # every entry must be written exactly once
    counts = [None] * el
    recv_counts = [0] * (w * el)       # zero on entry (at::zeros)
    per_rank = tm * k
    for block in range(grid):
        s_base = [0] * e
        for g in range(e):
            first = (g // el) * el
            s_base[g] = sum(cnt[first:g])
        last = me * el + el - 1
        s_mine = s_base[last] + cnt[last]
        stride = grid * threads
        for tid in range(threads):
            first_c = block * threads + tid
            for c in range(first_c, n, stride):
                g = expert[c]
                code = -1
                if g >= 0:
                    o = g // el
                    row = s_base[g] + pos[c]
                    if row < rows_out:
                        code = (o << 32) | row
                        if o == me:
                            assert token[row] is None, "a row written twice"
                            token[row] = c // k
                            recv_counts[(c // per_rank) * el + (g - me * el)] += 1
                s, tt = c // per_rank, (c // k) % tm
                if s == me and tt < t:
                    assert route[tt * k + c % k] is None
                    route[tt * k + c % k] = code
            live = min(s_mine, rows_out)
            for q in range(live + first_c, rows_out, stride):
                assert token[q] is None, "a tail row also written by a choice"
                token[q] = -1
            if block == 0:
                for ex in range(tid, el, threads):
                    g = me * el + ex
                    b = s_base[g]
                    counts[ex] = min(b + cnt[g], rows_out) - min(b, rows_out)
    assert None not in route and None not in token and None not in counts
    return dict(route=torch.tensor(route, dtype=torch.long).view(t, k),
                counts=torch.tensor(counts, dtype=torch.int32),
                recv_counts=torch.tensor(recv_counts, dtype=torch.int32).view(w, el),
                token_live=torch.tensor(token, dtype=torch.long))


def aten_head(topk_idx: torch.Tensor, tm: int, e: int) -> torch.Tensor:
    """dispatch_nodes' routing head by ATen: ids outside [0, E) -> -1, int32, padded to Tm rows."""
    idx = topk_idx.long()
    idx32 = torch.where((idx >= 0) & (idx < e), idx, torch.full_like(idx, -1)).int()
    if idx32.shape[0] == tm:
        return idx32.contiguous()
    out = torch.full((tm, idx32.shape[1]), -1, dtype=torch.int32)
    out[:idx32.shape[0]] = idx32
    return out


def kernel_head(topk_idx: torch.Tensor, tm: int, e: int) -> torch.Tensor:
    """moe_routing.cu pad_ids_kernel, element by element."""
    k = topk_idx.shape[1]
    flat = topk_idx.reshape(-1).tolist()
    valid = len(flat)
    out = []
    for i in range(tm * k):
        v = -1
        if i < valid and 0 <= flat[i] < e:
            v = flat[i]
        out.append(v)
    return torch.tensor(out, dtype=torch.int32).view(tm, k)
