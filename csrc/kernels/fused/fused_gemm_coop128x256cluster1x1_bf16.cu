// The fused kernel (FusedHooks) for one (config, dtype); the dispatcher is fused_dispatch.cu.
#include "../gemm/gemm_sm90.cuh"
#include "fused_hooks.cuh"

namespace mkernel::fused::detail {
cudaError_t run_fused_coop128x256cluster1x1_bf16(const gemm::Problem& p, const gemm::Launch& l, const int* m_order,
                                 const FusedParams& hooks, const char** reason) {
  return gemm::GemmSm90<gemm::ConfigId::kCoop128x256Cluster1x1, gemm::DType::kBF16>::run_with_hooks<FusedHooks>(
      p, l, m_order, hooks, reason);
}
}  // namespace mkernel::fused::detail
