// Host side of the MoE fused dispatch + grouped GEMM (moe_fused_api.h): the dtype dispatch
// and the flag room it needs; the kernels are moe_fused_gemm_{bf16,fp16}.cu.
#include "moe_fused_api.h"

namespace mkernel::moe_fused {
namespace detail {
cudaError_t run_bf16(const gemm::Problem&, const gemm::Launch&, const MoeFusedParams&,
                     const char**);
cudaError_t run_fp16(const gemm::Problem&, const gemm::Launch&, const MoeFusedParams&,
                     const char**);
int grid_ctas_bf16(const gemm::Launch&);
int grid_ctas_fp16(const gemm::Launch&);
}  // namespace detail

int grid_ctas(gemm::DType dtype, const gemm::Launch& l) {
  return dtype == gemm::DType::kBF16 ? detail::grid_ctas_bf16(l) : detail::grid_ctas_fp16(l);
}

cudaError_t run(const gemm::Problem& p, const gemm::Launch& l, const MoeFusedParams& hooks,
                const char** reason) {
  if (p.group_begin == nullptr || p.group_b_head != hooks.e_local || p.batches != hooks.e_local ||
      p.groups_per_b != 2 || hooks.recv_x != p.a || hooks.group.world > 32 ||
      hooks.row_bytes != static_cast<int64_t>(p.k) * 2) {
    if (reason) *reason = "moe_fused::run: the problem is not the fused dispatch's 3 E_l groups";
    return cudaErrorInvalidValue;
  }
  return p.dtype == gemm::DType::kBF16 ? detail::run_bf16(p, l, hooks, reason)
                                       : detail::run_fp16(p, l, hooks, reason);
}

}  // namespace mkernel::moe_fused
