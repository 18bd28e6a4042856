"""The attention engine's native backward (``mkernel::attention_backward``, opt-in through
``MKERNEL_ATTN_BWD=native``): dq/dk/dv against autograd of the float64 reference on ragged
lengths, d 64/128, GQA/MQA, causal (bottom-right, s != s_kv too) and not, bf16/fp16, the caching
allocator poisoned with NaN first and the op called twice with fresh inputs (workspaces reused).
The selection logic and the op's Meta kernel are checked on the CPU."""

from __future__ import annotations

import pytest
import torch

import mkernel

from .reference import attention_ref

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CASES = [  # (b, s, s_kv, h, h_kv, d, causal)
    # One key: softmax over a single score has zero gradient, so the exact dq and dk are 0 and
    # the kernel's are rounding noise (dS = P (dP - D) with dP and D = rowsum(dO o O) summed in
    # different orders: ~5e-7): checked against the error floor of _rel (session 10 run 1
    # read this case as a 1e24 "relative" error against a zero reference).
    (1, 1, 1, 2, 2, 128, False),
    (1, 1, 7, 2, 2, 128, False),         # one query row, several keys
    (1, 2, 2, 2, 2, 128, False),         # a 2-row tile: rows 2..63 zero-filled
    (1, 2, 2, 2, 1, 64, True),           # causal: row 0 sees one key (its dq row is 0)
    (2, 17, 17, 4, 4, 64, True),
    (1, 129, 129, 8, 2, 128, False),
    (1, 129, 129, 8, 2, 128, True),
    (2, 200, 333, 8, 2, 64, True),       # s < s_kv
    (1, 1000, 300, 4, 4, 128, True),     # s > s_kv: rows < 700 see no key (lse = -inf)
    (1, 1000, 1000, 4, 1, 128, True),    # MQA
    (3, 255, 257, 6, 3, 128, False),
    (1, 512, 384, 4, 4, 64, False),
    (2, 1024, 1024, 8, 2, 128, True),
    # The wgmma kernel's 128-key CTA: warpgroup 1's half partly past s_kv (65, 130 keys), the
    # causal diagonal inside either half, one key in the last CTA (129).
    (1, 64, 130, 2, 2, 128, True),
    (1, 190, 65, 2, 1, 128, False),
    (2, 100, 200, 4, 2, 64, True),
    (1, 129, 129, 2, 2, 64, False),
]

# The main kernel (MKERNEL_ATTN_BWD_KERNEL): wgmma (dQ by float2 atomics), wgmma_bulk_dq (dQ
# staged in shared memory, one bulk reduce-add per tile, dq_accum tiled), wgmma_ws (the default:
# the same, warp-specialized: a TMA producer warpgroup and an mbarrier pipeline),
# wgmma_ws_dqwarp (that in FA3's step order, a producer warp issuing dQ's reduce-adds, causal CTAs
# longest first) and the first mma.sync version (last: the others are compared with it).
KERNELS = ["wgmma", "wgmma_bulk_dq", "wgmma_ws", "wgmma_ws_dqwarp", "mma_sync"]


def _poison_allocator() -> None:
    """Fill the caching allocator's free blocks with NaN so an unwritten output shows up."""
    x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    x.fill_(0xFF)  # bf16/fp16/fp32 NaN bit patterns
    del x


def _backward_of_stored_out(dout, q, k, v, out, causal: bool, scale: float):
    """dq, dk, dv in float64 from the exact softmax but D = rowsum(dO o out) of the *stored* out
    (q's dtype): the best any backward fed that out can do. Shapes as the op's; GQA summed."""
    b, s, h, d = q.shape
    s_kv, h_kv = k.shape[1], k.shape[2]
    g = h // h_kv
    qf, kf, vf, of, dof = (x.double().transpose(1, 2) for x in (q, k, v, out, dout))
    kf, vf = kf.repeat_interleave(g, 1), vf.repeat_interleave(g, 1)
    scores = qf @ kf.transpose(-1, -2) * scale
    if causal:
        i = torch.arange(s, device=q.device)[:, None]
        j = torch.arange(s_kv, device=q.device)[None, :]
        scores = scores.masked_fill(j > i + (s_kv - s), float("-inf"))
    p = torch.softmax(scores, -1).nan_to_num(0.0)  # rows that see no key: P = 0
    dp = dof @ vf.transpose(-1, -2)
    ds = p * (dp - (dof * of).sum(-1, keepdim=True))
    dq = (scale * ds @ kf).transpose(1, 2)
    dk = (scale * ds.transpose(-1, -2) @ qf).reshape(b, h_kv, g, s_kv, d).sum(2).transpose(1, 2)
    dv = (p.transpose(-1, -2) @ dof).reshape(b, h_kv, g, s_kv, d).sum(2).transpose(1, 2)
    return dq, dk, dv


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    """||x - ref|| / max(||ref||, 1e-3 sqrt(numel)): relative error, measured against a floor
    of 1e-3 RMS per entry where the exact gradient is (near) zero — a one-key softmax's dq and
    dk are exactly 0, and any kernel's rounding noise divided by ||0|| would read as garbage.
    Gradients of these unit-normal inputs have RMS ~0.1-1, far above the floor."""
    floor = 1e-3 * float(ref.numel()) ** 0.5
    return ((x.double() - ref).norm() / ref.norm().clamp_min(floor)).item()


@needs_gpu
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CASES)
def test_native_backward_matches_float64_autograd(case, dtype, kernel, monkeypatch) -> None:
    monkeypatch.setenv("MKERNEL_ATTN_BWD_KERNEL", kernel)
    b, s, s_kv, h, h_kv, d, causal = case
    scale = d ** -0.5
    for seed in (31, 32):  # a second call with fresh inputs: outputs and workspaces reused
        _poison_allocator()
        gen = torch.Generator(device="cuda").manual_seed(seed)
        q = torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen)
        k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dtype, generator=gen)
        v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dtype, generator=gen)
        dout = torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen)
        out, lse = mkernel.attention(q, k, v, causal=causal)
        dq, dk, dv = torch.ops.mkernel.attention_backward.default(dout, q, k, v, out, lse, causal,
                                                                 scale)
        torch.cuda.synchronize()
        assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
        assert dq.dtype == dtype and dk.dtype == dtype and dv.dtype == dtype
        q64, k64, v64 = (x.double().requires_grad_() for x in (q, k, v))
        ref, _ = attention_ref(q64, k64, v64, causal, scale)
        ref_grads = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
        stored = _backward_of_stored_out(dout, q, k, v, out, causal, scale)
        for name, g, r, rs in zip("qkv", (dq, dk, dv), ref_grads, stored):
            assert torch.isfinite(g).all(), f"d{name} has non-finite entries (unwritten?)"
            # Any backward fed the stored out (this one, cuDNN's, FA2's) computes D = rowsum(dO o O)
            # from O rounded to q's dtype: with a few keys per row dS = P (dP - D) cancels and that
            # rounding alone moves dq by up to ~1e-1 relative in bf16 (s = s_kv = 2, causal: 3.7% of
            # random draws above 2e-2 in fp64 emulation; s10 run 2 read 2.4e-2). So: within 2e-2 of the
            # fp64 backward of the stored out, and no farther from autograd than that one is, + 2e-2.
            rel = _rel(g, rs)
            assert rel < 2e-2, f"d{name} relative error {rel} vs the stored-out backward (case {case}, {dtype}, {kernel}, seed {seed})"
            rel_ad = _rel(g, r)
            assert rel_ad < 2e-2 + _rel(rs, r), f"d{name} relative error {rel_ad} vs autograd (case {case}, {dtype}, {kernel}, seed {seed})"


@needs_gpu
@pytest.mark.parametrize("misaligned", ["dout", "out", "q"])
def test_native_backward_takes_views_off_a_16_byte_boundary(misaligned) -> None:
    """A contiguous view at an odd element offset (autograd may pass dout so; Megatron-style flat
    buffers make such q) runs the default kernel on an aligned copy: no fault, dk / dv the same
    bits as the aligned call's (dq is summed by bulk reduce-adds in any order: to rounding)."""
    b, s, h, d = 2, 200, 4, 128
    gen = torch.Generator(device="cuda").manual_seed(41)
    t = {n: torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
         for n in ("q", "k", "v", "dout")}
    t["out"], lse = mkernel.attention(t["q"], t["k"], t["v"], causal=True)
    want = torch.ops.mkernel.attention_backward.default(t["dout"], t["q"], t["k"], t["v"],
                                                       t["out"], lse, True, d ** -0.5)
    flat = torch.empty(t[misaligned].numel() + 1, device="cuda", dtype=torch.bfloat16)
    view = flat[1:].view(t[misaligned].shape)  # 2 bytes past a 16-byte boundary
    view.copy_(t[misaligned])
    assert view.data_ptr() % 16 == 2
    t[misaligned] = view
    got = torch.ops.mkernel.attention_backward.default(t["dout"], t["q"], t["k"], t["v"],
                                                      t["out"], lse, True, d ** -0.5)
    torch.cuda.synchronize()
    assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2]), misaligned
    assert _rel(got[0], want[0].double()) < 1e-3, f"dq differs with {misaligned} misaligned"


@needs_gpu
@pytest.mark.parametrize("kernel", KERNELS[:-1])
def test_native_backward_kernel_repeats_bit_for_bit_and_agrees_with_mma_sync(kernel, monkeypatch) -> None:
    """Each main kernel on one input: dk and dv repeat bit for bit (dq is summed by fp32 atomics
    or bulk reduce-adds in any order), and agree with the mma.sync kernel's to rounding."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    b, s, s_kv, h, h_kv, d = 2, 777, 777, 8, 2, 128
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    dout = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    out, lse = mkernel.attention(q, k, v, causal=True)
    grads = {}
    for name in (kernel, "mma_sync"):
        monkeypatch.setenv("MKERNEL_ATTN_BWD_KERNEL", name)
        runs = [torch.ops.mkernel.attention_backward.default(dout, q, k, v, out, lse, True, d ** -0.5)
                for _ in range(2)]
        assert torch.equal(runs[0][1], runs[1][1]) and torch.equal(runs[0][2], runs[1][2]), name
        grads[name] = runs[0]
    for name, a, c in zip("qkv", grads[kernel], grads["mma_sync"]):
        assert _rel(a, c.double()) < 1e-2, f"d{name}: {kernel} and mma_sync disagree"


def _dqwarp_knob_keeps_key_grads(monkeypatch, knob: str, base: str, other: str, shape, dtype,
                                 causal: bool, seed: int, what: str):
    """wgmma_ws_dqwarp's gradients for fresh inputs of ``shape = (b, s, h, h_kv, d)`` under
    ``knob = base`` and ``knob = other`` (allocator poisoned before each): dk and dv bit for bit,
    dq to fp32 summation order, ``other``'s three against float64 of the stored out. Returns the
    call's arguments (for a refusal check)."""
    monkeypatch.setenv("MKERNEL_ATTN_BWD_KERNEL", "wgmma_ws_dqwarp")
    b, s, h, h_kv, d = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, dout = (torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
    k, v = (torch.randn(b, s, h_kv, d, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
    out, lse = mkernel.attention(q, k, v, causal=causal)
    args = (dout, q, k, v, out, lse, causal, d ** -0.5)
    grads = {}
    for value in (base, other):
        monkeypatch.setenv(knob, value)
        _poison_allocator()
        grads[value] = torch.ops.mkernel.attention_backward.default(*args)
    torch.cuda.synchronize()
    assert torch.equal(grads[base][1], grads[other][1]), f"dk differs {what}"
    assert torch.equal(grads[base][2], grads[other][2]), f"dv differs {what}"
    assert _rel(grads[other][0], grads[base][0].double()) < 1e-3, f"dq differs {what}"
    stored = _backward_of_stored_out(dout, q, k, v, out, causal, d ** -0.5)
    for name, g, r in zip("qkv", grads[other], stored):
        assert _rel(g, r) < 2e-2, f"d{name} ({knob}={other}) vs the float64 backward of the stored out"
    return args


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_dqwarp_tile_order_changes_no_key_gradient(dtype, monkeypatch) -> None:
    """wgmma_ws_dqwarp's causal CTA orders (longest first in L2 sections, bwd_tile_coord; the
    plain grid): dk and dv bit for bit (a CTA computes the same whatever its place), dq to fp32
    summation order, both against float64. b = 3, h_kv = 2, s = 2048, d = 128, 4 query heads a kv
    head: sections of 4 (kv head, batch) pairs over 6, the last one a remainder of 2."""
    args = _dqwarp_knob_keeps_key_grads(monkeypatch, "MKERNEL_ATTN_BWD_TILE_ORDER", "grid", "lpt",
                                        (3, 2048, 8, 2, 128), dtype, True, 5,
                                        "between CTA orders")
    monkeypatch.setenv("MKERNEL_ATTN_BWD_TILE_ORDER", "sorted")
    with pytest.raises(ValueError, match="MKERNEL_ATTN_BWD_TILE_ORDER"):
        torch.ops.mkernel.attention_backward.default(*args)


@needs_gpu
@pytest.mark.parametrize("budget_mb", ["1", "16"])
def test_dqwarp_l2_section_budget_changes_no_key_gradient(budget_mb, monkeypatch) -> None:
    """MKERNEL_ATTN_BWD_L2_SECTION_MB (session 51, a measurement switch) resizes the causal order's
    sections: a (kv head, batch) pair's Q, dO and dq_accum rows are 8 MiB here, so 1 MiB gives
    sections of 1 pair, 16 MiB of 2, the default 40 MB of 4 (of 6 pairs). dk and dv bit for bit,
    dq to fp32 summation order, both against float64; a budget that is not a positive integer is
    refused by name."""
    args = _dqwarp_knob_keeps_key_grads(monkeypatch, "MKERNEL_ATTN_BWD_L2_SECTION_MB", "40",
                                        budget_mb, (3, 2048, 8, 2, 128), torch.bfloat16, True, 6,
                                        "between L2 section budgets")
    monkeypatch.setenv("MKERNEL_ATTN_BWD_L2_SECTION_MB", "0")
    with pytest.raises(ValueError, match="MKERNEL_ATTN_BWD_L2_SECTION_MB"):
        torch.ops.mkernel.attention_backward.default(*args)


def _masked_backward_of_stored_out(dout, q, k, v, out, visible, scale: float):
    """dq, dk, dv in float64 of attention under an explicit [s, s_kv] mask, D = rowsum(dO o out)
    of the stored out: the best any backward fed that out can do (GQA summed)."""
    b, s, h, d = q.shape
    h_kv = k.shape[2]
    g = h // h_kv
    qf, kf, vf, of, dof = (x.double().transpose(1, 2) for x in (q, k, v, out, dout))
    kf, vf = kf.repeat_interleave(g, 1), vf.repeat_interleave(g, 1)
    scores = (qf @ kf.transpose(-1, -2) * scale).masked_fill(~visible.to(q.device), float("-inf"))
    p = torch.softmax(scores, -1).nan_to_num(0.0)
    dp = dof @ vf.transpose(-1, -2)
    ds = p * (dp - (dof * of).sum(-1, keepdim=True))
    dq = (scale * ds @ kf).transpose(1, 2)
    dk = (scale * ds.transpose(-1, -2) @ qf).reshape(b, h_kv, g, -1, d).sum(2).transpose(1, 2)
    dv = (p.transpose(-1, -2) @ dof).reshape(b, h_kv, g, -1, d).sum(2).transpose(1, 2)
    return dq, dk, dv


@needs_gpu
@pytest.mark.parametrize("kernel", KERNELS[:-1])
@pytest.mark.parametrize("world,rank", [(2, 0), (2, 1), (3, 1), (4, 3)])
@pytest.mark.parametrize("causal", [False, True])
def test_ring_mode_matches_the_masked_float64_backward(kernel, world, rank, causal,
                                                       monkeypatch) -> None:
    """mkernel::attention_backward_ring (the ring backward's one launch) for one rank of an
    emulated ring, in one process: q this rank's shard, k/v every rank's (all-gathered, [W * b,
    ...]); out/lse from the float64 attention under the zigzag rule (ring_visible); dq, dk_all,
    dv_all against the float64 backward under the same rule. s = 130: the zigzag chunk (65) is
    not a multiple of the 64-row blocks, nor the shard of the 128-key CTAs."""
    from mkernel._ring_backward import ring_visible

    monkeypatch.setenv("MKERNEL_ATTN_BWD_KERNEL", kernel)
    b, s, h, h_kv, d = 2, 130, 4, 2, 128
    scale = d ** -0.5
    _poison_allocator()
    gen = torch.Generator(device="cuda").manual_seed(11 + 7 * world + rank)
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k_all = torch.randn(world * b, s, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    v_all = torch.randn(world * b, s, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    dout = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    # Every source's keys side by side per batch row: [b, W * s, h_kv, d].
    k_cat = torch.cat(k_all.chunk(world, 0), 1)
    v_cat = torch.cat(v_all.chunk(world, 0), 1)
    visible = ring_visible(rank, world, s, causal).cuda()
    g = h // h_kv
    scores = (q.double().transpose(1, 2) @ k_cat.double().transpose(1, 2).repeat_interleave(g, 1)
              .transpose(-1, -2) * scale).masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, -1).float().contiguous()  # [b, h, s]
    out = (torch.softmax(scores, -1) @ v_cat.double().transpose(1, 2).repeat_interleave(g, 1))
    out = out.transpose(1, 2).to(torch.bfloat16).contiguous()
    dq, dk_all, dv_all = torch.ops.mkernel.attention_backward_ring.default(
        dout, q, k_all, v_all, out, lse, causal, scale, world, rank)
    torch.cuda.synchronize()
    assert dk_all.shape == k_all.shape and dv_all.shape == v_all.shape and dq.shape == q.shape
    assert dk_all.dtype == dv_all.dtype == torch.float32 and dq.dtype == q.dtype
    rdq, rdk, rdv = _masked_backward_of_stored_out(dout, q, k_cat, v_cat, out, visible, scale)
    rdk_all = torch.cat(rdk.chunk(world, 1), 0)  # back to [W * b, s, h_kv, d]
    rdv_all = torch.cat(rdv.chunk(world, 1), 0)
    for name, got, ref in (("dq", dq, rdq), ("dk", dk_all, rdk_all), ("dv", dv_all, rdv_all)):
        assert torch.isfinite(got).all(), f"{name} has non-finite entries (unwritten?)"
        rel = _rel(got, ref)
        assert rel < 2e-2, f"{name} relative error {rel} ({kernel}, W={world}, rank {rank}, causal {causal})"


@needs_gpu
def test_ring_mode_refuses_a_wrong_gather(monkeypatch) -> None:
    q = torch.randn(2, 64, 2, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(3, 64, 2, 64, device="cuda", dtype=torch.bfloat16)  # not W * b
    lse = torch.zeros(2, 2, 64, device="cuda")
    with pytest.raises(ValueError, match="all-gathered"):
        torch.ops.mkernel.attention_backward_ring.default(q, q, k, k, q, lse, True, 0.125, 2, 0)
    monkeypatch.setenv("MKERNEL_ATTN_BWD_KERNEL", "mma_sync")
    k = torch.randn(4, 64, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="wgmma kernels only"):
        torch.ops.mkernel.attention_backward_ring.default(q, q, k, k, q, lse, True, 0.125, 2, 0)


@needs_gpu
def test_unknown_backward_kernel_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("MKERNEL_ATTN_BWD_KERNEL", "fastest")
    q = torch.randn(1, 64, 2, 64, device="cuda", dtype=torch.bfloat16)
    out, lse = mkernel.attention(q, q, q)
    with pytest.raises(ValueError, match="MKERNEL_ATTN_BWD_KERNEL"):
        torch.ops.mkernel.attention_backward.default(q, q, q, q, out, lse, False, 0.125)


@needs_gpu
@pytest.mark.parametrize("case", [(2, 300, 300, 8, 2, 128, True), (1, 257, 513, 4, 4, 64, False)])
def test_autograd_through_the_native_backward(case, monkeypatch) -> None:
    """MKERNEL_ATTN_BWD=native routes mkernel.attention's autograd to the native kernels, and
    they agree with the default (cuDNN / FA2) backward to bf16 rounding."""
    b, s, s_kv, h, h_kv, d, causal = case
    gen = torch.Generator(device="cuda").manual_seed(5)
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
    dout = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    monkeypatch.setenv("MKERNEL_ATTN_BWD", "native")
    assert mkernel.ops._attention_backward_choice(q, k, v, causal) == "native"
    out, _ = mkernel.attention(q, k, v, causal=causal)
    native = torch.autograd.grad(out, (q, k, v), dout)
    monkeypatch.setenv("MKERNEL_ATTN_BWD", "auto")
    out, _ = mkernel.attention(q, k, v, causal=causal)
    default = torch.autograd.grad(out, (q, k, v), dout)
    q32, k32, v32 = (x.detach().float().requires_grad_() for x in (q, k, v))
    ref, _ = attention_ref(q32, k32, v32, causal, dtype=torch.float32)
    ref_grads = torch.autograd.grad(ref, (q32, k32, v32), dout.float())
    for name, n, dflt, r in zip("qkv", native, default, ref_grads):
        assert _rel(n, r.double()) < 2e-2, f"native d{name}"
        assert _rel(n, dflt.double()) < 2e-2, f"native vs default d{name}"


# ---- CPU: selection and registration


@pytest.mark.parametrize("mode", ["auto", "torch", "flash", "native"])
def test_backward_mode_from_env_overrides_the_module_setting(mode, monkeypatch) -> None:
    monkeypatch.setattr(mkernel.ops, "ATTENTION_BACKWARD", "auto")
    monkeypatch.setenv("MKERNEL_ATTN_BWD", mode)
    assert mkernel.ops._attention_backward_mode() == mode
    monkeypatch.delenv("MKERNEL_ATTN_BWD")
    monkeypatch.setattr(mkernel.ops, "ATTENTION_BACKWARD", mode)
    assert mkernel.ops._attention_backward_mode() == mode


def test_backward_mode_rejects_an_unknown_value(monkeypatch) -> None:
    monkeypatch.setenv("MKERNEL_ATTN_BWD", "fastest")
    with pytest.raises(ValueError, match="MKERNEL_ATTN_BWD"):
        mkernel.ops._attention_backward_mode()


def test_native_mode_on_the_cpu_is_still_the_math_backward(monkeypatch) -> None:
    monkeypatch.setenv("MKERNEL_ATTN_BWD", "native")
    q = torch.randn(1, 8, 4, 64, dtype=torch.bfloat16)
    k = torch.randn(1, 8, 2, 64, dtype=torch.bfloat16)
    for causal in (False, True):
        assert mkernel.ops._attention_backward_choice(q, k, k, causal) == "math"


def test_default_mode_is_auto(monkeypatch) -> None:
    monkeypatch.delenv("MKERNEL_ATTN_BWD", raising=False)
    assert mkernel.ops.ATTENTION_BACKWARD == "auto"
    assert mkernel.ops._attention_backward_mode() == "auto"


@pytest.mark.parametrize("s,s_kv,d,causal,wins", [
    (4096, 4096, 128, False, True), (8192, 4100, 128, False, True), (4095, 8192, 128, False, False),
    (8192, 8192, 128, True, False), (8192, 8192, 64, False, False), (8192, 4000, 128, False, False)])
def test_auto_takes_the_native_backward_only_on_its_measured_rows(s, s_kv, d, causal, wins) -> None:
    """auto's native rows (NATIVE_AUTO_MIN_SEQ): non-causal, d = 128, long queries and keys; the
    rule reads shapes only (meta tensors: no memory)."""
    q = torch.empty(1, s, 4, d, device="meta")
    k = torch.empty(1, s_kv, 2, d, device="meta")
    assert mkernel.ops._native_backward_wins(q, k, causal) is wins


def test_auto_keeps_torch_kernels_under_deterministic_algorithms() -> None:
    """The native backward sums dq in arrival order: with torch.use_deterministic_algorithms on,
    auto does not take it even on its rows (and takes it again once off)."""
    q = torch.empty(1, 8192, 4, 128, device="meta")
    was, warn_only = (torch.are_deterministic_algorithms_enabled(),
                      torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        torch.use_deterministic_algorithms(True)
        assert mkernel.ops._native_backward_wins(q, q, False) is False
        torch.use_deterministic_algorithms(False)
        assert mkernel.ops._native_backward_wins(q, q, False) is True
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn_only)


@needs_gpu
@pytest.mark.parametrize("mode,want", [("auto", "native"), ("torch", "cudnn")])
def test_auto_native_rows_and_the_torch_pin(mode, want, monkeypatch) -> None:
    """On a row auto gives the native backward (non-causal, d = 128, ragged 4100 queries / 4164
    keys, GQA 4/2) and MKERNEL_ATTN_BWD=torch pins torch's kernels: both match autograd of the
    fp32 reference, the allocator's free blocks NaN-poisoned before the backward."""
    monkeypatch.setenv("MKERNEL_ATTN_BWD", mode)
    gen = torch.Generator(device="cuda").manual_seed(38)
    shape_q, shape_kv = (1, 4100, 4, 128), (1, 4164, 2, 128)
    q = torch.randn(*shape_q, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
    k = torch.randn(*shape_kv, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
    v = torch.randn(*shape_kv, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
    dout = torch.randn(*shape_q, device="cuda", dtype=torch.bfloat16, generator=gen)
    choice = mkernel.ops._attention_backward_choice(q, k, v, False)
    assert choice == want or (mode == "torch" and choice == "flash")
    out, _ = mkernel.attention(q, k, v, causal=False)
    _poison_allocator()
    grads = torch.autograd.grad(out, (q, k, v), dout)
    q32, k32, v32 = (x.detach().float().requires_grad_() for x in (q, k, v))
    ref, _ = attention_ref(q32, k32, v32, False, dtype=torch.float32)
    ref_grads = torch.autograd.grad(ref, (q32, k32, v32), dout.float())
    for name, g, r in zip("qkv", grads, ref_grads):
        assert _rel(g, r.double()) < 2e-2, f"{mode} ({choice}) d{name}"


def test_ring_op_meta_shapes_and_validation() -> None:
    """attention_backward_ring's Meta kernel: dk/dv have the gathered k's shape; a k that is not
    ring_world shards of q's batch, or a rank outside the ring, is refused naming it."""
    b, s, h, h_kv, d, world = 2, 64, 4, 2, 128, 3
    q = torch.empty(b, s, h, d, dtype=torch.bfloat16, device="meta")
    k = torch.empty(world * b, s, h_kv, d, dtype=torch.bfloat16, device="meta")
    lse = torch.empty(b, h, s, dtype=torch.float32, device="meta")
    dq, dk, dv = torch.ops.mkernel.attention_backward_ring.default(q, q, k, k, q, lse, True, 0.1,
                                                                   world, 1)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == k.shape
    assert dk.dtype == dv.dtype == torch.float32  # the ring's partials, summed in fp32 next
    with pytest.raises(ValueError, match="all-gathered"):
        torch.ops.mkernel.attention_backward_ring.default(q, q, k, k, q, lse, True, 0.1, 2, 1)
    with pytest.raises(ValueError, match="ring_rank"):
        torch.ops.mkernel.attention_backward_ring.default(q, q, k, k, q, lse, True, 0.1, world, 3)


def test_ring_attention_backward_meta_shapes() -> None:
    """ring_attention_backward's Meta kernel (the native ring backward from this rank's shard):
    dq has q's shape, dk / dv k's — this rank's own gradients in its dtype, the ranks' partials
    already summed (by a reduce-scatter, or travelling in the kernel); a k that is not 4-D is
    refused naming it."""
    b, s, h, h_kv, d, world = 2, 256, 8, 2, 64, 4
    q = torch.empty(b, s, h, d, dtype=torch.float16, device="meta")
    k = torch.empty(b, s, h_kv, d, dtype=torch.float16, device="meta")
    lse = torch.empty(b, h, s, dtype=torch.float32, device="meta")
    dq, dk, dv = torch.ops.mkernel.ring_attention_backward.default(q, q, k, k, q, lse, 0, world,
                                                                   True, 0.125)
    assert dq.shape == q.shape and dq.dtype == q.dtype
    assert dk.shape == dv.shape == (b, s, h_kv, d)
    assert dk.dtype == dv.dtype == torch.float16
    with pytest.raises(ValueError, match="k must be"):
        torch.ops.mkernel.ring_attention_backward.default(q, q, k[0], k[0], q, lse, 0, world,
                                                          True, 0.125)


def test_op_meta_shapes_and_validation() -> None:
    """The registered op's Meta kernel: gradient shapes = input shapes; a bad lse is refused
    naming the argument."""
    b, s, s_kv, h, h_kv, d = 2, 33, 65, 8, 2, 128
    q = torch.empty(b, s, h, d, dtype=torch.bfloat16, device="meta")
    k = torch.empty(b, s_kv, h_kv, d, dtype=torch.bfloat16, device="meta")
    lse = torch.empty(b, h, s, dtype=torch.float32, device="meta")
    dq, dk, dv = torch.ops.mkernel.attention_backward.default(q, q, k, k, q, lse, True, 0.1)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == k.shape
    with pytest.raises(ValueError, match="lse"):
        torch.ops.mkernel.attention_backward.default(q, q, k, k, q, lse[:, :, 1:], True, 0.1)
