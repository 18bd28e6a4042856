// mkernel.fused_verdicts_file: the fused verdict cache's file (fused_verdict_store.h) for
// Python. Kept out of fused_verdict_store.cpp, which stays torch-free for its host check.
#include <torch/library.h>

#include "fused_verdict_store.h"

namespace mkernel::fused_store {

// No tensor arguments: one kernel serves every dispatch key.
TORCH_LIBRARY_IMPL(mkernel, CompositeExplicitAutograd, m) {
  m.impl("fused_verdicts_file", [] { return file_path(); });
}

}  // namespace mkernel::fused_store
