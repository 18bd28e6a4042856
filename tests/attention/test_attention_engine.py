"""mkernel.attention's CUDA engine against a float64 reference and SDPA: ragged lengths,
d 64/128, GQA/MQA, causal (bottom-right) and not, s != s_kv, bf16/fp16; outputs poisoned
first; error bounded by a multiple of torch's own low-precision error on the same problem
(FlashAttention's test criterion), plus a relative-norm bound; LSE checked; gradients."""

from __future__ import annotations

import pytest
import torch

import mkernel

from .reference import attention_ref, lse_ref

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CASES = [  # (b, s, s_kv, h, h_kv, d)
    (1, 1, 1, 2, 2, 128),
    (2, 17, 17, 4, 4, 64),
    (1, 129, 129, 8, 2, 128),
    (2, 1000, 1000, 4, 1, 64),
    (1, 4097, 4097, 2, 2, 128),
    (1, 128, 1000, 8, 2, 128),   # s < s_kv
    (1, 1000, 300, 4, 4, 64),    # s > s_kv: causal rows < 700 see no key
    (3, 255, 257, 6, 3, 128),
]


def _poison_allocator() -> None:
    """Fill the caching allocator's free blocks with NaN so an unwritten output shows up."""
    x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    x.fill_(0xFF)  # bf16/fp16/fp32 NaN bit patterns
    del x


def _torch_lowp(q, k, v, causal):
    """torch's own output in q's dtype (math in low precision), bottom-right causal."""
    ref, _ = attention_ref(q, k, v, causal, dtype=q.dtype)
    return ref


def _check_against_reference(out, lse, q, k, v, causal: bool) -> None:
    """out / lse against the float64 reference: max error within twice torch's own low-precision
    error, relative error < 1e-2, and the LSE's -inf rows and values."""
    torch.cuda.synchronize()
    ref, ref_lse = attention_ref(q, k, v, causal)
    lowp = _torch_lowp(q, k, v, causal)
    assert not torch.isnan(out).any(), "unwritten or NaN output"
    err = (out.double() - ref).abs().max().item()
    lowp_err = (lowp.double() - ref).abs().max().item()
    assert err <= 2 * lowp_err + 1e-3, f"max err {err} vs torch low-precision {lowp_err}"
    rel = ((out.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    assert rel < 1e-2, f"relative error {rel}"
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite), "LSE -inf rows differ"
    assert torch.allclose(lse.double()[finite], ref_lse[finite], rtol=1e-3, atol=1e-3)


def _check_variant_against_base(variant: int, base: str, causal: bool, case, monkeypatch) -> None:
    """A pinned engine variant whose math is its base's (a schedule, prefetch or store change):
    fresh bf16 d=128 inputs of `case` ([b, s, s_kv, h, h_kv, _]), the output written into poisoned
    blocks, against the float64 reference where it stays small, and bit for bit the base's."""
    b, s, s_kv, h, h_kv, _ = case
    gen = torch.Generator(device="cuda").manual_seed(hash((case, causal, variant)) % 2**31)
    q, k, v = (torch.randn(b, n, hh, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
               for n, hh in ((s, h), (s_kv, h_kv), (s_kv, h_kv)))
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", base)
    want, want_lse = mkernel.attention(q, k, v, causal=causal)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", str(variant))
    _poison_allocator()
    out, lse = mkernel.attention(q, k, v, causal=causal)
    assert not out.isnan().any() and not lse.isnan().any(), "an unwritten (poisoned) output"
    if s * s_kv * h * b <= 2 * 4097 * 4097:  # the fp64 reference where it stays small
        _check_against_reference(out, lse, q, k, v, causal)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_forward_matches_reference(case, causal, dtype) -> None:
    b, s, s_kv, h, h_kv, d = case
    gen = torch.Generator(device="cuda").manual_seed(hash((case, causal, str(dtype))) % 2**31)
    q = torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen)
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dtype, generator=gen)
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dtype, generator=gen)
    _poison_allocator()
    out, lse = mkernel.attention(q, k, v, causal=causal)
    assert out.dtype == dtype and lse.dtype == torch.float32
    _check_against_reference(out, lse, q, k, v, causal)


def test_output_buffers_are_reused_and_rewritten() -> None:
    """The second call's output lands in the block the first one freed (NaN-filled): every
    element must be rewritten."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    shape = (1, 300, 4, 128)
    q1, k1, v1, q2, k2, v2 = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)
                              for _ in range(6))
    out1, lse1 = mkernel.attention(q1, k1, v1)
    out1.fill_(float("nan"))
    lse1.fill_(float("nan"))
    ptr, lse_ptr = out1.data_ptr(), lse1.data_ptr()
    del out1, lse1
    out2, lse2 = mkernel.attention(q2, k2, v2)
    ref, ref_lse = attention_ref(q2, k2, v2, False)
    if out2.data_ptr() != ptr or lse2.data_ptr() != lse_ptr:
        pytest.skip("the caching allocator did not hand the freed blocks back")
    assert not torch.isnan(out2).any() and not torch.isnan(lse2).any()
    assert ((out2.double() - ref).norm() / ref.norm()).item() < 1e-2
    assert torch.allclose(lse2.double(), ref_lse, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa(causal) -> None:
    gen = torch.Generator(device="cuda").manual_seed(9)
    q, k, v = (torch.randn(2, 2048, 8, 128, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    out, _ = mkernel.attention(q, k, v, causal=causal)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal).transpose(1, 2)
    rel = ((out.float() - sdpa.float()).norm() / sdpa.float().norm()).item()
    assert rel < 1e-2


@pytest.mark.parametrize("backend", ["auto", "flash"])
@pytest.mark.parametrize("case", [(1, 129, 129, 4, 4, 128, False), (2, 200, 333, 8, 2, 64, True),
                                  (1, 1000, 1000, 4, 1, 128, True), (2, 256, 256, 8, 2, 128, True),
                                  (1, 512, 384, 4, 4, 64, False),
                                  (1, 384, 384, 4, 2, 128, True, torch.float16)])
def test_gradients_match_autograd(case, backend, monkeypatch) -> None:
    """Gradients through the backward kernel the op chooses ("auto": cuDNN where it applies,
    else FA2; "flash": FA2 always) against autograd of the fp32 reference."""
    b, s, s_kv, h, h_kv, d, causal = case[:7]
    dtype = case[7] if len(case) > 7 else torch.bfloat16
    monkeypatch.setattr(mkernel.ops, "ATTENTION_BACKWARD", backend)
    gen = torch.Generator(device="cuda").manual_seed(13)
    q = torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen).requires_grad_()
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dtype, generator=gen).requires_grad_()
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dtype, generator=gen).requires_grad_()
    dout = torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen)
    out, _ = mkernel.attention(q, k, v, causal=causal)
    choice = mkernel.ops._attention_backward_choice(q, k, v, causal)
    if backend == "flash" or (causal and s != s_kv):
        assert choice == "flash"  # cuDNN's causal mask is top-left aligned
    elif s % 128 == 0 and s_kv % 128 == 0:
        assert choice == "cudnn", "cuDNN's backward should apply to this problem"
    grads = torch.autograd.grad(out, (q, k, v), dout)
    q32, k32, v32 = (x.detach().float().requires_grad_() for x in (q, k, v))
    ref, _ = attention_ref(q32, k32, v32, causal, dtype=torch.float32)
    ref_grads = torch.autograd.grad(ref, (q32, k32, v32), dout.float())
    for name, g, r in zip("qkv", grads, ref_grads):
        rel = ((g.float() - r).norm() / r.norm()).item()
        assert rel < 2e-2, f"d{name} relative error {rel} ({choice} backward)"


@pytest.mark.parametrize("backend", ["auto", "flash", "native"])
@pytest.mark.parametrize("case", [(1, 129, 129, 4, 4, 128, False), (2, 200, 333, 8, 2, 64, True),
                                  (1, 384, 384, 4, 2, 128, True), (1, 4096, 4096, 2, 2, 128, False)])
def test_gradients_through_lse(case, backend, monkeypatch) -> None:
    """A loss that reads out and lse: the lse term's gradient (ops._attention_lse_backward: a
    forward with v := k, a backward fed dO := dlse·q) on top of out's through each backward
    kernel, against autograd of the fp32 reference; and lse alone (no out gradient at all)."""
    b, s, s_kv, h, h_kv, d, causal = case
    monkeypatch.setattr(mkernel.ops, "ATTENTION_BACKWARD", backend)
    gen = torch.Generator(device="cuda").manual_seed(17)
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
    dout = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    dlse = torch.randn(b, h, s, device="cuda", generator=gen)
    q32, k32, v32 = (x.detach().float().requires_grad_() for x in (q, k, v))
    ref_out, _ = attention_ref(q32, k32, v32, causal, dtype=torch.float32)
    ref_lse = lse_ref(q32, k32, causal)
    for with_out in (True, False):
        out, lse = mkernel.attention(q, k, v, causal=causal)
        w = dlse.masked_fill(torch.isneginf(lse.detach()), 0.0)
        total = (lse * w).sum() + ((out.float() * dout.float()).sum() if with_out else 0)
        grads = torch.autograd.grad(total, (q, k, v), allow_unused=True)
        ref_total = (ref_lse * w).sum() + ((ref_out * dout.float()).sum() if with_out else 0)
        ref_grads = torch.autograd.grad(ref_total, (q32, k32, v32), allow_unused=True, retain_graph=True)
        for name, g, r in zip("qkv", grads, ref_grads):
            if r is None:
                assert g is None or torch.count_nonzero(g) == 0, name
                continue
            rel = ((g.float() - r).norm() / r.norm()).item()
            assert rel < 2e-2, f"d{name} relative error {rel} (out term {with_out}, {backend})"


def test_backward_choice_cache_follows_the_problem(monkeypatch) -> None:
    """The choice and the cuDNN applicability check are cached per (shapes, strides, dtype,
    device, cuDNN SDPA enabled, settings): a second call gives the same answer from the choice's
    cache, disabling cuDNN SDPA moves the same problem to FA2, a setting change is a new key, and
    a layout cuDNN's check refuses is asked anew, not served the cached answer."""
    q, k, v = (torch.randn(1, 256, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mkernel.ops._CUDNN_BACKWARD_OK.clear()
    mkernel.ops._BACKWARD_CHOICES.clear()
    first = mkernel.ops._attention_backward_choice(q, k, v, True)
    assert first == "cudnn"
    assert len(mkernel.ops._CUDNN_BACKWARD_OK) == 1 and len(mkernel.ops._BACKWARD_CHOICES) == 1
    assert mkernel.ops._attention_backward_choice(q, k, v, True) == first
    assert len(mkernel.ops._CUDNN_BACKWARD_OK) == 1 and len(mkernel.ops._BACKWARD_CHOICES) == 1
    monkeypatch.setenv("MKERNEL_ATTN_BWD", "native")
    assert mkernel.ops._attention_backward_choice(q, k, v, True) == "native"
    monkeypatch.setenv("MKERNEL_ATTN_BWD", "bogus")
    for _ in range(2):  # a bad setting raises on every call: never cached
        with pytest.raises(ValueError, match="MKERNEL_ATTN_BWD"):
            mkernel.ops._attention_backward_choice(q, k, v, True)
    monkeypatch.delenv("MKERNEL_ATTN_BWD")
    assert mkernel.ops._attention_backward_choice(q, k, v, True) == first
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert mkernel.ops._attention_backward_choice(q, k, v, True) == "flash"
    # A head-dim stride of 2 (every other element): not a layout cuDNN's check accepts.
    wide = torch.randn(1, 256, 4, 256, device="cuda", dtype=torch.bfloat16)[..., ::2]
    want = "cudnn" if mkernel.ops._cudnn_backward_applies(wide, k, v, True) else "flash"
    assert mkernel.ops._attention_backward_choice(wide, k, v, True) == want
    assert len(mkernel.ops._CUDNN_BACKWARD_OK) == 3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_merge_kernel_matches_full_attention(dtype) -> None:
    gen = torch.Generator(device="cuda").manual_seed(21)
    q = torch.randn(2, 333, 8, 128, device="cuda", dtype=dtype, generator=gen)
    k = torch.randn(2, 1000, 2, 128, device="cuda", dtype=dtype, generator=gen)
    v = torch.randn(2, 1000, 2, 128, device="cuda", dtype=dtype, generator=gen)
    acc = torch.zeros(2, 333, 8, 128, device="cuda")
    acc_lse = torch.full((2, 8, 333), float("-inf"), device="cuda")
    for lo, hi in ((0, 300), (300, 301), (301, 1000)):
        part, part_lse = mkernel.attention(q, k[:, lo:hi].contiguous(), v[:, lo:hi].contiguous())
        mkernel.ops.attention_merge_(acc, acc_lse, part, part_lse)
    ref, ref_lse = attention_ref(q, k, v, False)
    assert ((acc.double() - ref).norm() / ref.norm()).item() < 1e-2
    assert torch.allclose(acc_lse.double(), ref_lse, rtol=1e-3, atol=1e-3)


def test_cuda_graph_capture_and_replay() -> None:
    """The engine launches on the current stream with no host sync: it can be captured."""
    gen = torch.Generator(device="cuda").manual_seed(31)
    q, k, v = (torch.randn(1, 700, 4, 128, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    mkernel.attention(q, k, v, causal=True)  # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = mkernel.attention(q, k, v, causal=True)
    for _ in range(2):  # new inputs in the captured buffers, then replay
        for x in (q, k, v):
            x.copy_(torch.randn(x.shape, device="cuda", dtype=x.dtype, generator=gen))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref, ref_lse = attention_ref(q, k, v, True)
        assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2
        assert torch.allclose(lse.double(), ref_lse, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("tile, case", [
    ((192, 128), (1, 1000, 1000, 4, 1, 64)), ((192, 128), (2, 193, 4097, 8, 2, 64)),
    ((192, 128), (1, 17, 129, 2, 2, 64)), ((192, 128), (1, 2500, 700, 4, 4, 64)),
    ((128, 128), (1, 3000, 3000, 2, 1, 64)),
    ((128, 160), (1, 1000, 1000, 4, 1, 128)), ((128, 160), (2, 193, 4097, 8, 2, 128)),
    ((128, 160), (1, 2500, 700, 4, 4, 128))])
def test_other_tiles(tile, case) -> None:
    """Each built tile of bf16 d=64 (192x128, three consumer warpgroups; 128x128, the default
    below 2048 queries) and the opt-in 128x160 of bf16 d=128 against the reference; causal
    (not built) is refused."""
    _check_tile(tile, case)


@pytest.mark.parametrize("tile, case", [
    ((256, 128), (1, 1100, 1100, 4, 1, 128)), ((256, 128), (2, 193, 4097, 8, 2, 128)),
    ((256, 128), (1, 100, 700, 2, 2, 128)), ((256, 128), (3, 1024, 1024, 4, 4, 128)),
    ((256, 160), (1, 1100, 1000, 4, 2, 128)), ((256, 128), (2, 700, 300, 4, 2, 128))])
def test_cluster_tile(tile, case) -> None:
    """The opt-in 256x128 and 256x160 tiles of bf16 d=128: a cluster of two 128-row CTAs
    sharing every K/V block by TMA multicast. Odd query-block counts (1100, 193, 100, 700
    rows) leave the second CTA of the last cluster on rows past s, which must still load and
    release its half of each K/V block. 256x128 causal too (both CTAs walk the KV blocks of
    the pair's last tile; s < s_kv and s > s_kv included); 256x160 causal is refused."""
    _check_tile(tile, case)


def _check_tile(tile, case) -> None:
    b, s, s_kv, h, h_kv, d = case
    bm, bn = tile
    gen = torch.Generator(device="cuda").manual_seed(41)
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    _poison_allocator()
    out, lse = mkernel.attention(q, k, v, block_m=bm, block_n=bn)
    ref, ref_lse = attention_ref(q, k, v, False)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2
    assert torch.allclose(lse.double(), ref_lse, rtol=1e-3, atol=1e-3)
    if (bm, bn) == (256, 128):  # causal built: the pair walks the KV blocks of its last tile
        out, lse = mkernel.attention(q, k, v, causal=True, block_m=bm, block_n=bn)
        ref, ref_lse = attention_ref(q, k, v, True)
        assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2
        assert torch.allclose(lse.double(), ref_lse, rtol=1e-3, atol=1e-3)
    elif (bm, bn) != (128, 128):
        with pytest.raises(ValueError, match="block_m/block_n"):
            mkernel.attention(q, k, v, causal=True, block_m=bm, block_n=bn)


VARIANT_CASES = [  # bf16, d = 128: the variants' kernels (b, s, s_kv, h, h_kv, d)
    (1, 1, 1, 2, 2, 128),
    (1, 129, 129, 8, 2, 128),
    (1, 4097, 4097, 2, 2, 128),
    (1, 128, 1000, 8, 2, 128),
    (1, 1000, 300, 4, 4, 128),  # causal: rows < 700 see no key (masked blocks on MUFU only)
    (3, 255, 257, 6, 3, 128),
    # 720 tiles: several per CTA (the rings wrap across tiles; with O in a V stage, each tile's
    # stage is freed during the next one); causal: rows < 1100 see no key, empty tiles between
    # full ones on the same CTA.
    (2, 1800, 700, 24, 8, 128),
]


@pytest.mark.parametrize("variant", [8, 9, 64, 136, 137, 392, 649, 1033, 1160, 2184])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", VARIANT_CASES)
def test_mainloop_variants(variant, causal, case, monkeypatch) -> None:
    """The built mainloop variants (MKERNEL_ATTN_VARIANT, attention_variants_*.cu: the deep V
    ring alone, the default, the pre-session-8 default, and O in a V stage with K 3 + V 3 or
    K 2 + V 4 stages, or K 2 + V 3 as in the engine-forwarding ring kernel, and ring11's
    masked / wholly visible block split of 9 and 136: 1033, 1160) against the fp64 reference
    with the default kernel's tolerances; rows that
    see no key still give out 0 / lse -inf (with O in a V stage: tiles that see no key store O
    from registers, the causal (1000, 300) case)."""
    b, s, s_kv, h, h_kv, d = case
    gen = torch.Generator(device="cuda").manual_seed(hash((case, causal, variant)) % 2**31)
    q, k, v = (torch.randn(b, n, hh, d, device="cuda", dtype=torch.bfloat16, generator=gen)
               for n, hh in ((s, h), (s_kv, h_kv), (s_kv, h_kv)))
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", str(variant))
    _poison_allocator()
    out, lse = mkernel.attention(q, k, v, causal=causal)
    _check_against_reference(out, lse, q, k, v, causal)
    assert torch.all(out[:, :, :, :][~torch.isfinite(lse).transpose(1, 2)] == 0)


@pytest.mark.parametrize("causal,variant,other", [(False, "2184", "9"), (True, "137352", "6280")])
def test_default_is_the_documented_variant(causal, variant, other, monkeypatch) -> None:
    """The bf16 d=128 default (attention_api.h: 2184 non-causal; causal 137352 = 136 with claimed
    tiles and the lazy O rescale since session 43) gives the pinned variant's output bit for bit,
    and another variant does not (so the comparison can fail): non-causal 9 (the other row-sum
    order), causal 6280 (the previous default: the same walk without the lazy rescale)."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    # 720 tiles on 132 SMs: the non-causal default splits its last partial round (bit 11).
    q, k, v = (torch.randn(2, 1800, 24, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
               for _ in range(3))
    out, lse = mkernel.attention(q, k, v, causal=causal)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", variant)
    pinned, pinned_lse = mkernel.attention(q, k, v, causal=causal)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", other)
    diff, diff_lse = mkernel.attention(q, k, v, causal=causal)
    assert torch.equal(out, pinned) and torch.equal(lse, pinned_lse)
    assert not (torch.equal(out, diff) and torch.equal(lse, diff_lse))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("split,base", [("1033", "9"), ("1160", "136")])
def test_split_variant_is_the_unsplit_bit_for_bit(split, base, causal, monkeypatch) -> None:
    """Variant bit 10 (ring11: masked and wholly visible KV blocks in two consumer loops) walks
    the same blocks in the same order with the same arithmetic: its output equals the unsplit
    variant's bit for bit — ragged tails, rows that see no key, several tiles per CTA with empty
    ones between (causal), bottom-right causal with s < s_kv."""
    for seed, (b, s, s_kv, h, h_kv) in enumerate([(2, 1800, 700, 24, 8), (3, 255, 257, 6, 3),
                                                  (1, 1000, 4097, 4, 2), (1, 4096, 4096, 8, 8)]):
        gen = torch.Generator(device="cuda").manual_seed(100 + seed)
        q, k, v = (torch.randn(b, n, hh, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
                   for n, hh in ((s, h), (s_kv, h_kv), (s_kv, h_kv)))
        monkeypatch.setenv("MKERNEL_ATTN_VARIANT", base)
        want, want_lse = mkernel.attention(q, k, v, causal=causal)
        monkeypatch.setenv("MKERNEL_ATTN_VARIANT", split)
        _poison_allocator()
        out, lse = mkernel.attention(q, k, v, causal=causal)
        assert torch.equal(out, want) and torch.equal(lse, want_lse), (b, s, s_kv, h, h_kv)


@pytest.mark.parametrize("b,s,s_kv,h,h_kv", [
    (2, 1800, 700, 24, 8),   # 720 tiles: 60 tail tiles x 2 pieces, ragged last KV block
    (1, 4100, 1000, 9, 3),   # 297 tiles: 33 x 4 pieces of 2 blocks; a 4-row tail tile
    (1, 1000, 4097, 17, 1),  # 136 tiles: 4 x 33 pieces of 1 block (the last one 1 key), MQA
    (1, 512, 512, 66, 66),   # 264 tiles = 2 x 132: no tail, nothing split
    (2, 700, 100, 24, 8),    # 1 KV block per tile: nothing to split
])
def test_split_tail_variant(b, s, s_kv, h, h_kv, monkeypatch) -> None:
    """Variant 2184 (136 + bit 11: the last, partial round of tiles split along the KV blocks,
    merged in fp32 by a second kernel) against the fp64 reference; the tiles that run whole give
    variant 136's output bit for bit, the merged ones (split_tail_plan mirrors the schedule)
    differ from it somewhere (so the split ran) and stay within 136's rounding of it; a causal
    call with the bit runs 136."""
    from .split_tail_plan import tail_tiles
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(s + s_kv + h)
    q, k, v = (torch.randn(b, n, hh, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
               for n, hh in ((s, h), (s_kv, h_kv), (s_kv, h_kv)))
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", "136")
    want, want_lse = mkernel.attention(q, k, v)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", "2184")
    _poison_allocator()
    out, lse = mkernel.attention(q, k, v)
    _check_against_reference(out, lse, q, k, v, False)
    merged = torch.zeros(b, s, h, dtype=torch.bool, device="cuda")
    for m, hh, bb in tail_tiles(b, s, s_kv, h, 128, sms):
        merged[bb, m * 128:(m + 1) * 128, hh] = True
    whole = ~merged
    assert torch.equal(out[whole], want[whole])
    assert torch.equal(lse.transpose(1, 2)[whole], want_lse.transpose(1, 2)[whole])
    if merged.any():
        assert not torch.equal(out[merged], want[merged]), "no merged row differs: did it split?"
        diff = (out[merged].double() - want[merged].double()).norm() / want[merged].double().norm()
        assert diff.item() < 1e-2
        assert torch.allclose(lse.transpose(1, 2)[merged], want_lse.transpose(1, 2)[merged],
                              rtol=1e-4, atol=1e-4)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", "136")
    want_c, want_c_lse = mkernel.attention(q, k, v, causal=True)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", "2184")
    out_c, lse_c = mkernel.attention(q, k, v, causal=True)
    assert torch.equal(out_c, want_c) and torch.equal(lse_c, want_c_lse)


def test_mainloop_variant_switch_reaches_the_kernel(monkeypatch) -> None:
    """An unbuilt variant number is refused by the dispatcher (so the switch does reach it),
    and calls the variants are not built for (fp16) ignore the switch."""
    q = torch.randn(1, 256, 2, 128, device="cuda", dtype=torch.bfloat16)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", "2")
    with pytest.raises(ValueError, match="variant"):
        mkernel.attention(q, q, q)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", "9")
    out, _ = mkernel.attention(q.half(), q.half(), q.half())
    ref, _ = attention_ref(q.half(), q.half(), q.half(), False)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.parametrize("d", [64, 128, 96])
@pytest.mark.parametrize("causal", [False, True])
def test_empty_batch_gives_empty_results(d, causal) -> None:
    """b = 0 on CUDA: empty out [0, s, h, d] and lse [0, h, s] and empty gradients, as the CPU
    reference gives (was an error naming a null pointer); an fp32 q is still refused."""
    q = torch.randn(0, 300, 8, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(0, 200, 2, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(0, 200, 2, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out, lse = mkernel.attention(q, k, v, causal=causal)
    assert out.shape == (0, 300, 8, d) and out.dtype == torch.bfloat16
    assert lse.shape == (0, 8, 300) and lse.dtype == torch.float32
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    with pytest.raises(RuntimeError, match="q must be"):  # the engine's dtype check, as for b > 0
        mkernel.attention(q.detach().float(), k.detach().float(), v.detach().float())
