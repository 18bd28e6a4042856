// The wgmma backward kernels' launches for bf16, the ring mode's kernels
// (attention_bwd_sm90_launch.h).
#include "attention_bwd_sm90.cuh"
#include "attention_bwd_sm90_launch.h"

namespace mkernel::attention::bwd {

template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 64, false, false, false, false, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 64, false, true, false, false, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 64, false, true, true, false, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 64, false, true, true, true, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 64, true, false, false, false, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 64, true, true, false, false, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 64, true, true, true, false, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 64, true, true, true, true, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 128, false, false, false, false, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 128, false, true, false, false, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 128, false, true, true, false, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 128, false, true, true, true, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 128, true, false, false, false, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 128, true, true, false, false, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 128, true, true, true, false, true>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::bfloat16_t, 128, true, true, true, true, true>(
    const BwdProblem&, cudaStream_t);

}  // namespace mkernel::attention::bwd
