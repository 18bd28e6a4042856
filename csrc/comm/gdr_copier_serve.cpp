// copier_serve (gdr_copier_protocol.h): the GPU-direct copier helper's loop. Torch-free and
// CUDA-header-free: linked into the helper executable (csrc/tools/gdr_copier_main.cpp) and into
// the extension (the fallback helper torch.ops.mkernel._gdr_copier_serve).
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/gdr_copier_protocol.h"
#include "env_knobs.h"

namespace mkernel::comm {
namespace {

// Blocks on the lifeline pipe; its EOF means every write end closed: the rank exited, was
// killed, or released the helper. The helper then ends at once (no orphan holds the GPU / MPS),
// whatever its main loop is doing (even a CUDA call that never returns).
void watch_lifeline(int fd) {
  if (fd < 0) return;
  std::thread([fd] {
    char c = 0;
    for (;;) {
      const ssize_t n = read(fd, &c, 1);
      if (n == 0 || (n < 0 && errno != EINTR)) _exit(0);
    }
  }).detach();
}

// One channel's state in the helper: its stream, events and mapping.
struct Lane {
  void* stream = nullptr;
  std::vector<void*> events;
  uint8_t* send = nullptr;
  std::vector<uint8_t*> recv = std::vector<uint8_t*>(kCopierMaxRanks, nullptr);
  uint64_t send_bytes = 0, recv_bytes = 0;
  uint64_t mapped = 0;  // the mapping generation in place (0: none)
  uint64_t issued = 0, finished = 0;
  // Per ring slot: when the copy was submitted and its size (the stats); the last completion seen.
  std::vector<std::chrono::steady_clock::time_point> at =
      std::vector<std::chrono::steady_clock::time_point>(CopierChannel::kRing);
  std::vector<uint64_t> bytes = std::vector<uint64_t>(CopierChannel::kRing, 0);
  // Per ring slot: the copy number of the last copy of its submission, whose slot holds the one
  // event recorded after that submission (Server::issue).
  std::vector<uint64_t> batch_end = std::vector<uint64_t>(CopierChannel::kRing, 0);
  std::chrono::steady_clock::time_point last_done{};
};

// How many posted copies one submission may take (MKERNEL_NET_GDR_COPIER_BATCH, read by the helper
// from the rank's environment it inherits): 1 = one submission and one event per copy, as before
// (session 17). A submission never waits for more copies: it takes what the rank has posted (the
// transport posts a copy only once the emulated link made it due), so no copy starts later than
// before; the copies of a submission are reported done together, at its event.
// A batch forms only while the helper is behind: the link makes a 64 KiB copy due every 1.3 us
// (50 GB/s), so 256 of them queue only when the helper lags the link by ~335 us — exactly when a
// fixed cost per submission dominates.
constexpr uint32_t kDefaultBatch = 256;
constexpr uint32_t kMaxBatch = 512;  // transport.MaxDeviceCopies: the most copies a rank has posted
// A submission also stops at this many bytes (after its first copy): its event, the first copy's
// completion, waits for the whole batch (16 MiB: ~0.2 ms on one copy engine at ~87 GB/s, which is
// also what the link takes to make 16 MiB due at 50 GB/s: 0.34 ms).
constexpr uint64_t kBatchBytes = 16ull << 20;

class Server {
 public:
  Server(CopierBlock* b, const CopierCuda& cu) : b_(b), cu_(cu), lanes_(CopierBlock::kChannels) {
    // The copy-engine submission unless the rank asked for the plain copy; without the batch API
    // in this runtime the plain copy, noted once (submit_note) before the first copy says so.
    batch_ = b_->submit_asked != kCopierSubmitPlain &&
             (cu_.memcpy_batch_async != nullptr || cu_.memcpy_batch_async_v12 != nullptr);
    no_batch_api_ = b_->submit_asked != kCopierSubmitPlain && !batch_;
    if (const char* v = env::get("MKERNEL_NET_GDR_COPIER_BATCH"); v != nullptr && *v != '\0') {
      char* end = nullptr;
      const unsigned long n = std::strtoul(v, &end, 10);
      if (end == v || *end != '\0' || n < 1 || n > kMaxBatch) {
        std::snprintf(bad_batch_, sizeof bad_batch_,
                      "MKERNEL_NET_GDR_COPIER_BATCH=\"%.32s\": want 1..%u copies per submission", v, kMaxBatch);
      } else {
        max_batch_ = static_cast<uint32_t>(n);
      }
    }
    dsts_.resize(kMaxBatch);
    srcs_.resize(kMaxBatch);
    sizes_.resize(kMaxBatch);
  }

  int run() {
    const pid_t rank = static_cast<pid_t>(b_->rank_pid);
    b_->stage.store(CopierBlock::kRuntimeLoaded, std::memory_order_release);
    if (bad_batch_[0] != '\0') {
      b_->error = kCopierCudaInvalidValue;
      std::snprintf(b_->message, sizeof b_->message, "%s", bad_batch_);
      b_->state.store(CopierBlock::kFailed, std::memory_order_release);
      return 1;
    }
    const int e = cu_.set_device(b_->device);  // creates the helper's context (an MPS client of its own)
    if (e != kCopierCudaSuccess) return fail(e, "cudaSetDevice (the helper's CUDA context)");
    b_->stage.store(CopierBlock::kContextUp, std::memory_order_release);
    uint32_t expected = CopierBlock::kInit;  // not if the rank already gave up (kStop)
    if (!b_->state.compare_exchange_strong(expected, CopierBlock::kReady, std::memory_order_acq_rel)) {
      return close_all(0);
    }
    uint64_t idle = 0;
    while (b_->state.load(std::memory_order_acquire) == CopierBlock::kReady) {
      bool progress = false;
      for (int c = 0; c < CopierBlock::kChannels; ++c) {
        if (serve(c, &progress) != 0) return 1;
      }
      if (progress) {
        idle = 0;
        continue;
      }
      // Idle: spin ~100 us (a link op's latency), then nap 5 us between polls, and after ~2 s
      // without work 100 us (an idle helper costs next to no CPU; the first copy after such a
      // pause waits up to one nap). Every 1024 polls check that the rank still exists (the
      // lifeline is the prompt way; this is the backstop).
      ++idle;
      if (idle > 2000) std::this_thread::sleep_for(std::chrono::microseconds(idle > 200000 ? 100 : 5));
      if ((idle & 1023) == 0 && getppid() != rank) break;
    }
    return close_all(0);
  }

 private:
  // Once per helper, at its first plain copy: why the copies go as plain cudaMemcpyAsync although
  // the copy engines were asked for (the rank's path info shows it; one line on the helper's
  // stderr, which is the rank's).
  void note_fallback(int e, const char* why) {
    if (noted_) return;
    noted_ = true;
    b_->submit_error = e;
    std::snprintf(b_->submit_note, sizeof b_->submit_note, "%s", why);
    std::fprintf(stderr,
                 "mkernel GPU-direct copier: copies submitted as plain cudaMemcpyAsync (a same-device copy may "
                 "then run as a kernel on the SMs): %s\n",
                 why);
    std::fflush(stderr);
  }

  // The n copies of dsts_ / srcs_ / sizes_ on the lane's stream: one cudaMemcpyBatchAsync (stream-
  // ordered source access and the PreferOverlapWithCompute hint for all: the copy engines; the same
  // submission as the in-process copier, net_path.cpp NetCopier::copy), else n cudaMemcpyAsync. A
  // batch call that refuses (cudaErrorNotSupported / InvalidValue) turns the batch path off for
  // good, noted once.
  int submit(size_t n, void* stream) {
    if (batch_) {
      CopierMemcpyAttributes attr{};
      attr.src_access_order = kCopierSrcAccessOrderStream;
      attr.flags = kCopierMemcpyFlagPreferOverlapWithCompute;
      size_t first = 0, fail_idx = 0;
      const int e = cu_.memcpy_batch_async != nullptr
                        ? cu_.memcpy_batch_async(dsts_.data(), const_cast<const void* const*>(srcs_.data()),
                                                 sizes_.data(), n, &attr, &first, 1, stream)
                        : cu_.memcpy_batch_async_v12(dsts_.data(), srcs_.data(), sizes_.data(), n, &attr, &first, 1,
                                                     &fail_idx, stream);
      if (e != kCopierCudaNotSupported && e != kCopierCudaInvalidValue) {
        if (e == kCopierCudaSuccess) set_path(kCopierSubmitCe);
        return e;
      }
      (void)cu_.get_last_error();
      batch_ = false;
      char why[160];
      const char* s = cu_.get_error_string != nullptr ? cu_.get_error_string(e) : nullptr;
      std::snprintf(why, sizeof why, "cudaMemcpyBatchAsync refused the copy: %s (cudaError_t %d)",
                    s != nullptr ? s : "?", e);
      note_fallback(e, why);
    }
    if (no_batch_api_) note_fallback(0, "the CUDA runtime has no cudaMemcpyBatchAsync (CUDA < 12.8)");
    for (size_t i = 0; i < n; ++i) {
      const int e = cu_.memcpy_async(dsts_[i], srcs_[i], sizes_[i], kCopierMemcpyDeviceToDevice, stream);
      if (e != kCopierCudaSuccess) return e;
    }
    set_path(b_->submit_asked == kCopierSubmitPlain ? kCopierSubmitPlain : kCopierSubmitPlainFallback);
    return kCopierCudaSuccess;
  }

  void set_path(uint32_t p) {
    if (b_->submit_path.load(std::memory_order_relaxed) != p) b_->submit_path.store(p, std::memory_order_release);
  }

  int fail(int e, const char* what) {
    b_->error = e;
    const char* s = cu_.get_error_string != nullptr ? cu_.get_error_string(e) : nullptr;
    std::snprintf(b_->message, sizeof b_->message, "%s: %s (cudaError_t %d)", what, s != nullptr ? s : "?", e);
    b_->state.store(CopierBlock::kFailed, std::memory_order_release);
    return 1;
  }

  int serve(int c, bool* progress) {
    CopierChannel& ch = b_->channels[c];
    Lane& l = lanes_[c];
    if (issue(c, ch, l, progress) != 0) return 1;
    const int n = retire(ch, l);
    if (n < 0) return 1;
    if (n > 0) *progress = true;
    const uint64_t want = ch.map_request.load(std::memory_order_acquire);
    if (want != l.mapped && l.issued == ch.posted.load(std::memory_order_acquire)) {
      if (remap(c, ch, l, want) != 0) return 1;
      *progress = true;
    }
    return 0;
  }

  // Submits every posted copy of channel c (in order), up to max_batch_ copies (and kBatchBytes) per
  // submission with one event after each submission; fails on a descriptor outside its areas.
  // Sessions 15/17 (fused gemm_rs across 2 emulated nodes, one copy and one event per 64 KiB tile):
  // the copies retired at ~0.5 ms each with 15-22 ms of queueing, while this loop's own cost is
  // ~0.2 us per copy (tests/comm burst) and the transport's host path ~1.5 us per command
  // (gocore/datapath TestGDRBurstOf64KiBCommands): the fixed cost lies in the CUDA submission or on
  // the GPU. Where it is per submission (the call, the work launch, the event's release), a batch
  // pays it once; a cost per copy stays (the emulation never gets faster than its copies). The
  // stats' submit time says whether the calls themselves block.
  int issue(int c, CopierChannel& ch, Lane& l, bool* progress) {
    const uint64_t posted = ch.posted.load(std::memory_order_acquire);
    while (l.issued < posted && l.issued - l.finished < CopierChannel::kRing) {
      const uint64_t room = CopierChannel::kRing - (l.issued - l.finished);
      const uint64_t most = std::min<uint64_t>({posted - l.issued, room, max_batch_});
      size_t n = 0;
      uint64_t bytes = 0;
      for (; n < most && (n == 0 || bytes < kBatchBytes); ++n) {
        const uint64_t k = l.issued + n;
        const CopierDesc d = ch.ring[k % CopierChannel::kRing];
        if (d.map != l.mapped || l.send == nullptr || d.peer < 0 || d.peer >= kCopierMaxRanks ||
            l.recv[d.peer] == nullptr || d.local_off + d.bytes > l.send_bytes ||
            d.remote_off + d.bytes > l.recv_bytes) {
          b_->error = kCopierCudaInvalidValue;
          std::snprintf(b_->message, sizeof b_->message,
                        "channel %d: copy %llu (%llu bytes to rank %d, posted under mapping %u, mapping %llu in "
                        "place) lies outside the mapped areas",
                        c, static_cast<unsigned long long>(k), static_cast<unsigned long long>(d.bytes), d.peer,
                        d.map, static_cast<unsigned long long>(l.mapped));
          b_->state.store(CopierBlock::kFailed, std::memory_order_release);
          return 1;
        }
        uint8_t* dst = l.recv[d.peer] + d.remote_off;
        // The copies of one batch call may run in any order: a copy whose destination overlaps
        // an earlier one of the batch starts the next batch (the stream orders batches).
        bool overlaps = false;
        for (size_t i = 0; i < n && !overlaps; ++i) {
          const uint8_t* o = static_cast<const uint8_t*>(dsts_[i]);
          overlaps = dst < o + sizes_[i] && o < dst + d.bytes;
        }
        if (overlaps) break;
        dsts_[n] = dst;
        srcs_[n] = l.send + d.local_off;
        sizes_[n] = static_cast<size_t>(d.bytes);
        l.bytes[k % CopierChannel::kRing] = d.bytes;
        bytes += d.bytes;
      }
      // The copy engines by default (submit): a plain same-device D2D copy may run as a copy
      // kernel, which needs SMs that the fused ops' persistent grids hold while they wait for
      // these very copies (s14run1/s14run2); a NIC's DMA needs no SM. s12run1 (the MoE passing)
      // ran the plain copy: MKERNEL_NET_GDR_COPIER_SUBMIT=plain restores it.
      const uint64_t last = l.issued + n - 1;
      const auto t0 = std::chrono::steady_clock::now();
      int e = submit(n, l.stream);
      if (e == kCopierCudaSuccess) e = cu_.event_record(l.events[last % CopierChannel::kRing], l.stream);
      if (e != kCopierCudaSuccess) {
        return fail(e, batch_ ? "cudaMemcpyBatchAsync (GPU-direct copies)" : "cudaMemcpyAsync (a GPU-direct copy)");
      }
      const auto t1 = std::chrono::steady_clock::now();
      b_->stats.add_submit(static_cast<uint64_t>(std::chrono::nanoseconds(t1 - t0).count()));
      for (uint64_t k = l.issued; k <= last; ++k) {
        l.at[k % CopierChannel::kRing] = t0;
        l.batch_end[k % CopierChannel::kRing] = last;
      }
      l.issued = last + 1;
      *progress = true;
    }
    return 0;
  }

  // Publishes the copies whose submission's event completed, in order: the count, or -1 after a
  // failure.
  int retire(CopierChannel& ch, Lane& l) {
    int n = 0;
    while (l.finished < l.issued) {
      const uint64_t end = l.batch_end[l.finished % CopierChannel::kRing];
      const int e = cu_.event_query(l.events[end % CopierChannel::kRing]);
      if (e == kCopierCudaNotReady) {
        (void)cu_.get_last_error();
        break;
      }
      if (e != kCopierCudaSuccess) {
        fail(e, "a GPU-direct copy");
        return -1;
      }
      const auto now = std::chrono::steady_clock::now();
      for (; l.finished <= end; ++n) {
        const size_t slot = l.finished % CopierChannel::kRing;
        const auto from = std::max(l.at[slot], l.last_done);
        l.last_done = now;
        b_->stats.add(l.bytes[slot], static_cast<uint64_t>(std::chrono::nanoseconds(now - l.at[slot]).count()),
                      static_cast<uint64_t>(std::chrono::nanoseconds(now - from).count()));
        ++l.finished;
      }
      ch.completed.store(l.finished, std::memory_order_release);
    }
    return n;
  }

  // Between copies: finishes the channel's issued copies, closes its old mapping, opens the
  // requested one (the channel's stream and events on its first mapping).
  int remap(int c, CopierChannel& ch, Lane& l, uint64_t want) {
    int e = kCopierCudaSuccess;
    if (l.stream != nullptr && (e = cu_.stream_synchronize(l.stream)) != kCopierCudaSuccess) {
      return fail(e, "cudaStreamSynchronize (before a new mapping)");
    }
    l.finished = l.issued;
    ch.completed.store(l.finished, std::memory_order_release);
    unmap(l);
    if (ch.has_send != 0) {
      b_->mapping_channel.store(c, std::memory_order_relaxed);
      ch.opened.store(0, std::memory_order_relaxed);
      b_->stage.store(CopierBlock::kMapping, std::memory_order_release);
      if (l.stream == nullptr) {
        if ((e = cu_.stream_create(&l.stream, kCopierStreamNonBlocking)) != kCopierCudaSuccess) {
          return fail(e, "cudaStreamCreateWithFlags");
        }
        l.events.assign(CopierChannel::kRing, nullptr);
        for (auto& ev : l.events) {
          if ((e = cu_.event_create(&ev, kCopierEventDisableTiming)) != kCopierCudaSuccess) {
            return fail(e, "cudaEventCreateWithFlags");
          }
        }
      }
      void* p = nullptr;
      if ((e = cu_.ipc_open(&p, ch.send, kCopierIpcLazyEnablePeerAccess)) != kCopierCudaSuccess) {
        return fail(e, "cudaIpcOpenMemHandle (the rank's send area)");
      }
      l.send = static_cast<uint8_t*>(p);
      ch.opened.fetch_add(1, std::memory_order_release);
      for (int r = 0; r < ch.world && r < kCopierMaxRanks; ++r) {
        if (ch.has_recv[r] == 0) continue;
        void* q = nullptr;
        if ((e = cu_.ipc_open(&q, ch.recv[r], kCopierIpcLazyEnablePeerAccess)) != kCopierCudaSuccess) {
          char what[96];
          std::snprintf(what, sizeof what, "cudaIpcOpenMemHandle (rank %d's receive area)", r);
          return fail(e, what);
        }
        l.recv[r] = static_cast<uint8_t*>(q);
        ch.opened.fetch_add(1, std::memory_order_release);
      }
      l.send_bytes = ch.send_bytes;
      l.recv_bytes = ch.recv_bytes;
    }
    l.mapped = want;
    ch.map_done.store(want, std::memory_order_release);
    return 0;
  }

  void unmap(Lane& l) {
    for (auto& q : l.recv) {
      if (q != nullptr) (void)cu_.ipc_close(q);
      q = nullptr;
    }
    if (l.send != nullptr) (void)cu_.ipc_close(l.send);
    l.send = nullptr;
    l.send_bytes = l.recv_bytes = 0;
  }

  int close_all(int rc) {
    for (Lane& l : lanes_) {
      if (l.stream != nullptr) (void)cu_.stream_synchronize(l.stream);
      for (void* ev : l.events) {
        if (ev != nullptr) (void)cu_.event_destroy(ev);
      }
      l.events.clear();
      if (l.stream != nullptr) (void)cu_.stream_destroy(l.stream);
      l.stream = nullptr;
      unmap(l);
    }
    return rc;
  }

  CopierBlock* b_;
  const CopierCuda& cu_;
  std::vector<Lane> lanes_;
  bool batch_ = false;  // submit with cudaMemcpyBatchAsync
  bool no_batch_api_ = false;  // ce asked, but the runtime has no batch API (noted at the first copy)
  bool noted_ = false;         // the fallback's note is written (once per helper)
  uint32_t max_batch_ = kDefaultBatch;  // copies per submission (MKERNEL_NET_GDR_COPIER_BATCH)
  char bad_batch_[128] = {};            // why MKERNEL_NET_GDR_COPIER_BATCH was refused ("" if not)
  std::vector<void*> dsts_, srcs_;      // one submission's copies
  std::vector<size_t> sizes_;
};

}  // namespace

int copier_serve(int block_fd, int lifeline_fd, const CopierCuda& cuda) {
  watch_lifeline(lifeline_fd);
  (void)prctl(PR_SET_TIMERSLACK, 1000UL);  // its idle naps: ~5 us, not the default 50 us slack
  void* p = mmap(nullptr, sizeof(CopierBlock), PROT_READ | PROT_WRITE, MAP_SHARED, block_fd, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "mkernel GPU-direct copier: mmap of fd %d failed: %s\n", block_fd, std::strerror(errno));
    return 2;
  }
  auto* b = static_cast<CopierBlock*>(p);
  if (b->magic != CopierBlock::kMagic || b->version != CopierBlock::kVersion) {
    std::fprintf(stderr, "mkernel GPU-direct copier: fd %d is not a copier block of version %u\n", block_fd,
                 CopierBlock::kVersion);
    munmap(p, sizeof(CopierBlock));
    return 2;
  }
  int rc = 0;
  if (getppid() == static_cast<pid_t>(b->rank_pid)) {  // else the rank is gone already
    Server s(b, cuda);
    rc = s.run();
  }
  munmap(p, sizeof(CopierBlock));
  return rc;
}

}  // namespace mkernel::comm
