// Compile-only guard (make cuda-check): a wgmma kernel that pushes FIFO commands and waits on
// arrival flags with net_ops.cuh must not make ptxas serialize wgmma (C7510: a call, printf or
// assert in the kernel's hot path). Not built into the extension, never launched.
#include <cuda_bf16.h>

#include "kernels/comm/net_ops.cuh"

namespace mkernel::comm::checks {

__device__ __forceinline__ void wgmma_m64n8k16(float (&d)[4], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(desc_a), "l"(desc_b));
}

__global__ void __launch_bounds__(128, 1) net_ops_wgmma_check(GroupDevice g, float* out, int tiles, int peer) {
  __shared__ alignas(128) __nv_bfloat16 a[64 * 16];
  __shared__ alignas(128) __nv_bfloat16 b[8 * 16];
  for (int i = threadIdx.x; i < 64 * 16; i += blockDim.x) a[i] = __float2bfloat16(1.0f);
  for (int i = threadIdx.x; i < 8 * 16; i += blockDim.x) b[i] = __float2bfloat16(1.0f);
  __syncthreads();
  const uint64_t da = (static_cast<uint64_t>(__cvta_generic_to_shared(a)) >> 4) & 0x3fff;
  const uint64_t db = (static_cast<uint64_t>(__cvta_generic_to_shared(b)) >> 4) & 0x3fff;
  NetCursor cur;
  const uint64_t e = op_begin(g);
  float acc[4] = {0, 0, 0, 0};
  for (int t = 0; t < tiles; ++t) {
    // Hook (a): this tile's inputs arrived from the other node.
    if (threadIdx.x == 0) net_wait(g, peer, FlagSlot::kOpSlotBase + t, e, WaitSite{kOpAgGemm});
    __syncthreads();
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    wgmma_m64n8k16(acc, da, db);
    wgmma_m64n8k16(acc, da, db);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    // Epilogue: the tile into the send area, then one lane sends it.
    reinterpret_cast<float4*>(g.net.send_area)[t * 128 + threadIdx.x] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    __syncthreads();
    if (threadIdx.x == 0) {
      net_put_signal(g, cur, peer, t * 2048ull, t * 2048ull, 2048, FlagSlot::kOpSlotBase + t, e, kOpAgGemm);
    }
  }
  out[threadIdx.x] = acc[0] + acc[1] + acc[2] + acc[3];
}

}  // namespace mkernel::comm::checks
