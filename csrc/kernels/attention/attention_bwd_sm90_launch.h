// The wgmma backward main kernels' launches (attention_bwd_sm90.cuh), declared for
// attention_bwd.cu and instantiated per dtype in attention_bwd_sm90_{bf16,fp16}{,_ring}.cu for
// every (head dim 64 / 128, causal, (kBulkDq, kWarpSpecialized, kDqWarp) in (false, false, false),
// (true, false, false), (true, true, false), (true, true, true)); kRing: the ring mode's kernels
// (BwdProblem::ring_world > 0), apart.
#pragma once

#include <cuda_runtime.h>

#include "attention_bwd_api.h"

namespace mkernel::attention::bwd {

// One CTA per (128 keys, kv head, batch) on `stream` (BwdProblem::tile_sections: their order); the
// launch error (or cudaSuccess).
template <class Element, int kHeadDim, bool kCausal, bool kBulkDq, bool kWarpSpecialized,
          bool kDqWarp, bool kRing>
cudaError_t launch_main_sm90(const BwdProblem& p, cudaStream_t stream);

}  // namespace mkernel::attention::bwd
