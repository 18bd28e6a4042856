// Host side of one kernel instantiation: Arguments -> Params (TMA descriptors, scheduler,
// hooks), grid from the SM count, launch. Included by the generated instantiations only.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "attention_api.h"
#include "attention_kernel_sm90.cuh"

namespace mkernel::attention {

template <class Element, int kHeadDim, int kBlockM, int kBlockN, bool kCausal, class Hooks>
cudaError_t launch_attention(const Problem& pr, const Launch& l,
                             typename Hooks::Params const& hooks) {
  using Traits = AttnTraits<Element, kHeadDim, kBlockN, kCausal, kBlockM / 64>;
  static_assert(Traits::kBlockM == kBlockM, "kBlockM: 64 rows per consumer warpgroup");
  using Kernel = AttentionFwdSm90<Traits, Hooks>;
  using Mainloop = typename Kernel::Mainloop;
  using Epilogue = typename Kernel::Epilogue;
  using Scheduler = typename Kernel::Scheduler;

  typename Kernel::Params params;
  params.mainloop = Mainloop::to_underlying_arguments(typename Mainloop::Arguments{
      static_cast<const Element*>(pr.q), static_cast<const Element*>(pr.k),
      static_cast<const Element*>(pr.v), pr.batch, pr.seq_q, pr.seq_kv, pr.heads, pr.heads_kv,
      pr.softmax_scale, pr.q_batch_stride, pr.kv_batch_stride, pr.causal ? pr.zz_world : 0,
      pr.zz_rank, pr.zz_chunk});
  params.epilogue = Epilogue::to_underlying_arguments(typename Epilogue::Arguments{
      static_cast<Element*>(pr.out), pr.lse, pr.batch, pr.seq_q, pr.heads, pr.out_batch_stride,
      pr.lse_head_stride});
  const int m_blocks = (pr.seq_q + Traits::kBlockM - 1) / Traits::kBlockM;
  params.scheduler = Scheduler::make_params(
      m_blocks, pr.heads, pr.batch,
      2ll * pr.seq_kv * kHeadDim * static_cast<long long>(sizeof(Element)));
  // Zigzag ring mode (hooked causal kernels): CTAs take whole pairs of tiles (get_zigzag).
  params.scheduler.zz_pairs = Hooks::kZigzag && kCausal && pr.zz_world > 0 && m_blocks % 2 == 0;
  params.hooks = hooks;

  int sm_count = l.sm_count;
  if (sm_count <= 0) {
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess) return e;
    e = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return e;
  }
  const int grid = Scheduler::grid_size(params.scheduler, sm_count);
  if (grid <= 0) return cudaSuccess;

  auto kernel = attention_fwd_kernel<Kernel>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Kernel::kSmemBytes);
  if (e != cudaSuccess) return e;
  kernel<<<grid, Kernel::kThreads, Kernel::kSmemBytes, l.stream>>>(params);
  return cudaGetLastError();
}

// The two hook policies of one (dtype, head dim, tile, causal) case.
template <class Element, int kHeadDim, int kBlockM, int kBlockN, bool kCausal>
cudaError_t launch_case(const Problem& pr, const Launch& l, const HookArgs* h) {
  if (h == nullptr || h->kv_ready == nullptr) {
    return launch_attention<Element, kHeadDim, kBlockM, kBlockN, kCausal, NoHooks>(pr, l, NoHooks::Params{});
  }
  KvFlagHooks::Params hp;
  hp.kv_ready = h->kv_ready;
  hp.blocks_per_flag = h->blocks_per_flag;
  hp.flag_head_stride = h->flag_head_stride >= 0 ? h->flag_head_stride : h->flags_per_head;
  hp.flag_batch_stride =
      h->flag_batch_stride >= 0 ? h->flag_batch_stride : pr.heads_kv * h->flags_per_head;
  hp.kv_ready_value = h->kv_ready_value;
  hp.kv_ready_epoch = h->kv_ready_epoch;
  hp.kv_ready_epoch_scale = h->kv_ready_epoch_scale;
  hp.timeout_ns = static_cast<uint64_t>(h->timeout_s * 1e9);
  hp.diag = static_cast<comm::WaitDiagnostic*>(h->diag);
  hp.rank = h->rank;
  hp.group = h->group;
  hp.peer = h->peer;
  return launch_attention<Element, kHeadDim, kBlockM, kBlockN, kCausal, KvFlagHooks>(pr, l, hp);
}

}  // namespace mkernel::attention
