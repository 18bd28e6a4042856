// The copy-engine routes' host side: ag_gemm's (below) and gemm_rs's (RsCopyEngine, further down).
//
// ag_gemm's copy-engine route (fused_ag_route.h CopyEngine; MKERNEL_FUSED_AG_COPY_ENGINE): the
// host side that moves this rank's rows into every same-node rank's gathered buffer G with the
// copy engines while the copy kernel's GEMM (side warps idle: fused_params.h kSideCopyEngine)
// consumes G as the rows' arrival flags turn 1.
//
// Why (benchmarks/NOTES.md "Session 24"): on two whole H200s the fused kernel whose side warps
// push the rows over NVLink ran 7-9 % over the GEMM alone in sustained calls, at the GPUs' power
// cap, while PyTorch's async-TP, which moves the rows by copy engines, ran at the GEMM alone.
//
// One call, in stream order (launch, fused_common.cpp):
//   op stream:   launch gate (barrier mode; once every same-node peer's previous fused kernel
//                has exited, resets this rank's route flags to 0, then waits for every peer's
//                gate of this call: every peer has finished its previous call, so nobody reads
//                the G slots and flags about to be written) -> fork event
//                -> the fused kernel -> wait for the join events.
//   side streams (after the fork event): for each destination (own G first, then rank + 1,
//                rank + 2, ...; destination j on side stream j mod kStreams) and each piece of
//                the rows (1, 1, 2, 4, 8, 8, ... 128-row chunks, fused_ag_route.h
//                copy_engine_pieces: the first tiles' rows land early, later pieces cost few API
//                calls), one copy by the copy engines
//                (comm::ce_copy_async) then one batch of stream writes setting the piece's chunk
//                flags at that destination to 1 (each write preceded by the stream's memory fence:
//                the copy's bytes are visible first) -> join event.
// Nothing here runs on the SMs, so the persistent grid that waits for the flags cannot starve it;
// every wait is the kernel's own bounded flag wait (a copy that never lands traps naming the
// (source rank, chunk) flag) or the gate's bounded peer waits.
#pragma once

#ifdef MKERNEL_WITH_CUDA

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/comm/group_device.h"

namespace mkernel::fused_glue {

// Rows per arrival flag on this route: one 128-row tile of A per flag.
constexpr int64_t kCopyEngineChunkRows = 128;
// Side streams per device (destinations round-robin over them).
constexpr int kCopyEngineStreams = 4;
// (The pieces: fused_ag_route.h copy_engine_pieces.)

// One call's copies: this rank's x [m_local rows of row_bytes] into slot g.rank of every
// same-node rank's G; flag of (source s, chunk c) = flag_base + s * chunks + c.
struct AgCopyEngineCall {
  const comm::GroupDevice* group = nullptr;
  const uint8_t* x = nullptr;
  int64_t m_local = 0;
  int64_t row_bytes = 0;
  int32_t chunks = 0;  // ceil(m_local / kCopyEngineChunkRows)
  uint32_t flag_base = 0;
};

// Whether this process can run the route: the runtime has the batch copy API (CUDA >= 12.8) and
// the driver gives cuStreamBatchMemOp. Decided once per process from the runtime, not per call;
// "" when available, else why not (the op then does not list the route, noted once).
const std::string& copy_engine_unavailable();
// Whether an op whose copy-engine route the setting `var` asks for (`asked`) may offer it: false
// when not asked; inside graph capture before any probe true (the probe allocates; the op runs
// the route's plan on its fused kernel there); else whether the submission is available, noted
// once per `var` on stderr where it is not (every rank of a machine answers alike).
bool copy_engine_offered(const char* op, const char* var, bool asked);
// Whether copy_engine_unavailable has run its probe (it allocates and synchronizes a private
// stream: not inside graph capture, where the op takes the route as available until an eager
// call probes; inside capture the route's plan runs on the copy kernel anyway).
bool copy_engine_probed();

// After the gate on `op_stream`: fork the side streams and enqueue every copy and flag write of
// `call`. Errors name `op`.
void copy_engine_fork(const char* op, const AgCopyEngineCall& call, cudaStream_t op_stream);

// After the fused kernel on `op_stream`: `op_stream` waits for every side stream's work of the
// call (so x and G are free for what follows, as with the copy kernel).
void copy_engine_join(const char* op, cudaStream_t op_stream);

// gemm_rs's copy-engine route (MKERNEL_FUSED_RS_COPY_ENGINE, gemm_rs.cpp rs_copy_engine_call):
// async-TP's shape on the substrate, for whole GPUs where SM traffic over NVLink beside a
// power-capped GEMM costs the fused kernel 13-19 % (kernels/fused/rs_copy_engine.cu says why).
// One call, rows split into W owner blocks of b rows, in stream order:
//   op stream:   launch gate (barrier mode; resets this rank's W arrival flags to 0 once every
//                peer's previous fused kernel has exited) -> entry barrier (signatures)
//                -> for dst = rank + 1, rank + 2, ...: the engine GEMM of dst's block into a
//                local partial, then send(dst) -> the GEMM of the own block -> one warp waits
//                for the W - 1 flags -> the reduce kernel (sums the W partials in rank order;
//                its last CTA releases kExit) -> join.
//   side streams: per dst (side stream (j - 1) mod kCopyEngineStreams), after that block's GEMM:
//                one copy by the copy engines into slot `rank` of dst's data region, then a
//                stream write of 1 into dst's flag flag_base + rank (after its memory fence).
// A peer writes this rank's slots only after its gate passed, i.e. after this rank's gate saw
// every peer's previous kernel end and reset the flags, and after the entry barrier checked that
// both called the same shape. Every wait is bounded (the gate's, the entry barrier's, the
// reduce's flag waits: each names the peer); the side streams wait only for this rank's own
// events. Inside graph capture the op runs the route's plan on the fused kernel (no batch copy
// node), as ag_gemm's route does.
class RsCopyEngine {
 public:
  // flag_base: the first of the W arrival flags; slot_bytes: bytes between two slots of a data
  // region (a multiple of 256). The forks happen in send().
  RsCopyEngine(const char* op, const comm::GroupDevice& g, uint32_t flag_base, uint64_t slot_bytes,
               cudaStream_t op_stream);
  // After the GEMM of dst's block (`bytes` at `partial`, local) was enqueued on the op stream:
  // its copy into dst's slot and the flag write, on a side stream. dst != the rank, each at
  // most once per call.
  void send(int dst, const void* partial, uint64_t bytes);
  // The op stream waits for every side stream this call used (the partials are free after it).
  void join();
  // Joins where join() did not run (an error between two sends): the op stream never runs ahead
  // of copies that read the caller's partials. Errors are ignored there (a destructor).
  ~RsCopyEngine();
  RsCopyEngine(const RsCopyEngine&) = delete;
  RsCopyEngine& operator=(const RsCopyEngine&) = delete;

 private:
  const char* op_;
  const comm::GroupDevice& g_;
  uint32_t flag_base_;
  uint64_t slot_bytes_;
  cudaStream_t op_stream_;
  int sends_ = 0;
  bool joined_ = false;
};

}  // namespace mkernel::fused_glue

#endif  // MKERNEL_WITH_CUDA
