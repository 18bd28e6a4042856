// Which GPU-direct copier helper this extension starts (gdr_copier_process.h).
#pragma once

#ifdef MKERNEL_WITH_CUDA

#include "comm/gdr_copier_process.h"

namespace mkernel::comm {

// The executable mkernel-gdr-copier beside the extension's shared object (or
// MKERNEL_NET_GDR_COPIER_EXE), given the CUDA runtime this extension uses; where it is missing,
// the Python helper that imports torch (MKERNEL_PYTHON), with a warning. Errors name `op`.
// The copies' submission (MKERNEL_NET_GDR_COPIER_SUBMIT) in launch.submit.
CopierLaunch copier_launch(const char* op);

// MKERNEL_NET_GDR_COPIER_SUBMIT: how the GPU-direct emulation's copies are submitted, by the
// copier process and by the in-process copier alike. "ce": cudaMemcpyBatchAsync with the
// PreferOverlapWithCompute hint (the copy engines; plain cudaMemcpyAsync where the runtime lacks
// or refuses it, noted once); unset or "plain": cudaMemcpyAsync (before xnode7 the copier
// process's only submission; the default until a device run has checked "ce"). Spaces are
// ignored; anything else is an error naming `op`.
uint32_t copier_submit_env(const char* op);

}  // namespace mkernel::comm

#endif  // MKERNEL_WITH_CUDA
