// Implementation of group_sync.cuh (included at its end; include group_sync.cuh instead).
#pragma once

namespace mkernel::comm {

// The record itself: the body of record_wait, and of fail_wait_via<kInline> at each wait site.
__device__ __forceinline__ void write_wait_record(WaitDiagnostic* diag, int32_t group, int32_t rank,
                                                  const uint64_t* flag, uint64_t expected,
                                                  uint64_t seen, uint64_t elapsed_ns,
                                                  WaitSite site) {
  if (diag != nullptr && atomicCAS_system(&diag->claimed, 0u, 1u) == 0u) {
    volatile WaitDiagnostic* d = diag;
    d->expected = expected;
    d->seen = seen;
    d->flag_address = reinterpret_cast<uint64_t>(flag);
    d->flag_index = site.index;
    d->block_x = static_cast<int32_t>(blockIdx.x);
    d->block_y = static_cast<int32_t>(blockIdx.y);
    d->thread = static_cast<int32_t>(threadIdx.x);
    d->what = site.what;
    d->op = site.op;
    d->group = group;
    d->rank = rank;
    d->peer = site.peer;
    d->elapsed_ns = elapsed_ns;
    __threadfence_system();
    d->valid = 1;
    __threadfence_system();
  }
}

__device__ __noinline__ inline void record_wait(WaitDiagnostic* diag, int32_t group, int32_t rank,
                                                const uint64_t* flag, uint64_t expected,
                                                uint64_t seen, uint64_t elapsed_ns,
                                                WaitSite site) {
  write_wait_record(diag, group, rank, flag, expected, seen, elapsed_ns, site);
}

__device__ __noinline__ [[noreturn]] inline void fail_wait(WaitDiagnostic* diag, int32_t group, int32_t rank,
                                              const uint64_t* flag, uint64_t expected,
                                              uint64_t seen, uint64_t elapsed_ns, WaitSite site) {
  record_wait(diag, group, rank, flag, expected, seen, elapsed_ns, site);
  __trap();
}

template <FailPath P>
[[noreturn]] __device__ __forceinline__ void fail_wait_via(WaitDiagnostic* diag, int32_t group,
                                                           int32_t rank, const uint64_t* flag,
                                                           uint64_t expected, uint64_t seen,
                                                           uint64_t elapsed_ns, WaitSite site) {
  if constexpr (P == FailPath::kInline) {
    write_wait_record(diag, group, rank, flag, expected, seen, elapsed_ns, site);
    __trap();
  } else {
    fail_wait(diag, group, rank, flag, expected, seen, elapsed_ns, site);
  }
}

template <FailPath P>
__device__ __forceinline__ uint64_t wait_geq(const uint64_t* flag, uint64_t expected,
                                             uint64_t timeout_ns, WaitDiagnostic* diag,
                                             int32_t group, int32_t rank, WaitSite site,
                                             const uint32_t* abort_word) {
  uint64_t seen = ld_acquire_sys(flag);
  if (seen >= expected) return seen;
  const uint64_t start = globaltimer_ns();
  for (uint32_t i = 1;; ++i) {
    __nanosleep(32);
    // Both loads in flight at once: watching the abort word adds traffic, not latency.
    const uint32_t abort = abort_word != nullptr && (i & 3) == 0 ? mk_fifo_ld_acquire_sys_u32(abort_word) : 0u;
    seen = ld_acquire_sys(flag);
    if (seen >= expected || abort != 0) return seen;
    const uint64_t elapsed = globaltimer_ns() - start;
    if (elapsed > timeout_ns) {
      fail_wait_via<P>(diag, group, rank, flag, expected, seen, elapsed, site);
    }
  }
}

template <FailPath P>
__device__ __forceinline__ uint64_t wait_geq(const GroupDevice& g, const uint64_t* flag,
                                             uint64_t expected, WaitSite site) {
  return wait_geq<P>(flag, expected, g.timeout_ns, g.diag, g.group_id, g.rank, site);
}

__device__ __forceinline__ void signal(const GroupDevice& g, int peer, uint32_t slot,
                                       uint64_t value) {
  __threadfence_system();
  st_release_sys(g.flags[peer] + slot, value);
}

__device__ __forceinline__ uint64_t op_begin(const GroupDevice& g) {
  return *reinterpret_cast<volatile uint64_t*>(g.epoch) + 1;
}

__device__ __forceinline__ void op_end(const GroupDevice& g, uint64_t e) {
  __threadfence();
  const uint32_t ticket = atomicAdd(g.exit_ticket, 1u);
  const uint32_t ctas = gridDim.x * gridDim.y * gridDim.z;
  if (ticket == ctas - 1) {
    *reinterpret_cast<volatile uint32_t*>(g.exit_ticket) = 0u;
    __threadfence();
    *reinterpret_cast<volatile uint64_t*>(g.epoch) = e;
    __threadfence();
  }
}

template <FailPath P>
__device__ __forceinline__ void entry_barrier(const GroupDevice& g, uint64_t e, int32_t op,
                                              uint64_t signature) {
  // Publish the signature everywhere, then the entry flags (one system fence orders the
  // signatures, and everything this thread observed, before every release).
  for (int p = 0; p < g.world; ++p) {
    if (g.flags[p] != nullptr) g.flags[p][FlagSlot::signature_slot(e, g.rank)] = signature;
  }
  __threadfence_system();
  for (int p = 0; p < g.world; ++p) {
    if (g.flags[p] != nullptr) st_release_sys(g.flags[p] + FlagSlot::kEntry + g.rank, e);
  }
  int32_t differs = -1;
  uint64_t theirs_differing = 0;
  for (int p = 0; p < g.world; ++p) {
    if (g.flags[p] == nullptr || p == g.rank) continue;
    wait_geq<P>(g, g.flags[g.rank] + FlagSlot::kEntry + p, e, WaitSite{op, kWaitEntry, p, 0});
    const uint64_t theirs =
        *reinterpret_cast<volatile uint64_t*>(g.flags[g.rank] + FlagSlot::signature_slot(e, p));
    if (theirs != signature && differs < 0) {
      differs = p;
      theirs_differing = theirs;
    }
  }
  if (differs >= 0) {
    record_wait(g.diag, g.group_id, g.rank, g.flags[g.rank] + FlagSlot::signature_slot(e, differs),
                signature, theirs_differing, 0, WaitSite{op, kWaitSignature, differs, 0});
    for (int p = 0; p < g.world; ++p) {
      if (g.flags[p] != nullptr) signal(g, p, FlagSlot::kMismatch + g.rank, e);
    }
    const uint64_t start = globaltimer_ns();
    for (int p = 0; p < g.world; ++p) {
      if (g.flags[p] == nullptr || p == g.rank) continue;
      while (ld_acquire_sys(g.flags[g.rank] + FlagSlot::kMismatch + p) < e &&
             globaltimer_ns() - start < g.timeout_ns) {
        __nanosleep(256);
      }
    }
    __trap();
  }
}

}  // namespace mkernel::comm
