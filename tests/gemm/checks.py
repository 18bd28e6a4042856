"""Checks shared by the GEMM tests: a float64 reference, the norm check, a per-tile max-error
check bounded by torch's own low-precision error, and output poisoning that proves itself.

Why a per-tile check beside the norm check: ‖out − ref‖ / ‖ref‖ averages over the whole output,
so on a large output one tile that dropped a k-block (a wrong loop bound, a skipped stage) moves
it by less than the bf16 bound. The per-tile check compares every tile's largest error with the
largest error torch's own GEMM makes on the same tile in the same dtype, as FlashAttention's
tests bound their outputs by PyTorch's own low-precision error: a correct kernel rounds like
torch does; a tile missing a k-block is off by far more than a rounding.
"""

from __future__ import annotations

import pytest
import torch

# Tile of the per-tile check: no larger than the engine's smallest tile (64 rows) so a wrong
# engine tile is at least one whole check tile.
CHECK_TILE = (64, 64)
# How far above torch's own error (same product, same dtype, vs float64) a tile may be.
TORCH_ERR_FACTOR = 2.0


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64; fails on any non-finite value (an unwritten tile)."""
    out64, ref64 = out.double().cpu(), ref.double().cpu()
    assert torch.isfinite(out64).all(), "non-finite output (unwritten tile?)"
    return ((out64 - ref64).norm() / ref64.norm().clamp_min(1e-30)).item()


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b.T in float64 on the CPU (independent of the engine and of cuBLAS)."""
    return a.double().cpu() @ b.double().cpu().T


def tile_amax(x: torch.Tensor, tile: tuple[int, int] = CHECK_TILE) -> torch.Tensor:
    """[ceil(M/tm), ceil(N/tn)]: the largest |x| in each tile of a 2-D tensor (edge tiles ragged)."""
    tm, tn = tile
    m, n = x.shape
    pm, pn = -m % tm, -n % tn
    padded = torch.nn.functional.pad(x.abs(), (0, pn, 0, pm))
    return padded.view((m + pm) // tm, tm, (n + pn) // tn, tn).amax(dim=(1, 3))


def tile_errors(out: torch.Tensor, ref: torch.Tensor, lowp: torch.Tensor,
                tile: tuple[int, int] = CHECK_TILE, factor: float = TORCH_ERR_FACTOR):
    """Per tile: (our max error, its bound). The bound is `factor` x torch's max error on the
    tile plus one unit in the last place of the tile's largest reference value (the rounding a
    kernel that sums in another order may add), all against the float64 reference."""
    ref64 = ref.double().cpu()
    ours = tile_amax(out.double().cpu() - ref64, tile)
    torch_err = tile_amax(lowp.double().cpu() - ref64, tile)
    ulp = torch.finfo(out.dtype).eps * tile_amax(ref64, tile)
    return ours, factor * torch_err + ulp


def assert_tiles_close(out: torch.Tensor, ref: torch.Tensor, lowp: torch.Tensor, *,
                       tile: tuple[int, int] = CHECK_TILE, factor: float = TORCH_ERR_FACTOR,
                       what: str = "") -> None:
    """Every tile of `out` within `factor` x torch's own error (`lowp`: torch's product in
    out's dtype) of the float64 reference `ref`; the message names the worst tile."""
    assert out.shape == ref.shape == lowp.shape, (out.shape, ref.shape, lowp.shape)
    if out.numel() == 0:
        return
    assert torch.isfinite(out.double()).all(), f"{what}non-finite output (unwritten tile?)"
    ours, bound = tile_errors(out, ref, lowp, tile, factor)
    excess = ours - bound
    if (excess > 0).any():
        flat = int(excess.argmax())
        i, j = divmod(flat, excess.shape[1])
        bad = int((excess > 0).sum())
        pytest.fail(f"{what}{bad} of {excess.numel()} tiles above the per-tile bound; worst: rows "
                    f"{i * tile[0]}:{min((i + 1) * tile[0], out.shape[0])}, cols "
                    f"{j * tile[1]}:{min((j + 1) * tile[1], out.shape[1])}: max error "
                    f"{ours[i, j]:.4g} > {bound[i, j]:.4g} ({factor:g} x torch's {out.dtype} "
                    "error on the tile + 1 ulp of its largest value)")


def check_gemm(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, tol: float = 1e-2,
               what: str = "") -> None:
    """out ≈ a @ b.T: the norm check (relative error < tol) and the per-tile max-error check
    against torch's own GEMM in out's dtype on out's device."""
    ref = reference(a, b)
    err = rel_err(out, ref)
    assert err < tol, f"{what}relative error {err:.3g} >= {tol}"
    dev = out.device
    lowp = torch.matmul(a.to(dev, out.dtype), b.to(dev, out.dtype).T)
    assert_tiles_close(out, ref, lowp, what=what)


def poison_next_allocation(shape, dtype, device) -> int:
    """Fill a block of exactly the output's size with NaN and free it: the caching allocator
    hands the same block to the op's next allocation of that size. Returns its address; pass it
    to assert_poisoned (or use poisoned_call) to prove the op's output is that block."""
    t = torch.full(shape, float("nan"), dtype=dtype, device=device)
    ptr = t.data_ptr()
    del t
    return ptr


def assert_poisoned(out: torch.Tensor, ptr: int) -> None:
    """The op wrote into the poisoned block: an unwritten element would still be NaN."""
    assert out.data_ptr() == ptr, (
        f"the output ({out.data_ptr():#x}) is not the poisoned block ({ptr:#x}): the poisoning "
        "proves nothing (another allocation of the op took the block first?)")


def poisoned_call(fn, shape, dtype, device="cuda") -> torch.Tensor:
    """fn() with its output's memory poisoned first, proven reused (data_ptr) and synchronized."""
    ptr = poison_next_allocation(shape, dtype, device)
    out = fn()
    assert_poisoned(out, ptr)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return out


def drop_k_block(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, rows: slice, cols: slice,
                 k_block: int, block_k: int = 64) -> torch.Tensor:
    """A copy of `out` whose tile (rows, cols) was computed without k-block `k_block`: the
    fault the per-tile check must catch (tests of the check itself)."""
    bad = out.clone()
    keep = torch.ones(a.shape[1], dtype=torch.bool)
    keep[k_block * block_k:(k_block + 1) * block_k] = False
    tile = a[rows][:, keep].double() @ b[cols][:, keep].double().T
    bad[rows, cols] = tile.to(out.dtype)
    return bad
