// The fused kernel (FusedHooks) of coop_128x256_c2x1 with a 2-stage mainloop and a 96 KiB side
// staging buffer (fused19, opt-in MKERNEL_FUSED_RS_STAGES2=1; fused_dispatch.cu). At short K
// (gemm_rs / gemm_ar square: 4-8 k-blocks per tile) the 4-stage ring is mostly idle; its two
// freed stages (96 KiB) hold 6x the reduce rows in flight (kSideBufBytes 16 -> 96 KiB).
// FusedHooks is renamed in this TU so that no kernel or member symbol is shared with the
// 16 KiB instantiations (same struct name, other layout: an ODR clash the linker would merge).
#define MKERNEL_FUSED_SIDE_BUF_BYTES (96 * 1024)
#define FusedHooks FusedHooksS2
#include "../gemm/gemm_sm90.cuh"
#include "fused_hooks.cuh"

namespace mkernel::fused::detail {
cudaError_t run_fused_coop128x256cluster2x1s2_bf16(const gemm::Problem& p, const gemm::Launch& l,
                                                   const int* m_order, const FusedParams& hooks,
                                                   const char** reason) {
  return gemm::GemmSm90<gemm::ConfigId::kCoop128x256Cluster2x1, gemm::DType::kBF16, 2>::
      run_with_hooks<FusedHooksS2>(p, l, m_order, hooks, reason);
}
}  // namespace mkernel::fused::detail
