"""mkernel.moe_dispatch_gemm: x [T, H], topk_idx [T, k], w1 [E_local, F, H], capacity (0: packed)
-> (out [R, F] or [E_local, capacity, F], counts [E_local] int32, route [T, k] int64,
    recv_counts [W, E_local] int32, recv_x). Schema, fake kernel, compile, bad inputs, and the
world-1 CPU kernel's values and gradients against tests/moe_reference.py (W > 1: tests/host)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from tests.moe_reference import dispatch_out, layouts, make_inputs, make_weights, moe_forward, rel_err

from .helpers import (
    VALIDATION_MODES,
    assert_bad_input_raises,
    assert_fake_cuda_rejects_fp32,
    assert_rejects_input_on_other_device,
    assert_tensor,
    bad,
    bad_world_size_and_group,
    compile_and_run,
    fake_mode,
    group,
    strided,
    t,
)

# (T, H, k, F, num_experts, capacity, W): ragged T, one token, no tokens, a world of one,
# capacity-free and capacity-padded.
SHAPES = [
    (37, 64, 2, 96, 8, 20, 4),
    (1, 128, 1, 256, 16, 1, 8),
    (129, 72, 4, 130, 6, 77, 3),
    (100, 48, 8, 200, 8, 100, 1),
    (100, 48, 8, 200, 8, 0, 1),
    (0, 64, 2, 32, 4, 8, 2),
    (0, 64, 2, 32, 4, 0, 1),
]


def op():
    return torch.ops.mkernel.moe_dispatch_gemm.default


def inputs(
    device, tokens, h, k, f, num_experts, world, dtype=torch.bfloat16, idx_dtype=torch.int64
):
    return (
        t((tokens, h), device, dtype),
        t((tokens, k), device, idx_dtype),
        t((num_experts // world, f, h), device, dtype),
    )


def expected_lead(tokens, k, e_local, capacity):
    return (e_local, capacity) if capacity else (tokens * k,)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("tokens, h, k, f, num_experts, capacity, world", SHAPES)
def test_fake_shapes(device, dtype, idx_dtype, tokens, h, k, f, num_experts, capacity, world):
    with fake_mode():
        x, idx, w1 = inputs(device, tokens, h, k, f, num_experts, world, dtype, idx_dtype)
        out, counts, route, recv_counts, recv_x, peer_routes = op()(
            x, idx, w1, 1, world, num_experts, capacity, True
        )
    e_local = num_experts // world
    lead = expected_lead(tokens, k, e_local, capacity)
    assert_tensor(out, (*lead, f), dtype, device)
    assert_tensor(counts, (e_local,), torch.int32, device)
    assert_tensor(route, (tokens, k), torch.int64, device)
    assert_tensor(recv_counts, (world, e_local), torch.int32, device)
    assert_tensor(recv_x, (*lead, h), dtype, device)
    assert_tensor(peer_routes, (0, 3 * k), torch.int32, device)  # no topk_weights: nothing carried


@pytest.mark.parametrize("world, capacity", [(4, 0), (4, 20), (1, 0)])
def test_fake_peer_routes(world, capacity):
    """With topk_weights, capacity 0 at W > 1: the carried routes' rows ([W*max_T, 3k]) are the
    group's bound, unknown to the fake kernel (unbacked); else none ([0, 3k])."""
    with FakeTensorMode(shape_env=ShapeEnv()):
        x, idx, w1 = inputs("cpu", 37, 64, 2, 96, 8, world)
        w = t((37, 2), "cpu", torch.float32)
        *_, peer_routes = op()(x, idx, w1, 1, world, 8, capacity, False, w)
    assert peer_routes.dtype == torch.int32 and peer_routes.shape[1] == 6
    rows = peer_routes.shape[0]
    if world > 1 and capacity == 0:
        assert isinstance(rows, torch.SymInt) and rows.node.expr.free_symbols, rows
    else:
        assert rows == 0


def test_cpu_carries_no_routes(ops):
    """The host reference takes topk_weights (validated) and carries nothing: [0, 3k]."""
    g = torch.Generator().manual_seed(22)
    x, w1 = torch.randn(9, 16, generator=g), torch.randn(4, 8, 16, generator=g)
    idx = torch.rand(9, 4, generator=g).argsort(dim=1)[:, :2].contiguous()
    w = torch.rand(9, 2, generator=g)
    res = ops.moe_dispatch_gemm(x, idx, w1, num_experts=4, topk_weights=w, group=group(1))
    assert res.handle.peer_routes.shape == (0, 6) and res.handle.routed_weights is w
    plain = ops.moe_dispatch_gemm(x, idx, w1, num_experts=4, group=group(1))
    assert plain.handle.peer_routes is None and torch.equal(res.out, plain.out)
    y = torch.randn(res.out.shape[0], 16, dtype=x.dtype)
    assert torch.equal(ops.moe_combine(y, res.handle, w, group=group(1)),
                       ops.moe_combine(y, plain.handle, w, group=group(1)))


def test_fake_capacity_free_multi_rank_is_unbacked():
    """Capacity-free at W > 1: the packed row count depends on every rank's routing."""
    with FakeTensorMode(shape_env=ShapeEnv()):
        x, idx, w1 = inputs("cpu", 37, 64, 2, 96, 8, 4)
        out, _, _, _, recv_x, _ = op()(x, idx, w1, 1, 4, 8, 0, True)
    rows = out.shape[0]
    assert isinstance(rows, torch.SymInt) and rows.node.expr.free_symbols, rows
    assert out.shape[1] == 96 and recv_x.shape[0] is rows or recv_x.shape[0] == rows


def test_make_fx_traces_the_unbacked_size(ops):
    g = group(2)

    def fn(x, idx, w1):
        return ops.moe_dispatch_gemm(x, idx, w1, num_experts=4, group=g).out

    gm = make_fx(fn, tracing_mode="symbolic")(*inputs("cpu", 9, 16, 2, 8, 4, 2))
    out_node = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    shape = out_node.meta["val"].shape
    assert shape[1] == 8 and str(shape[0]).startswith("u"), shape


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_dynamic(ops, backend):
    g = group(4)

    def fn(x, idx, w1):
        res = ops.moe_dispatch_gemm(x, idx, w1, num_experts=8, capacity=24, group=g)
        return res.out, res.counts, res.handle.route

    cases = [inputs("meta", n, 64, 2, 96, 8, 4) for n in (37, 100, 129)]
    outs, frames = compile_and_run(fn, cases, backend=backend, dynamic=True)
    assert frames == 1, "a ragged token count must not recompile under dynamic shapes"
    for (x, _, _), (out, counts, route) in zip(cases, outs, strict=True):
        assert_tensor(out, (2, 24, 96), torch.bfloat16, "meta")
        assert_tensor(counts, (2,), torch.int32, "meta")
        assert_tensor(route, (x.shape[0], 2), torch.int64, "meta")


def test_compile_runs_the_cpu_kernel(ops):
    """Compiled (aot_eager, dynamic) dispatch + combine at W = 1 on CPU tensors equals eager."""
    g = group(1)

    def fn(x, idx, w1, w):
        res = ops.moe_dispatch_gemm(x, idx, w1, num_experts=4, group=g)
        return ops.moe_combine(F.silu(res.out), res.handle, w, group=g)

    args = []
    for n in (6, 11):
        ins = make_inputs(n, 0, n, 16, 2, 4, "uniform", torch.float32)
        args.append((ins.x, ins.topk_idx, make_weights(n, 4, 8, 16, torch.float32), ins.topk_weights))
    outs, frames = compile_and_run(fn, args, backend="aot_eager", dynamic=True)
    assert frames == 1
    for a, out in zip(args, outs, strict=True):
        assert torch.equal(out, fn(*a))


def test_wrapper_returns_named_tuple(ops):
    res = ops.moe_dispatch_gemm(
        *inputs("meta", 5, 16, 2, 8, 4, 2), num_experts=4, capacity=3, group=group(2)
    )
    assert isinstance(res, ops.MoeDispatchOutput)
    out, counts, offs, handle, recv_x = res
    assert isinstance(handle, ops.MoeHandle)
    assert_tensor(out, (2, 3, 8), torch.bfloat16, "meta")
    assert_tensor(offs, (2,), torch.int32, "meta")
    assert_tensor(handle.recv_counts, (2, 2), torch.int32, "meta")
    assert recv_x.numel() == 0


# Values at W = 1 (CPU kernel: the same ATen + grouped-GEMM algorithm the GPU runs). -----------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("capacity", [0, 5])
@pytest.mark.parametrize(
    "tokens, k, e, kind",
    [(40, 2, 8, "uniform"), (33, 8, 8, "skewed"), (0, 2, 4, "uniform"), (25, 1, 6, "empty"),
     (50, 4, 16, "empty")],
)
def test_world_one_values(ops, dtype, capacity, tokens, k, e, kind):
    h, f = 24, 40
    ins = make_inputs(tokens + k, 0, tokens, h, k, e, kind, dtype)
    w1 = make_weights(tokens + k, e, f, h, dtype)
    routes, (lay,) = layouts([ins.topk_idx], e, capacity)
    res = ops.moe_dispatch_gemm(ins.x, ins.topk_idx, w1, num_experts=e, capacity=capacity,
                                return_recv=True, group=group(1))
    assert torch.equal(res.handle.route, routes[0])
    assert torch.equal(res.counts, lay.counts)
    assert torch.equal(res.handle.recv_counts, lay.recv_counts)
    out = res.out.reshape(-1, f)
    ref = dispatch_out(lay, [ins], w1, 0, e)
    bound = 1e-5 if dtype == torch.float32 else 1e-2
    assert out.shape[0] == lay.rows and rel_err(out, ref) <= bound
    valid = torch.tensor([o is not None for o in lay.origin], dtype=torch.bool)
    assert not out[~valid].any(), "rows past the counts are zero on the CPU"
    recv = res.recv_x.reshape(-1, h)
    for row, o in enumerate(lay.origin):
        if o is not None:
            assert torch.equal(recv[row], ins.x[o[1]])
    comb = ops.moe_combine(res.out, res.handle, ins.topk_weights, group=group(1))
    ref_c = moe_forward(ins.x.double(), ins.topk_idx, ins.topk_weights.double(), w1.double(),
                        routes[0], lambda z: z)
    assert_tensor(comb, (tokens, f), dtype, "cpu")
    assert rel_err(comb, ref_c) <= bound


@pytest.mark.parametrize("capacity", [0, 7])
@pytest.mark.parametrize("k", [1, 2, 8])
def test_world_one_gradients(ops, capacity, k):
    """Gradients of x, w1 and topk_weights through dispatch -> silu -> combine, against torch
    autograd of the dense float64 formula."""
    e, h, f, tokens = 8, 16, 24, 30
    ins = make_inputs(k, 0, tokens, h, k, e, "skewed", torch.float32)
    w1_all = make_weights(k, e, f, h, torch.float32)
    x = ins.x.clone().requires_grad_(True)
    w1 = w1_all.clone().requires_grad_(True)
    w = ins.topk_weights.clone().requires_grad_(True)
    res = ops.moe_dispatch_gemm(x, ins.topk_idx, w1, num_experts=e, capacity=capacity,
                                group=group(1))
    out = ops.moe_combine(F.silu(res.out), res.handle, w, group=group(1))
    gout = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    (out.double() * gout).sum().backward()
    xr, w1r, wr = (v.detach().double().requires_grad_(True) for v in (ins.x, w1_all, ins.topk_weights))
    ref = moe_forward(xr, ins.topk_idx, wr, w1r, res.handle.route, F.silu)
    (ref * gout).sum().backward()
    for got, want in ((out, ref), (x.grad, xr.grad), (w1.grad, w1r.grad), (w.grad, wr.grad)):
        assert rel_err(got.detach(), want.detach()) <= 1e-5


@pytest.mark.parametrize("capacity", [0, 4])
def test_opcheck_world_one(capacity):
    """Schema, fake-vs-real, autograd registration and AOT dispatch on real CPU tensors."""
    ins = make_inputs(3, 0, 12, 16, 2, 4, "uniform", torch.bfloat16)
    w1 = make_weights(3, 4, 8, 16, torch.bfloat16).requires_grad_(True)
    x = ins.x.requires_grad_(True)
    torch.library.opcheck(op(), (x, ins.topk_idx, w1, 1, 1, 4, capacity, True))


def test_world_one_bad_expert_id(ops):
    x, w1 = torch.randn(4, 8), torch.randn(4, 8, 8)
    idx = torch.tensor([[0, 1], [2, 3], [1, 4], [0, 0]])
    with pytest.raises(ValueError, match=r"topk_idx\[2, 1\] is 4, not an expert id in \[0, 4\)"):
        ops.moe_dispatch_gemm(x, idx, w1, num_experts=4, group=group(1))


def _args(
    d,
    *,
    x=(6, 16),
    idx=(6, 2),
    w1=(2, 8, 16),
    dtype=torch.bfloat16,
    idx_dtype=torch.int64,
    w1_dtype=None,
    group=1,
    world=2,
    experts=4,
    capacity=8,
    x_fn=t,
    idx_fn=t,
    w1_fn=t,
    weights=None,
    weights_dtype=torch.float32,
    weights_fn=t,
):
    args = (
        x_fn(x, d, dtype),
        idx_fn(idx, d, idx_dtype),
        w1_fn(w1, d, w1_dtype or dtype),
        group,
        world,
        experts,
        capacity,
        False,
    )
    return args if weights is None else (*args, weights_fn(weights, d, weights_dtype))


OP = r"mkernel\.moe_dispatch_gemm"
BAD_INPUTS = [
    *bad_world_size_and_group(OP, bad_group=-3),
    bad("num_experts", ValueError, rf"{OP}: num_experts must be >= 1, got 0", experts=0),
    bad(
        "num_experts_divisible",
        ValueError,
        rf"{OP}: num_experts must be divisible by world_size .*got num_experts 5 and world_size 2",
        experts=5,
    ),
    bad(
        "capacity",
        ValueError,
        rf"{OP}: capacity \(token slots per local expert, 0: capacity-free\) must be >= 0, "
        rf"got -1",
        capacity=-1,
    ),
    bad(
        "x_dim",
        RuntimeError,
        rf"{OP}: x must be a 2-D tensor \[T, H\], got 3-D \[6, 16, 1\]",
        x=(6, 16, 1),
    ),
    bad(
        "topk_idx_dim",
        RuntimeError,
        rf"{OP}: topk_idx must be a 2-D tensor \[T, k\], got 1-D \[6\]",
        idx=(6,),
    ),
    bad(
        "w1_dim",
        RuntimeError,
        rf"{OP}: w1 must be a 3-D tensor \[E_local, F, H\], got 2-D \[8, 16\]",
        w1=(8, 16),
    ),
    bad("x_dtype", RuntimeError, rf"{OP}: x must be bf16 or fp16 .*got int64", dtype=torch.int64),
    bad(
        "topk_idx_dtype",
        RuntimeError,
        rf"{OP}: topk_idx must be int64 or int32 \(expert ids\), got fp32",
        idx_dtype=torch.float32,
    ),
    bad(
        "w1_dtype",
        RuntimeError,
        rf"{OP}: w1 must have the dtype of x \(x: bf16, w1: fp16\)",
        w1_dtype=torch.float16,
    ),
    bad(
        "topk_idx_tokens",
        RuntimeError,
        rf"{OP}: topk_idx must have one row per token of x \(x: \[6, 16\], topk_idx: \[5, 2\]\)",
        idx=(5, 2),
    ),
    bad(
        "topk_idx_k0",
        RuntimeError,
        rf"{OP}: topk_idx must choose k >= 1 experts per token",
        idx=(6, 0),
    ),
    bad(
        "topk_idx_k_too_big",
        RuntimeError,
        rf"{OP}: topk_idx must choose k <= num_experts experts per token "
        rf"\(num_experts 4, topk_idx: \[6, 5\]\)",
        idx=(6, 5),
    ),
    bad(
        "w1_experts",
        RuntimeError,
        rf"{OP}: w1 must hold E_local = num_experts / world_size = 2 experts in dim 0 "
        rf".*w1: \[3, 8, 16\]",
        w1=(3, 8, 16),
    ),
    bad(
        "w1_hidden",
        RuntimeError,
        rf"{OP}: w1 must have the same H as x \(x: \[6, 16\], w1: \[2, 8, 32\]\)",
        w1=(2, 8, 32),
    ),
    bad("x_strided", RuntimeError, rf"{OP}: x must be row-major contiguous", x_fn=strided),
    bad(
        "topk_idx_strided",
        RuntimeError,
        rf"{OP}: topk_idx must be row-major contiguous",
        idx_fn=strided,
    ),
    bad("w1_strided", RuntimeError, rf"{OP}: w1 must be row-major contiguous", w1_fn=strided),
    bad(
        "topk_weights_dtype",
        RuntimeError,
        rf"{OP}: topk_weights must be fp32 \(routing weights\), got bf16",
        weights=(6, 2),
        weights_dtype=torch.bfloat16,
    ),
    bad(
        "topk_weights_shape",
        RuntimeError,
        rf"{OP}: topk_weights must have the shape of topk_idx \[T, k\] \(topk_idx: \[6, 2\], "
        rf"topk_weights: \[6, 3\]\)",
        weights=(6, 3),
    ),
    bad(
        "topk_weights_strided",
        RuntimeError,
        rf"{OP}: topk_weights must be row-major contiguous",
        weights=(6, 2),
        weights_fn=strided,
    ),
]


@pytest.mark.parametrize("mode", VALIDATION_MODES)
@pytest.mark.parametrize("overrides, exc, match", BAD_INPUTS)
def test_bad_input(mode, overrides, exc, match):
    assert_bad_input_raises(mode, op(), lambda d: _args(d, **overrides), exc, match)


@pytest.mark.parametrize("arg", ["topk_idx", "w1"])
def test_bad_device(arg):
    assert_rejects_input_on_other_device(op(), _args("cpu"), ("x", "topk_idx", "w1"), arg, OP)


def test_fake_cuda_rejects_fp32():
    assert_fake_cuda_rejects_fp32(
        op(),
        lambda: _args("cuda", dtype=torch.float32),
        rf"{OP}: x must be bf16 or fp16 on CUDA, got fp32",
    )


def test_get_dispatch_layout_matches_the_dispatch(ops):
    """mkernel.moe.get_dispatch_layout's counts are what the dispatch moves (each token once per
    destination rank, every choice counted at its expert)."""
    from mkernel.moe import get_dispatch_layout

    world, e = 4, 8
    ins = make_inputs(5, 0, 37, 16, 3, e, "skewed", torch.float32)
    lay = get_dispatch_layout(ins.topk_idx, e, world)
    idx = ins.topk_idx
    want_rank = torch.tensor([sum(bool((idx[t] // 2 == r).any()) for t in range(37))
                              for r in range(world)], dtype=torch.int32)
    assert torch.equal(lay.tokens_per_rank, want_rank)
    assert torch.equal(lay.tokens_per_expert, torch.bincount(idx.reshape(-1), minlength=e).int())
    assert lay.is_token_in_rank.shape == (37, world)
    assert torch.equal(lay.is_token_in_rank.sum(0, dtype=torch.int32), want_rank)


def test_reserve_tokens_checks_its_bound():
    """mkernel.moe.reserve_tokens (the op _moe_reserve): a negative bound is refused, naming it;
    0 (back to the per-call exchange of T) and a positive bound are accepted on any backend."""
    with pytest.raises(ValueError, match="max_tokens must be >= 0"):
        torch.ops.mkernel._moe_reserve(0, 1, -1)
    torch.ops.mkernel._moe_reserve(0, 1, 64)
    torch.ops.mkernel._moe_reserve(0, 1, 0)
