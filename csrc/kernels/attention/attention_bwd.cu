// The native backward's host entry points (attention_bwd_api.h): checks, then the runtime ->
// template switch over (dtype, head dim, causal) and the three launches. The wgmma kernels'
// launches are instantiated in attention_bwd_sm90_{bf16,fp16}{,_ring}.cu (their compile time,
// ~40 s each, then runs in parallel with this file's).
#include <cstdint>
#include <type_traits>

#include "attention_bwd_kernel.cuh"
#include "attention_bwd_sm90_launch.h"

namespace mkernel::attention {

namespace {

// The mma.sync kernel: 64 query rows x 64 keys per step, 8 warps (4 x 2 over every GEMM's output):
// dK + dV take 64 fp32 registers per thread at d = 128, S and dP 32, dQ 32 (transient).
constexpr int kBwdBlockM = 64;
constexpr int kBwdBlockN = 64;
constexpr int kBwdWarps = 8;

// One CTA per (block of T::kBlockN keys, kv head, batch); heavy causal blocks (low keys, seen by
// the most query blocks) first, in blockIdx.x order.
template <class T>
cudaError_t launch_main(void (*kernel)(BwdProblem), const BwdProblem& p, cudaStream_t stream) {
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid((p.seq_kv + T::kBlockN - 1) / T::kBlockN, p.heads_kv, p.kv_batch);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <class Element, int kHeadDim, bool kCausal>
cudaError_t launch_backward(const BwdProblem& p, cudaStream_t stream) {
  const int64_t pre_rows = int64_t(p.batch) * bwd::preprocess_seq(p) * p.heads;
  bwd::attention_bwd_preprocess<Element, kHeadDim>
      <<<static_cast<unsigned>((pre_rows + 7) / 8), 256, 0, stream>>>(p);  // a warp per row
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;

  const bool ring = p.ring_world > 0;
  // (kBulkDq, kWarpSpecialized, kDqWarp) of each wgmma kernel, then the ring mode's or not.
  auto sm90 = [&](auto bulk, auto ws, auto dq_warp) {
    return ring ? bwd::launch_main_sm90<Element, kHeadDim, kCausal, bulk(), ws(), dq_warp(), true>(
                      p, stream)
                : bwd::launch_main_sm90<Element, kHeadDim, kCausal, bulk(), ws(), dq_warp(), false>(
                      p, stream);
  };
  using No = std::false_type;
  using Yes = std::true_type;
  if (p.kernel == BwdKernel::kWgmma) {
    err = sm90(No{}, No{}, No{});
  } else if (p.kernel == BwdKernel::kWgmmaBulkDq) {
    err = sm90(Yes{}, No{}, No{});
  } else if (p.kernel == BwdKernel::kWgmmaWs) {
    err = sm90(Yes{}, Yes{}, No{});
  } else if (p.kernel == BwdKernel::kWgmmaWsDqWarp) {
    err = sm90(Yes{}, Yes{}, Yes{});
  } else {
    using T = bwd::BwdTraits<Element, kHeadDim, kBwdBlockM, kBwdBlockN, kBwdWarps, kCausal>;
    err = launch_main<T>(bwd::attention_bwd_main<T>, p, stream);
  }
  if (err != cudaSuccess) return err;

  const int64_t rows = int64_t(p.batch) * p.seq_q * p.heads;
  bwd::attention_bwd_convert_dq<Element, kHeadDim>
      <<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

template <class Element, int kHeadDim>
cudaError_t launch_causal(const BwdProblem& p, cudaStream_t stream) {
  return p.causal ? launch_backward<Element, kHeadDim, true>(p, stream)
                  : launch_backward<Element, kHeadDim, false>(p, stream);
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

const char* can_implement_backward(const BwdProblem& p) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kFP16) return "dtype must be bf16 or fp16";
  if (p.head_dim != 64 && p.head_dim != 128) return "head_dim must be 64 or 128";
  if (p.batch < 1 || p.seq_q < 1 || p.seq_kv < 1 || p.heads < 1 || p.heads_kv < 1)
    return "batch, seq_q, seq_kv, heads and heads_kv must be >= 1";
  if (p.heads % p.heads_kv != 0) return "heads must be a multiple of heads_kv";
  if (p.kv_batch > 65535 || p.heads_kv > 65535)
    return "k's batch and heads_kv must be <= 65535 (grid)";
  if (p.ring_world == 0 && p.kv_batch != p.batch) return "k and q must have the same batch";
  if (p.ring_world > 0) {
    if (p.ring_rank < 0 || p.ring_rank >= p.ring_world)
      return "ring_rank must be in [0, ring_world)";
    if (p.kv_batch != p.ring_world * p.batch)
      return "ring mode: k and v must hold ring_world x q's batch (all-gathered shards)";
    if (p.seq_kv != p.seq_q) return "ring mode: k's shard must have q's length";
    if (p.causal && p.seq_q % 2 != 0) return "ring mode, causal: the shard length must be even";
    if (p.kernel == BwdKernel::kMmaSync) return "ring mode: the wgmma kernels only";
  }
  if (p.ring_kv_ready != nullptr) {
    if (p.ring_world == 0 || p.kernel != BwdKernel::kWgmmaWsDqWarp)
      return "ring_kv_ready (K/V on arrival): the ring mode of the kWgmmaWsDqWarp kernel only";
    if (p.ring_kv_epoch == nullptr || p.ring_chunk_rows < 1 || p.ring_chunks < 1 ||
        (long long)p.ring_chunk_rows * p.ring_chunks < p.seq_kv)
      return "ring_kv_ready: ring_kv_epoch and ring_chunks x ring_chunk_rows >= s needed";
  }
  if (p.ring_dk_dst[0] != nullptr) {
    if (p.ring_world == 0 || p.kernel != BwdKernel::kWgmmaWsDqWarp || p.ring_kv_epoch == nullptr)
      return "ring_dk_dst (dK/dV travelling): the ring mode of the kWgmmaWsDqWarp kernel, with "
             "ring_kv_epoch";
    if (p.ring_world > kRingTravelMaxWorld) return "ring_dk_dst: ring_world must be <= 8";
    for (int r = 0; r < p.ring_world; ++r) {
      if (p.ring_dk_dst[r] == nullptr || !aligned16(p.ring_dk_dst[r]) ||
          p.ring_dkv_flag[r] == nullptr)
        return "ring_dk_dst / ring_dkv_flag: one 16-byte aligned slot and flag array per rank";
    }
    if (p.ring_dv_offset <
            ring_travel_offset(p.ring_world, p.batch, p.seq_kv, p.heads_kv, p.head_dim) ||
        p.ring_dv_offset % 4 != 0)
      return "ring_dv_offset: past every writer's dK slot, a multiple of 4 floats";
  }
  if (p.kernel != BwdKernel::kWgmma && p.kernel != BwdKernel::kMmaSync &&
      p.kernel != BwdKernel::kWgmmaBulkDq && p.kernel != BwdKernel::kWgmmaWs &&
      p.kernel != BwdKernel::kWgmmaWsDqWarp)
    return "unknown kernel";
  const bool ws = bwd_kernel_warp_specialized(p.kernel);
  if (ws != (p.lse_log2_pad != nullptr && p.delta_pad != nullptr))
    return "lse_log2_pad and delta_pad: given exactly for the warp-specialized kernels";
  if (ws && (!aligned16(p.lse_log2_pad) || !aligned16(p.delta_pad)))
    return "lse_log2_pad and delta_pad must be 16-byte aligned";
  if (p.tile_sections < 0 || (p.tile_sections > 0 && p.kernel != BwdKernel::kWgmmaWsDqWarp))
    return "tile_sections: 0, or > 0 with the kWgmmaWsDqWarp kernel only";
  if (p.tile_sections > 0 &&
      (long long)((p.seq_kv + 127) / 128) * p.heads_kv * p.kv_batch > 0x7fffffffLL)
    return "tile_sections: the 1-D grid must hold < 2^31 CTAs";
  const void* ptrs[] = {p.q, p.k, p.v, p.out, p.dout, p.lse, p.dq, p.dq_accum, p.delta};
  for (const void* ptr : ptrs)
    if (ptr == nullptr || !aligned16(ptr)) return "every tensor must be non-null and 16-byte aligned";
  // dK/dV travelling: the partials go to the receive areas, not to dk / dv.
  if (p.ring_dk_dst[0] == nullptr &&
      (p.dk == nullptr || p.dv == nullptr || !aligned16(p.dk) || !aligned16(p.dv)))
    return "dk and dv must be non-null and 16-byte aligned";
  return nullptr;
}

cudaError_t run_backward(const BwdProblem& p, cudaStream_t stream, const char** reason) {
  const char* why = can_implement_backward(p);
  if (reason != nullptr) *reason = why;
  if (why != nullptr) return cudaErrorInvalidValue;
  const bool bf16 = p.dtype == DType::kBF16;
  if (p.head_dim == 128)
    return bf16 ? launch_causal<cutlass::bfloat16_t, 128>(p, stream)
                : launch_causal<cutlass::half_t, 128>(p, stream);
  return bf16 ? launch_causal<cutlass::bfloat16_t, 64>(p, stream)
              : launch_causal<cutlass::half_t, 64>(p, stream);
}

}  // namespace mkernel::attention
