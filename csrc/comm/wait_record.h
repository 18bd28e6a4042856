// The process's record of a timed-out device wait (kernels/comm/wait_diagnostic.h): where
// kernels write it and how the host words it.
//
// One pinned, mapped WaitDiagnostic per process, shared by every kernel that waits (the hooked
// GEMM, every group's kernels): a wait that times out traps, which kills the CUDA context, so
// the first record is the one that explains the failure; it stays readable afterwards.
#pragma once

#include <string>

#include "kernels/comm/wait_diagnostic.h"

namespace mkernel::comm {

#ifdef MKERNEL_WITH_CUDA
// The record's device-visible address (pinned, mapped, portable host memory; zeroed), or
// nullptr when CUDA cannot allocate it (kernels then trap without a record).
WaitDiagnostic* process_wait_diagnostic();
#endif

// "mkernel.all_gather: rank 1 of group 3 waited 5.00 s for peer 2's chunk flag (slot 515, wants
// >= 7, saw 6; block 3, thread 0): is rank 2 alive and calling the same op?"
std::string describe_wait(const WaitDiagnostic& d);

// describe_wait of the process's record, or "" when no wait failed in this process.
std::string last_wait_failure();

// The mkernel op name of a WaitOp ("mkernel.all_gather").
const char* wait_op_name(int32_t op);

}  // namespace mkernel::comm
