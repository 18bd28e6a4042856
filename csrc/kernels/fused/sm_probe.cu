// The SM-placement probe (sm_probe_api.h): where and when MPS places the CTAs of clients that
// launch at the same time. A measurement kernel, not an op: thread 0 of each CTA stamps its
// arrival, holds the SM until a fixed time (a timed hold, bounded by kProbeMaxHoldNs: it waits
// for no other agent), stamps its leaving; the CTA's other threads and its shared memory only
// occupy the SM the way a fused kernel's CTA does.
#include <mkernel/fifo.h>

#include "sm_probe_api.h"

namespace mkernel::fused {
namespace {

__global__ void __launch_bounds__(kProbeThreads, 1)
    sm_probe_kernel(uint64_t start_ns, uint64_t hold_ns, uint64_t* out) {
  extern __shared__ uint8_t held[];
  if (threadIdx.x == 0) {
    const uint64_t arrive = mk_fifo_globaltimer();
    uint32_t sm, nsm, cluster, rank;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    asm volatile("mov.u32 %0, %%nsmid;" : "=r"(nsm));
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cluster));
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    uint64_t from = start_ns > arrive ? start_ns : arrive;
    if (from - arrive > kProbeMaxHoldNs) from = arrive + kProbeMaxHoldNs;
    const uint64_t until = from + (hold_ns < kProbeMaxHoldNs ? hold_ns : kProbeMaxHoldNs);
    uint64_t now = arrive;
    while (now < until) {
      __nanosleep(256);
      now = mk_fifo_globaltimer();
    }
    held[0] = static_cast<uint8_t>(sm);
    uint64_t* rec = out + static_cast<uint64_t>(blockIdx.x) * kProbeWords;
    rec[kProbeArrive] = arrive;
    rec[kProbeLeave] = now;
    rec[kProbeSm] = sm | (static_cast<uint64_t>(nsm) << 32);
    rec[kProbeCluster] = cluster | (static_cast<uint64_t>(rank) << 32);
  }
  __syncthreads();
}

__global__ void globaltimer_kernel(uint64_t* out) { *out = mk_fifo_globaltimer(); }

cudaLaunchConfig_t probe_config(cudaLaunchAttribute* attr, int ctas, int cluster, int smem_bytes,
                                cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(ctas, 1, 1);
  cfg.blockDim = dim3(kProbeThreads, 1, 1);
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  if (cluster > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return cfg;
}

cudaError_t set_smem(int smem_bytes) {
  return cudaFuncSetAttribute(sm_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              smem_bytes);
}

}  // namespace

cudaError_t sm_probe(const SmProbeArgs& a, cudaStream_t stream) {
  if (a.ctas < 1 || a.cluster < 1 || a.cluster > 8 || a.ctas % a.cluster != 0 ||
      a.smem_bytes < 0 || a.out == nullptr) {
    return cudaErrorInvalidValue;
  }
  cudaError_t err = set_smem(a.smem_bytes);
  if (err != cudaSuccess) return err;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = probe_config(attr, a.ctas, a.cluster, a.smem_bytes, stream);
  return cudaLaunchKernelEx(&cfg, sm_probe_kernel, a.start_ns, a.hold_ns, a.out);
}

cudaError_t sm_probe_fit(int cluster, int smem_bytes, int* clusters) {
  *clusters = 0;
  int dev = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err == cudaSuccess) err = set_smem(smem_bytes);
  if (err != cudaSuccess || cluster < 1) return err != cudaSuccess ? err : cudaErrorInvalidValue;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg =
      probe_config(attr, cluster * (sms / cluster), cluster, smem_bytes, nullptr);
  if (cluster == 1) {
    int per_sm = 0;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sm_probe_kernel, kProbeThreads,
                                                        smem_bytes);
    *clusters = per_sm * sms;
    return err;
  }
  return cudaOccupancyMaxActiveClusters(clusters, sm_probe_kernel, &cfg);
}

cudaError_t gpu_globaltimer(uint64_t* out, cudaStream_t stream) {
  globaltimer_kernel<<<1, 1, 0, stream>>>(out);
  return cudaGetLastError();
}

}  // namespace mkernel::fused
