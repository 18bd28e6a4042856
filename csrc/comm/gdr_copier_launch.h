// Which GPU-direct copier helper this extension starts (gdr_copier_process.h).
#pragma once

#ifdef MKERNEL_WITH_CUDA

#include "comm/gdr_copier_process.h"

namespace mkernel::comm {

// The executable mkernel-gdr-copier beside the extension's shared object (or
// MKERNEL_NET_GDR_COPIER_EXE), given the CUDA runtime this extension uses; where it is missing,
// the Python helper that imports torch (MKERNEL_PYTHON), with a warning. Errors name `op`.
CopierLaunch copier_launch(const char* op);

}  // namespace mkernel::comm

#endif  // MKERNEL_WITH_CUDA
