// The process's wait record (see wait_record.h).
#include "comm/wait_record.h"

#include "kernels/moe/moe_net_plan.h"

#include <cstdio>
#include <cstring>
#include <sstream>

#ifdef MKERNEL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace mkernel::comm {

const char* wait_op_name(int32_t op) {
  switch (op) {
    case kOpGemmHooked: return "mkernel.gemm_hooked";
    case kOpAllGather: return "mkernel.all_gather";
    case kOpReduceScatter: return "mkernel.reduce_scatter";
    case kOpAllReduce: return "mkernel.all_reduce";
    case kOpAgGemm: return "mkernel.ag_gemm";
    case kOpGemmRs: return "mkernel.gemm_rs";
    case kOpGemmAr: return "mkernel.gemm_ar";
    case kOpMoeDispatch: return "mkernel.moe_dispatch_gemm";
    case kOpMoeCombine: return "mkernel.moe_combine";
    case kOpRingAttention: return "mkernel.ring_attention";
    default: return "an mkernel kernel";
  }
}

namespace {
const char* what_text(int32_t what) {
  switch (what) {
    case kWaitARows: return "the A-rows flag";
    case kWaitPeerFlag: return "a data flag";
    case kWaitEntry: return "the entry of the same call";
    case kWaitFifoCredit: return "a free FIFO slot (the proxy drains the FIFO)";
    case kWaitFifoFailed: return "the inter-node proxy, which reported a failure";
    case kWaitNetArrival: return "inter-node data";
    case kWaitNetSent: return "the transport to finish sending (the proxy's done count)";
    case kWaitPeerExit: return "the peer's previous fused kernel to exit (launch gate)";
    case kWaitPeerGate:
      return "the peer's launch gate of the same fused call (barrier gate: "
             "MKERNEL_FUSED_GATE_MODE=barrier must be set on every rank)";
    case kWaitTilePhase:
      return "the first phase of the same query tile (the engine's own-shard-first split, "
             "another CTA of this rank's engine: MKERNEL_RING_OWN_FIRST=0 turns it off)";
    default: return "a flag";
  }
}
}  // namespace

std::string describe_wait(const WaitDiagnostic& d) {
  std::ostringstream os;
  os << wait_op_name(d.op) << ": ";
  if (d.what == kWaitSignature) {
    os << "rank " << d.rank << " of group " << d.group << " and peer rank " << d.peer
       << " called different ops or shapes (call signatures " << std::hex << "0x" << d.expected
       << " here, 0x" << d.seen << std::dec << " at rank " << d.peer
       << "): every rank must call the group's ops in the same order with the same sizes and "
          "dtype";
    return os.str();
  }
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.2f", static_cast<double>(d.elapsed_ns) * 1e-9);
  if (d.what == kWaitFifoFailed) {
    // Not a timeout: the Go proxy failed the FIFO (a lost connection, a stuck command) and the
    // kernel stopped at once; `seen` is the FIFO's error code (mkernel/fifo.h mk_fifo_error).
    os << "rank " << d.rank << " of group " << d.group
       << ": the inter-node proxy failed (FIFO error " << d.seen << ") after " << secs
       << " s of the wait";
    if (d.peer >= 0) {
      os << ", blaming peer rank " << d.peer << ": is rank " << d.peer
         << " alive? (the proxy's log names the cause)";
    }
    return os.str();
  }
  os << (d.rank >= 0 ? "rank " + std::to_string(d.rank) + " of group " + std::to_string(d.group)
                     : std::string("a kernel"))
     << " timed out after " << secs << " s waiting for " << what_text(d.what);
  if (d.peer >= 0) os << " from peer rank " << d.peer;
  if ((d.op == kOpMoeDispatch || d.op == kOpMoeCombine) && d.what == kWaitNetArrival &&
      d.flag_index >= 0) {
    // The MoE exchange's slots name their signal (moe_net_plan.h).
    const std::string slot = moe_net::describe_slot(static_cast<uint32_t>(d.flag_index));
    if (!slot.empty()) os << ": " << slot;
  }
  os << " (flag index " << d.flag_index << " at 0x" << std::hex << d.flag_address << std::dec
     << ": wants >= " << d.expected << ", saw " << d.seen << "; block " << d.block_x << ","
     << d.block_y << " thread " << d.thread << ")";
  if (d.peer >= 0) {
    os << ": is rank " << d.peer
       << " alive and calling the same op? (MKERNEL_OP_TIMEOUT sets the bound)";
  }
  return os.str();
}

#ifdef MKERNEL_WITH_CUDA
WaitDiagnostic* process_wait_diagnostic() {
  static WaitDiagnostic* diag = [] {
    void* p = nullptr;
    if (cudaHostAlloc(&p, sizeof(WaitDiagnostic), cudaHostAllocMapped | cudaHostAllocPortable) !=
        cudaSuccess) {
      cudaGetLastError();
      return static_cast<WaitDiagnostic*>(nullptr);
    }
    std::memset(p, 0, sizeof(WaitDiagnostic));
    // Unified addressing (every 64-bit CUDA platform): the host address is the device address.
    return static_cast<WaitDiagnostic*>(p);
  }();
  return diag;
}
#endif

std::string last_wait_failure() {
#ifdef MKERNEL_WITH_CUDA
  const WaitDiagnostic* d = process_wait_diagnostic();
  if (d == nullptr) return "";
  const volatile WaitDiagnostic* v = d;
  if (!v->valid) return "";
  WaitDiagnostic copy;
  std::memcpy(&copy, const_cast<const WaitDiagnostic*>(d), sizeof copy);
  return describe_wait(copy);
#else
  return "";
#endif
}

}  // namespace mkernel::comm
