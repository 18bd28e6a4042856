// The GPU-driven inter-node path of one (group, CUDA device): a Go data path (gocore/datapath,
// opened through the C ABI like the host reference backend's) whose command FIFO, arrival flags
// and send/recv buffers the group's kernels use directly (kernels/comm/net_ops.cuh):
//   - FIFO block and arrival flags (buffer id 0): host shared memory, cudaHostRegister'ed
//     (Mapped | Portable) so the kernels store commands and poll flags over PCIe; the FIFO's
//     ticket counter is a device-memory word shared by the kernels' pushing lanes;
//   - send / recv buffers: on transports that register GPU memory with the NIC (ibverbs,
//     efa) they are GPU memory, registered through the data path's DeviceRegion path (DMA-BUF
//     fd from cuMemGetHandleForAddressRange when the driver exports one, else nvidia-peermem on
//     the device address) — the NIC reads and writes them directly; on tcp / loopback (the
//     one-box emulation) they are host staging buffers, cudaHostRegister'ed like the FIFO, that
//     the kernels write and read directly. The kernel-side protocol is the same either way.
// SymmetricGroup::ensure_net owns one per group that spans several nodes.
#pragma once

#ifdef MKERNEL_WITH_CUDA

#include <mkernel/core_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/comm/group_device.h"

namespace mkernel::comm {

struct NetPathConfig {
  int device = 0;                 // CUDA device of the group's kernels
  int rank = -1;                  // this rank in the session (GPU-direct emulation's mappings)
  std::vector<int> node;          // world entries: each rank's node index (the group's layout);
                                  // only ranks of different nodes are connected
  uint64_t send_bytes = 0;        // per rank; rounded up (GPU memory: to 2 MiB)
  uint64_t recv_bytes = 0;
  uint32_t arrival_slots = 4096;  // arrival flag words
  uint32_t fifo_slots = 1024;     // FIFO capacity (a power of two)
  int64_t timeout_ms = 60000;     // data path setup and stuck-command watchdog
  // false: never the loopback GPU-direct emulation, whatever MKERNEL_NET_GDR says (a caller whose
  // kernels do not run its protocol, or that has no `rank`: net_pingpong)
  bool gpu_direct = true;
  // Transport: "loopback", "tcp", "ibverbs", "efa"; empty: MKERNEL_NET / MKERNEL_NET_PLUGIN /
  // automatic (RDMA where a NIC is, else tcp).
  std::string net;
};

// The transport a group's path asks for when the user chose none (MKERNEL_NET and
// MKERNEL_NET_PLUGIN unset): "loopback" when every rank is on this host (emulated nodes: shared
// memory, shaped by MKERNEL_NET_EMULATE), else "" (automatic: RDMA where a NIC is, else tcp).
std::string default_net(bool one_host);

// The GPU-direct emulation's copies are submitted by the proxy thread into this process's own
// CUDA context (MKERNEL_NET_GDR on, MKERNEL_NET_GDR_COPIER=thread) instead of by the copier
// process: work that a kernel of this rank spinning on their arrival can stand in front of.
bool gdr_copies_in_process();

class NetPath {
 public:
  // COLLECTIVE over session `s`: every rank of the session calls it in the same order with the
  // same sizes. Errors name `op`.
  NetPath(const char* op, mk_session_t s, const NetPathConfig& cfg);
  ~NetPath();  // synchronizes the device first: no kernel may still use the path
  NetPath(const NetPath&) = delete;
  NetPath& operator=(const NetPath&) = delete;

  // The kernels' view (GroupDevice::net).
  const NetDevice& view() const { return view_; }
  const NetPathConfig& config() const;

  // The buffers hold >= these sizes afterwards. COLLECTIVE: when one must grow, every rank
  // synchronizes its device, waits until its commands finished, meets the others at a session
  // barrier and re-creates the path with power-of-two larger buffers (flags restart at 0, the
  // FIFO and its ticket counter are new). Must not be called during CUDA-graph capture.
  void ensure(const char* op, uint64_t send_bytes, uint64_t recv_bytes);

  // True when send/recv are GPU memory registered with the NIC, false for host staging.
  bool gpu_memory() const;
  // True under the loopback GPU-direct emulation (MKERNEL_NET_GDR=1): GPU buffers whose bytes the
  // transport moves with this extension's copy engine when an op is due (net_path.cpp NetCopier).
  bool gpu_direct() const;
  // CUDA's module loading mode when the path opened ("eager", "lazy"; else "unknown").
  std::string module_loading() const;
  // Who submits the GPU-direct emulation's copies: "thread" (the proxy's, in this context), the
  // helper process's kind ("mkernel-gdr-copier" or "python helper"), "" when not GPU-direct.
  std::string copier() const;
  // GPU-direct emulation: how the copies were submitted and what they cost, a JSON object
  // (CopierProcess::submit_info; "{}" when not GPU-direct).
  std::string copier_submit() const;
  std::string transport() const;

  // "" while the data path works, else its failure (naming the peer).
  std::string failure() const;
  // The proxy's diagnostics (JSON).
  std::string stats() const;

  // After the kernels that pushed commands have finished (stream synchronized): waits until
  // every command pushed so far finished at the transport. Returns "" or why not.
  std::string drain(int64_t timeout_ms) const;

 private:
  struct Impl;
  static std::unique_ptr<Impl> open(const char* op, mk_session_t s, const NetPathConfig& cfg, NetDevice& view);
  std::unique_ptr<Impl> impl_;
  NetDevice view_{};
  mk_session_t session_ = 0;
};

}  // namespace mkernel::comm

#endif  // MKERNEL_WITH_CUDA
