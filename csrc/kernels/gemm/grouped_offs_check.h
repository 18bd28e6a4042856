// The grouped GEMMs' per-expert row bounds, checked on the device (plain C++ header).
//
// offs (counts) lives on the GPU (the MoE routing computes it there, and a CUDA graph may replay
// the call with new values), so the host cannot read it without a sync. A malformed offs — a
// decreasing entry, or one past a's rows — would make the grouped kernel compute the wrong rows
// in silence; this check stops it the way PyTorch's device-side index asserts do: a printf naming
// the entry, then a trap (the CUDA context is lost: the process must restart).
#pragma once

#include <cuda_runtime.h>

namespace mkernel::gemm {

// Enqueues the check of offs[0..groups): 0 <= offs[0] <= offs[1] <= ... <= offs[groups-1] <= rows.
cudaError_t check_group_ends(const int* offs, int groups, int rows, cudaStream_t stream);
// The capacity-padded layout's counts: 0 <= counts[e] <= capacity for every e < groups.
cudaError_t check_group_counts(const int* counts, int groups, int capacity, cudaStream_t stream);

}  // namespace mkernel::gemm
