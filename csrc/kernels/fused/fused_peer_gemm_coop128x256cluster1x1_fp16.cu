// The fused ag_gemm kernel with per-source TMA descriptors (FusedPeerTmaHooks,
// MKERNEL_FUSED_AG_PEER_TMA) for one (config, dtype); the dispatcher is fused_peer_dispatch.cu.
#include "../gemm/gemm_sm90.cuh"
#include "fused_peer_tma.cuh"

namespace mkernel::fused::detail {
cudaError_t run_fused_peer_coop128x256cluster1x1_fp16(const gemm::Problem& p, const gemm::Launch& l,
                                     const int* m_order, const FusedParams& hooks,
                                     const void* const* a_src, int sources, int rows,
                                     const char** reason) {
  return gemm::GemmSm90<gemm::ConfigId::kCoop128x256Cluster1x1, gemm::DType::kFP16>::run_with_peer_a<
      FusedPeerTmaHooks>(p, l, m_order, hooks, a_src, sources, rows, reason);
}
}  // namespace mkernel::fused::detail
