// Device-side checks of the grouped GEMMs' row bounds (grouped_offs_check.h says why).
#include <cstdio>

#include "grouped_offs_check.h"

namespace mkernel::gemm {
namespace {

constexpr int kThreads = 256;

// One CTA strides over the groups: each entry against its predecessor and the row count. The
// first offending thread prints; every offending thread traps.
__global__ void __launch_bounds__(kThreads)
    check_group_ends_kernel(const int* offs, int groups, int rows) {
  for (int e = threadIdx.x; e < groups; e += kThreads) {
    const int end = offs[e];
    const int begin = e > 0 ? offs[e - 1] : 0;
    if (end < begin || end > rows) {
      printf(
          "mkernel.gemm_grouped_packed: offs[%d] = %d is %s (offs must be non-decreasing row "
          "ends in [0, %d], a's rows; offs[%d] = %d)\n",
          e, end, end > rows ? "past a's rows" : "below the entry before it", rows, e - 1, begin);
      __trap();
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    check_group_counts_kernel(const int* counts, int groups, int capacity) {
  for (int e = threadIdx.x; e < groups; e += kThreads) {
    const int n = counts[e];
    if (n < 0 || n > capacity) {
      printf("mkernel.gemm_grouped: counts[%d] = %d is outside [0, %d] (a's capacity C)\n", e, n,
             capacity);
      __trap();
    }
  }
}

}  // namespace

cudaError_t check_group_counts(const int* counts, int groups, int capacity, cudaStream_t stream) {
  if (groups <= 0) return cudaSuccess;
  check_group_counts_kernel<<<1, kThreads, 0, stream>>>(counts, groups, capacity);
  return cudaGetLastError();
}

cudaError_t check_group_ends(const int* offs, int groups, int rows, cudaStream_t stream) {
  if (groups <= 0) return cudaSuccess;
  check_group_ends_kernel<<<1, kThreads, 0, stream>>>(offs, groups, rows);
  return cudaGetLastError();
}

}  // namespace mkernel::gemm
