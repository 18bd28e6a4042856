// The MoE fused dispatch's packed GEMM (MoeFusedHooks) for one dtype; the host side is
// moe_fused.cu.
#include "../gemm/gemm_sm90.cuh"
#include "moe_fused_hooks.cuh"

namespace mkernel::moe_fused::detail {
using GemmFP16 = gemm::GemmSm90<gemm::ConfigId::kPing128x128Cluster1x2, gemm::DType::kFP16>;
cudaError_t run_fp16(const gemm::Problem& p, const gemm::Launch& l, const MoeFusedParams& hooks,
                     const char** reason) {
  return GemmFP16::run_packed_with_hooks<MoeFusedHooks>(p, l, hooks, reason);
}
int grid_ctas_fp16(const gemm::Launch& l) {
  return GemmFP16::packed_grid_ctas_with_hooks<MoeFusedHooks>(l);
}
}  // namespace mkernel::moe_fused::detail
