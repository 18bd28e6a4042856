// Runtime (config, dtype) -> the fused kernel's instantiation (fused_gemm_*.cu), and the shape
// model that picks the config.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fused_api.h"

namespace mkernel::fused {
namespace detail {
#define MKERNEL_FUSED_DECL(SUFFIX)                                                            \
  cudaError_t run_fused_##SUFFIX(const gemm::Problem&, const gemm::Launch&, const int*,      \
                                 const FusedParams&, const char**);
MKERNEL_FUSED_DECL(coop128x256cluster2x1_bf16)
MKERNEL_FUSED_DECL(coop128x256cluster2x1_fp16)
MKERNEL_FUSED_DECL(coop128x128cluster2x1_bf16)
MKERNEL_FUSED_DECL(coop128x128cluster2x1_fp16)
MKERNEL_FUSED_DECL(coop256x128cluster2x1_bf16)
MKERNEL_FUSED_DECL(coop256x128cluster2x1_fp16)
MKERNEL_FUSED_DECL(coop128x256cluster1x1_bf16)
MKERNEL_FUSED_DECL(coop128x256cluster1x1_fp16)
MKERNEL_FUSED_DECL(coop128x256cluster2x1s2_bf16)  // fused19: 2 stages, 96 KiB side buffer
MKERNEL_FUSED_DECL(coop128x256cluster2x1s2_fp16)
#undef MKERNEL_FUSED_DECL
}  // namespace detail

bool fused_supported(gemm::ConfigId id) {
  return id == gemm::ConfigId::kCoop128x256Cluster2x1 ||
         id == gemm::ConfigId::kCoop128x128Cluster2x1 ||
         id == gemm::ConfigId::kCoop256x128Cluster2x1 ||
         id == gemm::ConfigId::kCoop128x256Cluster1x1;  // MKERNEL_FUSED_C1X1=1 (fused18)
}

// 128x256 tiles when they still give every SM a tile (fewer loads of B per flop); 128x128 when
// the wider tiles would leave SMs idle (small M or N under an MPS share).
gemm::ConfigId fused_config(int m, int n, int /*k*/, int sm_count) {
  const long tiles_wide = static_cast<long>((m + 127) / 128) * ((n + 255) / 256);
  return tiles_wide >= sm_count ? gemm::ConfigId::kCoop128x256Cluster2x1
                                : gemm::ConfigId::kCoop128x128Cluster2x1;
}

// 256x128 (the two consumer warpgroups stacked along M) reads each k-block's B once per
// warpgroup where 128x256 reads it twice: less shared-memory traffic per flop, which the
// 128x256 tile saturates. It is NOT listed yet: device run 3 measured no gain from it, and its
// outputs have not been checked on the GPU on their own (MKERNEL_FUSED_CONFIG=coop_256x128_c2x1
// runs it for that check); kListTall turns it on once they have.
constexpr bool kListTall = false;
int fused_configs(int m, int n, int k, int sm_count, gemm::ConfigId* out) {
  const long tall = static_cast<long>((m + 255) / 256) * ((n + 127) / 128);
  int count = 0;
  out[count++] = fused_config(m, n, k, sm_count);
  if (kListTall && out[0] == gemm::ConfigId::kCoop128x256Cluster2x1 && tall >= sm_count) {
    out[count++] = gemm::ConfigId::kCoop256x128Cluster2x1;
  }
  return count;
}

cudaError_t run_fused(const gemm::Problem& p, gemm::ConfigId id, const gemm::Launch& l,
                      const int* m_order, const FusedParams& hooks, const char** reason) {
  const bool bf16 = p.dtype == gemm::DType::kBF16;
  // MKERNEL_FUSED_RS_STAGES2=1 (fused19, opt-in, measuring): gemm_rs / gemm_ar on
  // coop_128x256_c2x1 at short K (<= 16 k-blocks of 64) run the 2-stage instantiation, whose
  // side warps reduce whole tiles' slab runs through a 96 KiB buffer (kSidePipe: two 48 KiB
  // halves, one in flight while the other is summed) instead of one 16 KiB slab at a time. Same
  // tile, k order and rank-order sums: the same bits as the default kernel.
  // Read per call (as the other MKERNEL_FUSED_* knobs: the bench flips it between calls).
  const char* s2 = std::getenv("MKERNEL_FUSED_RS_STAGES2");
  const bool stages2 = s2 != nullptr && std::strcmp(s2, "1") == 0;
  if (stages2 && id == gemm::ConfigId::kCoop128x256Cluster2x1 && hooks.mode == kModeReduce &&
      p.k <= 16 * 64 &&
      (hooks.side_mode == kSideStaged || hooks.side_mode == kSidePipe)) {
    FusedParams h = hooks;
    h.side_mode = kSidePipe;
    static std::atomic<bool> said{false};  // once per process: tests and benches look for it
    if (!said.exchange(true)) {
      std::fprintf(stderr, "mkernel: fused runs the 2-stage kernel coop_128x256_c2x1_s2 "
                   "(MKERNEL_FUSED_RS_STAGES2=1, side pipe, 96 KiB)\n");
    }
    return bf16 ? detail::run_fused_coop128x256cluster2x1s2_bf16(p, l, m_order, h, reason)
                : detail::run_fused_coop128x256cluster2x1s2_fp16(p, l, m_order, h, reason);
  }
  switch (id) {
    case gemm::ConfigId::kCoop128x256Cluster2x1:
      return bf16 ? detail::run_fused_coop128x256cluster2x1_bf16(p, l, m_order, hooks, reason)
                  : detail::run_fused_coop128x256cluster2x1_fp16(p, l, m_order, hooks, reason);
    case gemm::ConfigId::kCoop128x128Cluster2x1:
      return bf16 ? detail::run_fused_coop128x128cluster2x1_bf16(p, l, m_order, hooks, reason)
                  : detail::run_fused_coop128x128cluster2x1_fp16(p, l, m_order, hooks, reason);
    case gemm::ConfigId::kCoop256x128Cluster2x1:
      return bf16 ? detail::run_fused_coop256x128cluster2x1_bf16(p, l, m_order, hooks, reason)
                  : detail::run_fused_coop256x128cluster2x1_fp16(p, l, m_order, hooks, reason);
    case gemm::ConfigId::kCoop128x256Cluster1x1:
      return bf16 ? detail::run_fused_coop128x256cluster1x1_bf16(p, l, m_order, hooks, reason)
                  : detail::run_fused_coop128x256cluster1x1_fp16(p, l, m_order, hooks, reason);
    default:
      if (reason) *reason = "no fused kernel for this tile config";
      return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::fused
