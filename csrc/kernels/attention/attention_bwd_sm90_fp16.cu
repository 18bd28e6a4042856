// The wgmma backward kernels' launches for fp16 (attention_bwd_sm90_launch.h).
#include "attention_bwd_sm90.cuh"
#include "attention_bwd_sm90_launch.h"

namespace mkernel::attention::bwd {

template cudaError_t launch_main_sm90<cutlass::half_t, 64, false, false, false, false, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 64, false, true, false, false, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 64, false, true, true, false, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 64, false, true, true, true, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 64, true, false, false, false, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 64, true, true, false, false, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 64, true, true, true, false, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 64, true, true, true, true, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 128, false, false, false, false, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 128, false, true, false, false, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 128, false, true, true, false, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 128, false, true, true, true, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 128, true, false, false, false, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 128, true, true, false, false, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 128, true, true, true, false, false>(
    const BwdProblem&, cudaStream_t);
template cudaError_t launch_main_sm90<cutlass::half_t, 128, true, true, true, true, false>(
    const BwdProblem&, cudaStream_t);

}  // namespace mkernel::attention::bwd
