// Host API of the SM-placement probe (plain C++, no torch): a measurement of how the GPU places
// the CTAs of concurrent MPS clients, for the fused kernels' launch shape (fused_diag.py
// section `mps`). Each CTA of the probe holds its SM for a fixed time from a common start on
// the GPU's clock, like a persistent fused kernel holds it for a call, and records when it was
// placed: a CTA placed after the common start + hold waited for another client's CTA to leave.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mkernel::fused {

// Per CTA, kProbeWords words at out + cta * kProbeWords.
enum ProbeWord : int32_t {
  kProbeArrive = 0,  // %globaltimer when the CTA's first thread ran (ns)
  kProbeLeave = 1,   // %globaltimer when it stopped holding the SM
  kProbeSm = 2,      // %smid | %nsmid << 32 (the ids the CTA sees; MPS may renumber them)
  kProbeCluster = 3, // %clusterid.x | %cluster_ctarank << 32
  kProbeWords = 4,
};

// The probe's threads per CTA: the fused kernels' (three warpgroups).
constexpr int kProbeThreads = 384;
// Longest hold and longest wait for the start (ns): the probe never holds an SM longer.
constexpr uint64_t kProbeMaxHoldNs = 100'000'000;

struct SmProbeArgs {
  int ctas = 0;        // grid size (a multiple of cluster)
  int cluster = 1;     // CTAs per cluster (1: an ordinary launch)
  int smem_bytes = 0;  // dynamic shared memory per CTA (> 114 KiB: one CTA per SM, like the
                       // fused kernels)
  uint64_t start_ns = 0;  // %globaltimer at which every CTA starts its hold (0: at arrival)
  uint64_t hold_ns = 0;   // how long each CTA holds its SM after max(start, arrival)
  uint64_t* out = nullptr;  // [ctas * kProbeWords] device memory
};

// Launches the probe on `stream`; the error of the launch.
cudaError_t sm_probe(const SmProbeArgs& args, cudaStream_t stream);

// Clusters of `cluster` probe CTAs with `smem_bytes` each that the occupancy API says may be
// resident at once on this context's SMs (what the fused kernels' grid sizing reads).
cudaError_t sm_probe_fit(int cluster, int smem_bytes, int* clusters);

// Writes %globaltimer (ns) to *out (device memory) from a one-thread kernel on `stream`.
cudaError_t gpu_globaltimer(uint64_t* out, cudaStream_t stream);

}  // namespace mkernel::fused
