// Weak stand-ins for the substrate's SymmetricGroup entry points the fused ops call, so that a
// build of this branch without the substrate's implementation (csrc/comm/symmetric_group.cpp,
// branch subst) still imports: the fused ops then raise instead of the extension failing to
// load. The substrate's (strong) definitions replace these at link time. Delete this file once
// the substrate is merged.
#ifdef MKERNEL_WITH_CUDA

#include <c10/util/Exception.h>

#include "comm/symmetric_group.h"

namespace mkernel::comm {

__attribute__((weak)) SymmetricGroup& SymmetricGroup::get(const char* op, int64_t, int64_t,
                                                          const at::Device&) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op,
                              ": the GPU substrate (SymmetricGroup) is not in this build");
}

__attribute__((weak)) void SymmetricGroup::ensure(const char* op, uint64_t) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op,
                              ": the GPU substrate (SymmetricGroup) is not in this build");
}

__attribute__((weak)) uint64_t call_signature(int32_t, std::initializer_list<int64_t>) {
  return 0;
}

}  // namespace mkernel::comm

#endif  // MKERNEL_WITH_CUDA
