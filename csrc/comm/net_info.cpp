// torch.ops.mkernel._net_path_info(group, world_size) -> str: the group's GPU inter-node path on
// the current CUDA device as JSON (SymmetricGroup::net_info: transport, staging kind, sizes,
// the proxy's stats), "{}" while it has none. Benchmarks record which transport ran.
#ifdef MKERNEL_WITH_CUDA

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/library.h>

#include <string>

#include "comm/symmetric_group.h"

namespace mkernel::comm {
namespace {

std::string net_path_info(int64_t group, int64_t world_size) {
  const at::Device device(at::kCUDA, c10::cuda::current_device());
  return SymmetricGroup::get("mkernel._net_path_info", group, world_size, device).net_info();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(mkernel, m) { m.def("_net_path_info(int group, int world_size) -> str"); }

TORCH_LIBRARY_IMPL(mkernel, CompositeExplicitAutograd, m) { m.impl("_net_path_info", &net_path_info); }

}  // namespace mkernel::comm

#endif  // MKERNEL_WITH_CUDA
