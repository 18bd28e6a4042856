// Runtime (config, dtype) -> the per-source-A fused kernel (fused_peer_gemm_*.cu,
// MKERNEL_FUSED_AG_PEER_TMA; fused_peer_tma.cuh).
#include "fused_api.h"

namespace mkernel::fused {
namespace detail {
#define MKERNEL_FUSED_PEER_DECL(SUFFIX)                                                        \
  cudaError_t run_fused_peer_##SUFFIX(const gemm::Problem&, const gemm::Launch&, const int*,  \
                                      const FusedParams&, const void* const*, int, int,       \
                                      const char**);
MKERNEL_FUSED_PEER_DECL(coop128x256cluster2x1_bf16)
MKERNEL_FUSED_PEER_DECL(coop128x256cluster2x1_fp16)
MKERNEL_FUSED_PEER_DECL(coop128x128cluster2x1_bf16)
MKERNEL_FUSED_PEER_DECL(coop128x128cluster2x1_fp16)
MKERNEL_FUSED_PEER_DECL(coop128x256cluster1x1_bf16)
MKERNEL_FUSED_PEER_DECL(coop128x256cluster1x1_fp16)
#undef MKERNEL_FUSED_PEER_DECL
}  // namespace detail

int fused_peer_block_m(gemm::ConfigId id) {
  return id == gemm::ConfigId::kCoop128x256Cluster2x1 ||
                 id == gemm::ConfigId::kCoop128x128Cluster2x1 ||
                 id == gemm::ConfigId::kCoop128x256Cluster1x1
             ? 128
             : 0;
}

cudaError_t run_fused_peer_a(const gemm::Problem& p, gemm::ConfigId id, const gemm::Launch& l,
                             const int* m_order, const FusedParams& hooks,
                             const void* const* a_src, int sources, int rows_per_source,
                             const char** reason) {
  const bool bf16 = p.dtype == gemm::DType::kBF16;
  switch (id) {
    case gemm::ConfigId::kCoop128x256Cluster2x1:
      return bf16 ? detail::run_fused_peer_coop128x256cluster2x1_bf16(
                        p, l, m_order, hooks, a_src, sources, rows_per_source, reason)
                  : detail::run_fused_peer_coop128x256cluster2x1_fp16(
                        p, l, m_order, hooks, a_src, sources, rows_per_source, reason);
    case gemm::ConfigId::kCoop128x128Cluster2x1:
      return bf16 ? detail::run_fused_peer_coop128x128cluster2x1_bf16(
                        p, l, m_order, hooks, a_src, sources, rows_per_source, reason)
                  : detail::run_fused_peer_coop128x128cluster2x1_fp16(
                        p, l, m_order, hooks, a_src, sources, rows_per_source, reason);
    case gemm::ConfigId::kCoop128x256Cluster1x1:  // MKERNEL_FUSED_C1X1=1 (fused18)
      return bf16 ? detail::run_fused_peer_coop128x256cluster1x1_bf16(
                        p, l, m_order, hooks, a_src, sources, rows_per_source, reason)
                  : detail::run_fused_peer_coop128x256cluster1x1_fp16(
                        p, l, m_order, hooks, a_src, sources, rows_per_source, reason);
    default:
      if (reason) *reason = "no per-source-A fused kernel for this tile config";
      return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::fused
