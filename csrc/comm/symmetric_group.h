// Host side of the GPU communication substrate (CONTRACT; implemented in symmetric_group.cpp):
// one SymmetricGroup per (mkernel group handle, CUDA device) holds
//   - this rank's symmetric allocation [flags | data] (kernels/comm/group_device.h) and the
//     IPC mappings of the same-node peers' allocations (handles all-gathered through the Go
//     session: core_api()->session_allgather);
//   - the device op counter (epoch) and the CTA exit ticket, the host-mapped WaitDiagnostic;
//   - the inter-node path (csrc/comm/net_path.h) when the group spans several nodes.
// Every call below that changes the allocation is COLLECTIVE over the group: every rank calls it
// in the same order with the same arguments (they derive from shapes all ranks share; the
// kernels' entry barrier checks the call signature on the device).
#pragma once

#ifdef MKERNEL_WITH_CUDA

#include <ATen/ATen.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "kernels/comm/group_device.h"

namespace mkernel::comm {

class SymmetricGroup {
 public:
  // The group's state on `device` (created on first use: a collective over the session).
  // Errors name `op`. Throws if world_size does not match the session.
  static SymmetricGroup& get(const char* op, int64_t group, int64_t world_size,
                             const at::Device& device);

  // The group's state on `device` where it exists (no collective: nullptr otherwise).
  static SymmetricGroup* find(int64_t group, int device);

  // Every rank's data region holds >= data_bytes afterwards. Grows to the next power of two
  // (a collective: re-allocates and re-exchanges the IPC handles after a device sync). Inside
  // CUDA-graph capture growth is impossible: throws naming the size needed and
  // `Context.reserve(nbytes)`.
  void ensure(const char* op, uint64_t data_bytes);

  // The inter-node staging areas hold >= these sizes afterwards (collective; no-op and zero-
  // sized when the group has one node).
  void ensure_net(const char* op, uint64_t send_bytes, uint64_t recv_bytes);

  // The kernel's view (pass by value in the kernel's Params).
  const GroupDevice& device_view() const { return view_; }

  int rank() const { return view_.rank; }
  int world() const { return view_.world; }
  int nodes() const { return nodes_; }
  bool single_node() const { return nodes_ == 1; }
  // Where the ranks live, rank by rank: "nodes 0,0,1,1" (dense node indices; the same text on
  // every rank). Keys what depends on the layout (the fused verdict cache).
  std::string layout_text() const;

  // The inter-node path as JSON ({"transport", "gpu_memory", "send_bytes", "recv_bytes",
  // "stats"}), or "{}" while the group has none (one node, or no inter-node call yet).
  std::string net_info() const;
  // True when the inter-node path is the loopback transport's GPU-direct emulation: its bytes
  // are moved by copies submitted to this same GPU (a copier process or the proxy thread), which
  // may need SMs: a persistent grid that fills this client's share while it waits for their
  // data can starve them (session 32: the fused ring across 2 emulated nodes, W = 2, stalled
  // with 62 + 4 CTAs on 66 SMs). False with one node or before the path opened.
  bool net_copies_on_this_gpu() const;

  // After a kernel of this group failed (a trapped wait): "<op>: rank r waited <elapsed> for
  // <what> from peer p (slot s, want >= x, saw y)" or "" when no wait failed.
  std::string diagnostic() const;

  ~SymmetricGroup();

  struct Impl;

 private:
  friend void release_symmetric_group(int64_t group);
  SymmetricGroup() = default;
  void publish();  // view_'s peer tables from the current generation
  GroupDevice view_{};
  int nodes_ = 1;
  std::unique_ptr<Impl> impl_;
};

// Frees the group's allocations and mappings (Context.close / mkernel.shutdown). Idempotent.
void release_symmetric_group(int64_t group);

// A 64-bit signature of an op call (op id + the dims every rank must agree on), for
// entry_barrier.
uint64_t call_signature(int32_t op, std::initializer_list<int64_t> dims);

}  // namespace mkernel::comm

#endif  // MKERNEL_WITH_CUDA
