"""Python mirrors of the fused ops' compiled-in defaults that benchmarks and rank tests need
before any call (csrc/fused_common.cpp; tests/core/test_fused_defaults.py checks they match)."""

from __future__ import annotations

# fused_common.cpp kCoGridAtShare32: the co-resident grid at a 32-SM MPS share (W = 4 on an
# H200), 0 for the 3/4 rule.
CO_GRID_AT_SHARE_32 = 28


def co_resident_grid(share: int) -> int:
    """fused_common.cpp co_resident_grid for a rank of `share` SMs under an MPS SM limit (the
    grid the ranks' 2-CTA-cluster fused grids all run at once), without MKERNEL_FUSED_CO_GRID:
    the measured grid where there is one, else 3/4 of the share in whole clusters (0 if none)."""
    if CO_GRID_AT_SHARE_32 > 0 and share == 32:
        return CO_GRID_AT_SHARE_32
    g = share * 3 // 4 // 2 * 2
    return g if 2 <= g < share else 0


def co_resident_grid_c1(share: int) -> int:
    """fused_common.cpp co_resident_grid_c1 (fused18, MKERNEL_FUSED_C1X1=1) for a rank of `share`
    SMs under an MPS SM limit, without MKERNEL_FUSED_C1X1_GRID: the cluster-free fused config's
    co-resident grid, 126/132 of the share (s8run2: two 50 % clients' 1-CTA grids reach 126 SMs)."""
    g = share * 126 // 132
    return g if 1 <= g < share else 0


# csrc/fused_ag_route.h kPeerTmaDefault: ag_gemm's route when MKERNEL_FUSED_AG_PEER_TMA is unset
# ("auto": the copy-role and peer-TMA kernels both measured per shape by the op's first call, the
# group keeps the faster; "0" copy only; "1" peer TMA wherever it fits). fused16.
AG_PEER_TMA_DEFAULT = "auto"

# csrc/fused_ag_route.h kCopyEngineDefault: ag_gemm's copy-engine route when
# MKERNEL_FUSED_AG_COPY_ENGINE is unset ("0": off until a GPU run has checked and timed it;
# session 27).
AG_COPY_ENGINE_DEFAULT = "0"
