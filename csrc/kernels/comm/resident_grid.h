// The co-resident grid of a communication kernel, as this process sees the device.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

namespace mkernel::comm {

// `max_per_sm` CTAs of `threads` threads per SM (fewer if they do not fit, never less than one),
// times the SM count this process sees: under MPS that is its share, so W ranks' grids fit the
// GPU together. Cached per (device, kernel): the occupancy queries cost more than a small
// collective. Callers must not need every CTA resident at once (work is claimed from counters;
// under MPS the ranks' grids may still share SMs).
inline cudaError_t resident_grid(const void* kernel, int threads, int max_per_sm, int* out) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, int> cache;
  const std::lock_guard<std::mutex> guard(mu);
  const auto it = cache.find({dev, kernel});
  if (it != cache.end()) {
    *out = it->second;
    return cudaSuccess;
  }
  int sms = 0, per_sm = 0;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) return err;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0);
  if (err != cudaSuccess) return err;
  *out = sms * std::max(1, std::min(per_sm, max_per_sm));
  cache.emplace(std::make_pair(dev, kernel), *out);
  return cudaSuccess;
}

}  // namespace mkernel::comm
