// Element conversion for kernels that accumulate in fp32 (reductions, weighted combines, partial
// sums): load() widens a stored element to float, store() rounds a float back to nearest-even.
// One definition so every reduction in the library rounds the same way.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace mkernel::comm {

template <class T> struct Elem;
template <> struct Elem<float> {
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};
template <> struct Elem<__nv_bfloat16> {
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Elem<__half> {
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};

}  // namespace mkernel::comm
