"""A torch (any device) twin of csrc/moe_nodes.cpp's overlapped dispatch layout (moe10,
MKERNEL_MOE_DISPATCH_PIPELINE=2): the same ATen sequence, op for op, so the CPU test
(test_moe_split_layout.py) checks its arithmetic against tests/moe_reference.py's layout.

The dispatch's packed layout (expert-major; inside an expert, rows by source rank, token, choice)
is split in two packed layouts: the rows from this rank's own tokens ("own": the GEMM can start
on them before any other rank's row landed) and the rest ("rem"), each expert-major with the same
order inside an expert. out = the two GEMMs' rows put back in the packed layout's order.
"""

from __future__ import annotations

import torch


def dispatch_layout(idx_all: torch.Tensor, tm: int, k: int, e: int, w: int, me: int,
                    rows_out: int) -> dict:
    """dispatch_nodes' packed layout (capacity 0) from every rank's padded choices [W*Tm, k]."""
    el = e // w
    n = w * tm * k
    dev = idx_all.device
    flat = idx_all.reshape(-1).long()
    key = torch.where(flat >= 0, flat, torch.full_like(flat, e))
    skey, perm = torch.sort(key, stable=True)
    starts = torch.searchsorted(skey, torch.arange(e + 1, device=dev))
    i = torch.arange(n, device=dev)
    owner = torch.div(skey, el, rounding_mode="floor")
    le = skey - owner * el
    row = i - starts.index_select(0, (owner * el).clamp_max(e))
    keep = (skey < e) & (row < rows_out)
    mine = starts[me * el + 1:me * el + 1 + el] - starts[me * el:me * el + el]
    base = starts[me * el:me * el + el] - starts[me * el:me * el + 1]
    counts = ((base + mine).clamp_max(rows_out) - base.clamp_max(rows_out)).int()
    src = torch.div(perm, tm * k, rounding_mode="floor")
    bin_ = torch.where(keep & (owner == me), src * el + le, torch.full_like(src, w * el))
    recv_counts = torch.zeros(w * el + 1, dtype=torch.long, device=dev).index_add_(
        0, bin_, torch.ones(n, dtype=torch.long, device=dev))[:w * el].view(w, el).int()
    sorted_pos = starts[me * el:me * el + 1] + torch.arange(rows_out, device=dev)
    token = torch.div(perm.index_select(0, sorted_pos.clamp_max(n - 1)), k, rounding_mode="floor")
    q = torch.arange(rows_out, device=dev)
    live = q < counts.sum().long()
    token_live = torch.where(live, token, torch.full_like(token, -1))
    return dict(skey=skey, perm=perm, starts=starts, counts=counts, recv_counts=recv_counts,
                sorted_pos=sorted_pos, token=token, live=live, token_live=token_live)


def split_layout(lay: dict, tm: int, k: int, e: int, w: int, me: int, rows_out: int) -> dict:
    """The own / rem split of a packed layout (the C++ sequence of moe_nodes.cpp, op for op)."""
    el = e // w
    n = w * tm * k
    dev = lay["token"].device
    bound_own = tm * min(k, el)
    bound_rem = rows_out - bound_own
    sp = lay["sorted_pos"].clamp_max(n - 1)
    ex = (lay["skey"].index_select(0, sp) - me * el).clamp(0, el - 1)  # local expert of row q
    j = lay["sorted_pos"] - lay["starts"].index_select(0, ex + me * el)  # index inside the expert
    s = torch.div(lay["token"], tm, rounding_mode="floor")  # source rank of row q
    rc = lay["recv_counts"].long()                           # [W, El]
    own_cnt = rc[me]
    before = rc.cumsum(0)[me] - own_cnt                     # rows of sources < me, per expert
    rem_cnt = lay["counts"].long() - own_cnt
    own_start = own_cnt.cumsum(0) - own_cnt
    rem_start = rem_cnt.cumsum(0) - rem_cnt
    is_own = lay["live"] & (s == me)
    is_rem = lay["live"] & (s != me)
    oi = own_start.index_select(0, ex) + j - before.index_select(0, ex)
    ri = rem_start.index_select(0, ex) + torch.where(s < me, j, j - own_cnt.index_select(0, ex))
    map_own = torch.where(is_own, oi, torch.full_like(oi, -1))
    map_rem = torch.where(is_rem, ri, torch.full_like(ri, -1))
    tok_own = torch.full((bound_own + 1,), -1, dtype=torch.long, device=dev).scatter_(
        0, torch.where(is_own, oi, torch.full_like(oi, bound_own)), lay["token"])[:bound_own]
    tok_rem = torch.full((bound_rem + 1,), -1, dtype=torch.long, device=dev).scatter_(
        0, torch.where(is_rem, ri, torch.full_like(ri, bound_rem)), lay["token"])[:bound_rem]
    return dict(bound_own=bound_own, bound_rem=bound_rem, map_own=map_own, map_rem=map_rem,
                tok_own=tok_own, tok_rem=tok_rem, offs_own=own_cnt.cumsum(0).int(),
                offs_rem=rem_cnt.cumsum(0).int())
