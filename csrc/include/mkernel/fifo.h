/*
 * mkernel/fifo.h — the command FIFO between a producer (a GPU warp of a fused
 * kernel, or a host thread of the reference backend) and the Go proxy that
 * drains it into the network (gocore/proxy), plus the arrival-flag layout the
 * receiving side waits on.
 *
 * This header is the contract: the Go side mirrors it in gocore/fifo, and a
 * cgo test (gocore/capi/fifo_layout_test.go) checks that both see the same
 * offsets and sizes. It compiles as C11, C++17, CUDA device code and under cgo.
 *
 * ── Memory ───────────────────────────────────────────────────────────────────
 * One FIFO is one contiguous, 128-byte aligned block, mk_fifo_bytes(capacity)
 * long: an mk_fifo_ctrl followed by `capacity` 64-byte mk_fifo_cmd slots.
 * On a GPU machine it is host-pinned memory mapped into the device
 * (cudaHostAlloc(cudaHostAllocMapped) / cudaHostRegister), one FIFO per
 * (GPU, proxy thread); in the one-box emulation and in tests it is a memfd
 * segment (gocore/transport/shm) or plain mmap. The creator (mk_fifo_init or
 * fifo.Init in Go) zeroes it and writes the header before any producer or
 * consumer touches it.
 *
 * ── Producer protocol ────────────────────────────────────────────────────────
 *   1. ticket = fetch_add(&head, 1)                      (relaxed)
 *   2. credit: spin while ticket - load_acquire(&tail) >= capacity, bounded:
 *      past the timeout, REPORT (which FIFO, ticket, tail) — a GPU producer
 *      marks the FIFO failed and returns MK_FIFO_TIMEOUT, and its C++ caller
 *      records the wait (kernels/comm/net_ops.cuh: comm::fail_wait) and traps;
 *      a host thread gets MK_FIFO_TIMEOUT back, still owning the ticket.
 *      Producers may cache tail and reload it only when the cached value
 *      grants no credit (a GPU then reads host memory over PCIe rarely).
 *   3. fill every field of slot[ticket & (capacity-1)] except seq;
 *   4. store_release(&slot.seq, ticket + 1)   — LAST. Publication.
 * A taken ticket must always be published: the consumer processes slots in
 * ticket order and an unpublished ticket blocks every later one. A producer
 * that cannot go on calls mk_fifo_fail, which the proxy turns into an error
 * naming the ticket.
 *
 * ── Failure record (line 4) ──────────────────────────────────────────────────
 * The first party to fail the FIFO (a producer, the GPU, the proxy) owns the
 * record; readers must never see a half-written one:
 *   1. claim:   CAS error_state FREE -> CLAIMED (acq_rel); a loser stops here
 *               (someone else's failure is being recorded);
 *   2. details: plain stores of error_peer and error_ticket;
 *   3. publish: store_release(&error, code), then error_state = SET.
 * Readers test `error` with an acquire load: once it is nonzero the details
 * are complete. Nobody resets the record: a failed FIFO stays failed.
 *
 * GPU producers (one elected lane per warp does the push):
 *   - step 1 on a device-memory counter (atomicAdd, device scope) when several
 *     warps share a FIFO: system-scope atomics on host memory need PCIe
 *     AtomicOps, which not every platform routes. The proxy never reads head:
 *     it learns of work from the slots' seq words only. A host producer uses
 *     ctrl->head.
 *   - step 2: ld.acquire.sys.global.u64 of ctrl->tail, bounded by %globaltimer.
 *   - step 3: plain (or vectorized st.global.v2.u64) stores to the mapped slot.
 *   - step 4: st.release.sys.global.u64 of slot->seq (a fence.sc.sys then a
 *     relaxed store also works, at a higher cost). The release orders the
 *     slot's stores, and every store the kernel made earlier to the data being
 *     sent, before the publication is visible to the CPU.
 * Host producers use C11 memory orders through the GCC/Clang __atomic builtins
 * (shared by C, C++ and cgo; <stdatomic.h>'s _Atomic is not C++):
 * mk_fifo_push() below. The host helpers use POSIX clock_gettime: compile with
 * the compilers' defaults (gnu11, g++, cgo) or -D_POSIX_C_SOURCE=200809L.
 *
 * ── The LL slot format (mk_fifo_ctrl.format == MK_FIFO_FORMAT_LL) ──────────
 * An alternative chosen when the FIFO is created: the Go data path's default (gocore/datapath;
 * MKERNEL_FIFO_LL=0 picks MK_FIFO_FORMAT_SEQ above, which a zeroed header also means). Each command is one 128-byte mk_fifo_ll_entry
 * (cmd_bytes = 128, capacity counts entries). Its first 14 8-byte words each carry 32 bits of
 * the command (mk_fifo_cmd's bytes 8..63, in order: mk_fifo_ll_payload) in the low half and the
 * tag (uint32_t)(ticket + 1) in the high half; words 14 and 15 are unused. There is no seq word
 * and no publication store: every 8-byte store is single-copy atomic, so the consumer has the
 * command exactly when all 14 words carry its ticket's tag, in whatever order the stores landed
 * (a zeroed entry has tag 0 and the previous lap's stale words the tag of ticket - capacity,
 * both different). Steps 3 and 4 become: store the 14 words (any order, relaxed).
 *   The producer therefore needs no fence between payload and publication. It still needs
 *   one BEFORE the entry when the command orders earlier memory accesses: a WRITE of data the
 *   kernel stored (bytes > 0). The GPU push (mk_fifo_push_device_ll) takes `order_prior`;
 *   kernels/comm/net_ops.cuh sets it when bytes != 0, so a pure signal (bytes == 0) is published
 *   with no system fence at all — it orders nothing the kernel did before it. (A kernel that
 *   would use a pure signal to hand back a buffer it read must fence itself first.)
 *   The consumer must take every word from ONE load and check its tag there (never check the
 *   tags, then re-read payload), and must never act on an entry with any stale word.
 *
 * ── Consumer protocol (the proxy; one consumer per FIFO) ─────────────────────
 *   1. pos = its private copy of tail;
 *      if load_acquire(&slot[pos & mask].seq) != pos + 1: nothing new;
 *   2. copy the command out and process it (post it to the transport);
 *   3. store_release(&tail, pos + 1) — the slot may be reused: credit returns.
 *      (Several commands may be consumed before one tail store.)
 *   4. when commands finish (the transport completed them; fences and
 *      barriers resolved), store_release(&done, n) where n is the number of
 *      commands finished IN TICKET ORDER: a producer that waits for
 *      done > ticket may reuse the command's source memory.
 * The proxy consumes a command only when the network has room for it
 * (per-peer limits on commands and bytes in flight); otherwise it leaves it
 * in the ring, the ring fills, and producers wait for credit in step 2. That
 * chain — network credit, then ring credit — is the flow control: no fast
 * producer can overrun the ring or the network.
 *
 * ── Commands ─────────────────────────────────────────────────────────────────
 *   WRITE         copy [local_buf, local_off, bytes) here into
 *                 [remote_buf, remote_off, bytes) on rank `peer`.
 *   WRITE_SIGNAL  WRITE, then store arrival_seq into the peer's arrival flag
 *                 `arrival_slot` — visible only after the data is complete
 *                 there (and after every earlier command to that peer). bytes
 *                 may be 0: a pure signal.
 *   FENCE         later commands to `peer` (MK_FIFO_PEER_ALL: to any peer)
 *                 are not started until every earlier one to it is complete at
 *                 the peer. On transports that keep order it costs nothing.
 *   BARRIER       a FENCE on all peers, then a signal of arrival_seq into flag
 *                 slot (arrival_slot + my_rank) of every peer the proxy is
 *                 connected to (the ranks of other nodes; all ranks with
 *                 all_peers); a rank has passed the barrier when slots
 *                 arrival_slot + r hold >= arrival_seq for every such rank r.
 * Buffer ids name regions registered with the transport on every rank
 * (symmetric ids); offsets and bytes are in bytes. The arrival_seq values a
 * producer uses for one flag must increase: they are the device-side
 * sequence numbers (epochs) that make back-to-back launches and CUDA graphs
 * work without host involvement.
 *
 * ── Arrival flags (receiver side) ────────────────────────────────────────────
 * An array of uint64_t words, 8-byte aligned, in a registered buffer (the
 * proxy's flag buffer id, the same on every rank); slot s is the word at byte
 * 8*s. A transport stores a signal's value after the data is complete, with
 * release semantics and never lowering a word (stores max). A receiver waits
 * with acquire loads until flag >= seq (GPU: ld.acquire.sys; host:
 * mk_fifo_flag_wait) — then the data is there. Flags are never reset: the
 * sequence keeps growing.
 */
#ifndef MKERNEL_FIFO_H_
#define MKERNEL_FIFO_H_

#include <stddef.h>
#include <stdint.h>
#if !defined(__CUDA_ARCH__)
#include <time.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define MK_FIFO_MAGIC 0x4f464b4du /* "MKFO" little endian */
#define MK_FIFO_VERSION 1u
#define MK_FIFO_CMD_BYTES 64u       /* sizeof(mk_fifo_cmd) */
#define MK_FIFO_LINE_BYTES 128u     /* control words live this far apart (two x86 lines: no prefetch sharing) */
#define MK_FIFO_ALIGN 128u          /* alignment of a FIFO block */
#define MK_FIFO_FLAG_BYTES 8u       /* one arrival flag word */
#define MK_FIFO_PEER_ALL 0xffffu    /* FENCE on every peer */
#define MK_FIFO_MAX_CAPACITY (1u << 20)
#define MK_FIFO_LL_ENTRY_BYTES 128u /* one command in the LL format (mk_fifo_ll_entry) */
#define MK_FIFO_LL_WORDS 14u        /* tagged words of an LL entry: 14 x 32 bits = mk_fifo_cmd minus seq */

/* mk_fifo_ctrl.format: how a slot is published. */
enum mk_fifo_format {
  MK_FIFO_FORMAT_SEQ = 0, /* mk_fifo_cmd slots, published by a store-release of seq (the default) */
  MK_FIFO_FORMAT_LL = 1,  /* mk_fifo_ll_entry slots, every word tagged with the ticket (no fence) */
};

/* Command kinds. 0 is never valid: a zeroed slot is not a command. */
enum mk_fifo_kind {
  MK_FIFO_WRITE = 1,
  MK_FIFO_WRITE_SIGNAL = 2,
  MK_FIFO_FENCE = 3,
  MK_FIFO_BARRIER = 4,
};

/* Clock domain of mk_fifo_cmd.enqueue_ns (mk_fifo_ctrl.clock). */
enum mk_fifo_clock {
  MK_FIFO_CLOCK_NONE = 0,      /* no timestamps */
  MK_FIFO_CLOCK_MONOTONIC = 1, /* host CLOCK_MONOTONIC, ns */
  MK_FIFO_CLOCK_GLOBALTIMER = 2, /* GPU %globaltimer, ns (unix epoch on current drivers) */
};

/* mk_fifo_ctrl.error, set by mk_fifo_fail (a producer) or by the proxy. */
enum mk_fifo_error {
  MK_FIFO_ERR_NONE = 0,
  MK_FIFO_ERR_PRODUCER = 1, /* a producer gave up on a ticket (error_ticket) */
  MK_FIFO_ERR_PROXY = 2,    /* the proxy failed: a peer is gone or an op is stuck; error_peer names it */
  MK_FIFO_ERR_CLOSED = 3,   /* the proxy was closed */
};

/* mk_fifo_ctrl.error_state: who owns the failure record. */
enum mk_fifo_error_state {
  MK_FIFO_ERROR_FREE = 0,    /* no failure yet */
  MK_FIFO_ERROR_CLAIMED = 1, /* a failing party is writing the details */
  MK_FIFO_ERROR_SET = 2,     /* error, error_peer and error_ticket are final */
};

/* Host return codes. */
enum mk_fifo_result {
  MK_FIFO_OK = 0,
  MK_FIFO_TIMEOUT = 1, /* no credit within the timeout; the ticket is still the caller's */
  MK_FIFO_FAILED = 2,  /* ctrl->error is set: the FIFO is dead, stop producing */
};

/* One command: 64 bytes, one cache line, naturally aligned fields. */
typedef struct mk_fifo_cmd {
  uint64_t seq;          /*  0: ticket + 1 once published (store-release, written last) */
  uint8_t kind;          /*  8: mk_fifo_kind */
  uint8_t flags;         /*  9: reserved, 0 */
  uint16_t peer;         /* 10: destination rank, or MK_FIFO_PEER_ALL (FENCE) */
  uint32_t arrival_slot; /* 12: flag slot at the peer (WRITE_SIGNAL, BARRIER) */
  uint32_t local_buf;    /* 16: source buffer id */
  uint32_t remote_buf;   /* 20: destination buffer id */
  uint64_t local_off;    /* 24: source offset, bytes */
  uint64_t remote_off;   /* 32: destination offset, bytes */
  uint64_t bytes;        /* 40: length, bytes */
  uint64_t arrival_seq;  /* 48: value stored into the arrival flag */
  uint64_t enqueue_ns;   /* 56: producer's timestamp, in mk_fifo_ctrl.clock's domain */
} mk_fifo_cmd;

/* The control block: five 128-byte lines, each written by one side only. */
typedef struct mk_fifo_ctrl {
  /* line 0: written once by the creator */
  uint32_t magic;     /* MK_FIFO_MAGIC */
  uint16_t version;   /* MK_FIFO_VERSION */
  uint16_t cmd_bytes; /* MK_FIFO_CMD_BYTES */
  uint32_t capacity;  /* slots, a power of two <= MK_FIFO_MAX_CAPACITY */
  uint32_t clock;     /* mk_fifo_clock of enqueue_ns */
  uint32_t format;    /* mk_fifo_format (0, the default, in a zeroed block) */
  uint8_t pad0[MK_FIFO_LINE_BYTES - 20];
  /* line 1: producers */
  uint64_t head; /* next ticket (host producers; GPU producers may keep their own) */
  uint8_t pad1[MK_FIFO_LINE_BYTES - 8];
  /* line 2: consumer */
  uint64_t tail; /* commands consumed: slots of tickets < tail + capacity are free */
  uint8_t pad2[MK_FIFO_LINE_BYTES - 8];
  /* line 3: consumer */
  uint64_t done; /* commands finished in ticket order: their source memory is free */
  uint8_t pad3[MK_FIFO_LINE_BYTES - 8];
  /* line 4: failure, written once by whoever claims error_state first (see
   * "Failure record" above): error is the publication, written last */
  uint32_t error;        /* mk_fifo_error; nonzero: the details below are complete */
  uint32_t error_peer;   /* the peer rank involved, or UINT32_MAX */
  uint64_t error_ticket; /* the ticket involved */
  uint32_t error_state;  /* mk_fifo_error_state: the claim */
  uint32_t pad4a;
  uint8_t pad4[MK_FIFO_LINE_BYTES - 24];
} mk_fifo_ctrl;

#ifdef __cplusplus
#define MK_FIFO_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define MK_FIFO_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif
MK_FIFO_STATIC_ASSERT(sizeof(mk_fifo_cmd) == MK_FIFO_CMD_BYTES, "mk_fifo_cmd must be exactly 64 bytes: fix the field list, not the constant");
MK_FIFO_STATIC_ASSERT(offsetof(mk_fifo_cmd, seq) == 0, "seq must be the slot's first word");
MK_FIFO_STATIC_ASSERT(offsetof(mk_fifo_cmd, kind) == 8 && offsetof(mk_fifo_cmd, peer) == 10, "mk_fifo_cmd header moved");
MK_FIFO_STATIC_ASSERT(offsetof(mk_fifo_cmd, arrival_slot) == 12 && offsetof(mk_fifo_cmd, local_buf) == 16, "mk_fifo_cmd ids moved");
MK_FIFO_STATIC_ASSERT(offsetof(mk_fifo_cmd, local_off) == 24 && offsetof(mk_fifo_cmd, remote_off) == 32, "mk_fifo_cmd offsets moved");
MK_FIFO_STATIC_ASSERT(offsetof(mk_fifo_cmd, bytes) == 40 && offsetof(mk_fifo_cmd, arrival_seq) == 48, "mk_fifo_cmd lengths moved");
MK_FIFO_STATIC_ASSERT(offsetof(mk_fifo_cmd, enqueue_ns) == 56, "mk_fifo_cmd timestamp moved");
MK_FIFO_STATIC_ASSERT(offsetof(mk_fifo_ctrl, format) == 16, "format follows clock in line 0");
MK_FIFO_STATIC_ASSERT(offsetof(mk_fifo_ctrl, head) == 1 * MK_FIFO_LINE_BYTES, "head must start line 1");
MK_FIFO_STATIC_ASSERT(offsetof(mk_fifo_ctrl, tail) == 2 * MK_FIFO_LINE_BYTES, "tail must start line 2");
MK_FIFO_STATIC_ASSERT(offsetof(mk_fifo_ctrl, done) == 3 * MK_FIFO_LINE_BYTES, "done must start line 3");
MK_FIFO_STATIC_ASSERT(offsetof(mk_fifo_ctrl, error) == 4 * MK_FIFO_LINE_BYTES, "error must start line 4");
MK_FIFO_STATIC_ASSERT(offsetof(mk_fifo_ctrl, error_ticket) == 4 * MK_FIFO_LINE_BYTES + 8 &&
                          offsetof(mk_fifo_ctrl, error_state) == 4 * MK_FIFO_LINE_BYTES + 16,
                      "line 4's failure record moved");
MK_FIFO_STATIC_ASSERT(sizeof(mk_fifo_ctrl) == 5 * MK_FIFO_LINE_BYTES, "mk_fifo_ctrl is five lines");

/* One command in the LL format: word i < MK_FIFO_LL_WORDS = payload u32 i | (tag << 32). */
typedef struct mk_fifo_ll_entry {
  uint64_t word[MK_FIFO_LL_ENTRY_BYTES / 8u];
} mk_fifo_ll_entry;
MK_FIFO_STATIC_ASSERT(sizeof(mk_fifo_ll_entry) == MK_FIFO_LL_ENTRY_BYTES, "an LL entry is two 64-byte lines");

/* Bytes of a FIFO of `capacity` slots (MK_FIFO_BYTES: the SEQ format; _FMT: either). */
#define MK_FIFO_BYTES(capacity) (sizeof(mk_fifo_ctrl) + (size_t)(capacity) * sizeof(mk_fifo_cmd))
#define MK_FIFO_BYTES_FMT(capacity, format)                                                            \
  (sizeof(mk_fifo_ctrl) +                                                                              \
   (size_t)(capacity) * ((format) == MK_FIFO_FORMAT_LL ? sizeof(mk_fifo_ll_entry) : sizeof(mk_fifo_cmd)))

/* The slots follow the control block. */
#if defined(__CUDACC__)
#define MK_FIFO_FN static inline __host__ __device__
#else
#define MK_FIFO_FN static inline
#endif

MK_FIFO_FN mk_fifo_cmd* mk_fifo_slots(mk_fifo_ctrl* c) { return (mk_fifo_cmd*)(void*)(c + 1); }
MK_FIFO_FN mk_fifo_cmd* mk_fifo_slot(mk_fifo_ctrl* c, uint64_t ticket) {
  return mk_fifo_slots(c) + (ticket & (uint64_t)(c->capacity - 1u));
}
MK_FIFO_FN mk_fifo_ll_entry* mk_fifo_ll_entries(mk_fifo_ctrl* c) { return (mk_fifo_ll_entry*)(void*)(c + 1); }

/* The LL tag of a ticket: never 0 for the first lap (a zeroed entry is not a command), and
 * different from the previous lap's (ticket - capacity) for any capacity < 2^32. */
MK_FIFO_FN uint32_t mk_fifo_ll_tag(uint64_t ticket) { return (uint32_t)(ticket + 1u); }

/* The 14 payload words of a command (its bytes 8..63 as little-endian u32s, built from the
 * fields so that a GPU keeps them in registers). Go's fifo.llPayload mirrors it. */
MK_FIFO_FN void mk_fifo_ll_payload(const mk_fifo_cmd* m, uint32_t p[MK_FIFO_LL_WORDS]) {
  p[0] = (uint32_t)m->kind | ((uint32_t)m->flags << 8) | ((uint32_t)m->peer << 16);
  p[1] = m->arrival_slot;
  p[2] = m->local_buf;
  p[3] = m->remote_buf;
  p[4] = (uint32_t)m->local_off;
  p[5] = (uint32_t)(m->local_off >> 32);
  p[6] = (uint32_t)m->remote_off;
  p[7] = (uint32_t)(m->remote_off >> 32);
  p[8] = (uint32_t)m->bytes;
  p[9] = (uint32_t)(m->bytes >> 32);
  p[10] = (uint32_t)m->arrival_seq;
  p[11] = (uint32_t)(m->arrival_seq >> 32);
  p[12] = (uint32_t)m->enqueue_ns;
  p[13] = (uint32_t)(m->enqueue_ns >> 32);
}

/* ── Host side: C11 memory orders through the __atomic builtins ──────────── */
#if !defined(__CUDA_ARCH__)

static inline uint64_t mk_fifo_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void mk_fifo_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* Initialise a zeroed block of MK_FIFO_BYTES(capacity) bytes (capacity: a power
 * of two). Returns 0, or -1 for a bad capacity. Call before sharing it. */
static inline int mk_fifo_init_format(mk_fifo_ctrl* c, uint32_t capacity, uint32_t clock, uint32_t format) {
  if (capacity == 0 || (capacity & (capacity - 1u)) != 0 || capacity > MK_FIFO_MAX_CAPACITY) return -1;
  if (format != MK_FIFO_FORMAT_SEQ && format != MK_FIFO_FORMAT_LL) return -1;
  c->version = MK_FIFO_VERSION;
  c->cmd_bytes = (uint16_t)(format == MK_FIFO_FORMAT_LL ? MK_FIFO_LL_ENTRY_BYTES : MK_FIFO_CMD_BYTES);
  c->capacity = capacity;
  c->clock = clock;
  c->format = format;
  __atomic_store_n(&c->magic, MK_FIFO_MAGIC, __ATOMIC_RELEASE);
  return 0;
}
static inline int mk_fifo_init(mk_fifo_ctrl* c, uint32_t capacity, uint32_t clock) {
  return mk_fifo_init_format(c, capacity, clock, MK_FIFO_FORMAT_SEQ);
}

/* Bytes of an initialised FIFO's block, whatever its format. */
static inline size_t mk_fifo_block_bytes(const mk_fifo_ctrl* c) { return MK_FIFO_BYTES_FMT(c->capacity, c->format); }

/* Mark the FIFO failed (first caller wins: claim, details, publish); producers
 * and the proxy stop. Returns 1 if this call's record is the one kept. */
static inline int mk_fifo_fail(mk_fifo_ctrl* c, uint32_t error, uint32_t peer, uint64_t ticket) {
  uint32_t expect = MK_FIFO_ERROR_FREE;
  if (!__atomic_compare_exchange_n(&c->error_state, &expect, (uint32_t)MK_FIFO_ERROR_CLAIMED, 0,
                                   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return 0;
  __atomic_store_n(&c->error_peer, peer, __ATOMIC_RELAXED);
  __atomic_store_n(&c->error_ticket, ticket, __ATOMIC_RELAXED);
  __atomic_store_n(&c->error, error, __ATOMIC_RELEASE);
  __atomic_store_n(&c->error_state, (uint32_t)MK_FIFO_ERROR_SET, __ATOMIC_RELEASE);
  return 1;
}

static inline uint32_t mk_fifo_error(const mk_fifo_ctrl* c) { return __atomic_load_n(&c->error, __ATOMIC_ACQUIRE); }

/* Step 2: wait until `ticket` has a free slot. */
static inline int mk_fifo_wait_credit(const mk_fifo_ctrl* c, uint64_t ticket, uint64_t timeout_ns) {
  uint64_t start = 0;
  for (uint32_t spin = 0;; ++spin) {
    if (ticket - __atomic_load_n(&c->tail, __ATOMIC_ACQUIRE) < c->capacity) return MK_FIFO_OK;
    if (mk_fifo_error(c) != MK_FIFO_ERR_NONE) return MK_FIFO_FAILED;
    if ((spin & 255u) == 255u) {
      uint64_t now = mk_fifo_now_ns();
      if (start == 0) start = now;
      else if (now - start > timeout_ns) return MK_FIFO_TIMEOUT;
    }
    mk_fifo_pause();
  }
}

/* Steps 3 and 4: fill the ticket's slot from *cmd (cmd->seq ignored) and publish. */
static inline void mk_fifo_publish(mk_fifo_ctrl* c, uint64_t ticket, const mk_fifo_cmd* cmd) {
  if (c->format == MK_FIFO_FORMAT_LL) {
    /* Release on each word: the caller's earlier stores (the data) come first; x86 pays nothing. */
    uint32_t p[MK_FIFO_LL_WORDS];
    mk_fifo_ll_payload(cmd, p);
    const uint64_t tag = (uint64_t)mk_fifo_ll_tag(ticket) << 32;
    mk_fifo_ll_entry* e = mk_fifo_ll_entries(c) + (ticket & (uint64_t)(c->capacity - 1u));
    for (uint32_t i = 0; i < MK_FIFO_LL_WORDS; ++i) __atomic_store_n(&e->word[i], tag | p[i], __ATOMIC_RELEASE);
    return;
  }
  mk_fifo_cmd* s = mk_fifo_slot(c, ticket);
  s->kind = cmd->kind;
  s->flags = cmd->flags;
  s->peer = cmd->peer;
  s->arrival_slot = cmd->arrival_slot;
  s->local_buf = cmd->local_buf;
  s->remote_buf = cmd->remote_buf;
  s->local_off = cmd->local_off;
  s->remote_off = cmd->remote_off;
  s->bytes = cmd->bytes;
  s->arrival_seq = cmd->arrival_seq;
  s->enqueue_ns = cmd->enqueue_ns;
  __atomic_store_n(&s->seq, ticket + 1u, __ATOMIC_RELEASE);
}

/* The whole producer protocol for a host thread. On MK_FIFO_OK *ticket is the
 * command's ticket. On MK_FIFO_TIMEOUT the caller still owns *ticket: call
 * mk_fifo_push_resume to keep waiting, or mk_fifo_fail — never drop it. */
static inline int mk_fifo_push(mk_fifo_ctrl* c, const mk_fifo_cmd* cmd, uint64_t timeout_ns, uint64_t* ticket) {
  if (mk_fifo_error(c) != MK_FIFO_ERR_NONE) return MK_FIFO_FAILED;
  *ticket = __atomic_fetch_add(&c->head, 1u, __ATOMIC_RELAXED);
  int rc = mk_fifo_wait_credit(c, *ticket, timeout_ns);
  if (rc == MK_FIFO_OK) mk_fifo_publish(c, *ticket, cmd);
  return rc;
}

static inline int mk_fifo_push_resume(mk_fifo_ctrl* c, const mk_fifo_cmd* cmd, uint64_t timeout_ns, uint64_t ticket) {
  int rc = mk_fifo_wait_credit(c, ticket, timeout_ns);
  if (rc == MK_FIFO_OK) mk_fifo_publish(c, ticket, cmd);
  return rc;
}

/* Wait until command `ticket` and all before it finished (its source memory is free). */
static inline int mk_fifo_wait_done(const mk_fifo_ctrl* c, uint64_t ticket, uint64_t timeout_ns) {
  uint64_t start = 0;
  for (uint32_t spin = 0;; ++spin) {
    if (__atomic_load_n(&c->done, __ATOMIC_ACQUIRE) > ticket) return MK_FIFO_OK;
    if (mk_fifo_error(c) != MK_FIFO_ERR_NONE) return MK_FIFO_FAILED;
    if ((spin & 255u) == 255u) {
      uint64_t now = mk_fifo_now_ns();
      if (start == 0) start = now;
      else if (now - start > timeout_ns) return MK_FIFO_TIMEOUT;
    }
    mk_fifo_pause();
  }
}

/* Receiver: wait until arrival flag word *flag holds >= seq (acquire). */
static inline int mk_fifo_flag_wait(const uint64_t* flag, uint64_t seq, uint64_t timeout_ns) {
  uint64_t start = 0;
  for (uint32_t spin = 0;; ++spin) {
    if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) >= seq) return MK_FIFO_OK;
    if ((spin & 255u) == 255u) {
      uint64_t now = mk_fifo_now_ns();
      if (start == 0) start = now;
      else if (now - start > timeout_ns) return MK_FIFO_TIMEOUT;
    }
    mk_fifo_pause();
  }
}

#endif /* !__CUDA_ARCH__ */

/* ── Device side: a GPU warp's lane ─────────────────────────────────────────── */
#if defined(__CUDACC__)

static __device__ __forceinline__ uint64_t mk_fifo_ld_acquire_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

static __device__ __forceinline__ void mk_fifo_st_release_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

static __device__ __forceinline__ uint64_t mk_fifo_globaltimer(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* What a device wait saw (mk_fifo_push_device, mk_fifo_flag_wait_device). The
 * device functions never print or trap themselves: they return a status and
 * this record, and the caller — C++ CUDA code that knows the op, group and
 * rank (kernels/comm/net_ops.cuh) — writes its host-mapped diagnostic
 * (comm::WaitDiagnostic through comm::fail_wait) and traps. This header stays
 * C (no C++ types), and mkernel keeps ONE record format and ONE claim-and-trap
 * implementation for every bounded wait. */
typedef struct mk_fifo_wait_result {
  int32_t rc;          /* mk_fifo_result */
  uint32_t error;      /* MK_FIFO_FAILED: ctrl->error (acquired) */
  uint32_t error_peer; /* MK_FIFO_FAILED: ctrl->error_peer, complete once error is seen */
  uint32_t pad;
  uint64_t ticket;     /* push: the ticket taken (valid for every rc) */
  uint64_t seen;       /* push: the tail last read; flag wait: the flag's last value */
  uint64_t elapsed_ns; /* how long the wait spun (0 when it never had to) */
} mk_fifo_wait_result;

static __device__ __forceinline__ uint32_t mk_fifo_ld_acquire_sys_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/* The device side of mk_fifo_fail (same claim/details/publish order). The CAS
 * on host-mapped memory is a system-scope atomic: on a platform without PCIe
 * AtomicOps it is not atomic against a CPU failing at the same instant, and
 * the worst outcome is a record mixing the two parties' details — the kernel
 * traps right after and its own WaitDiagnostic is authoritative. */
static __device__ __forceinline__ void mk_fifo_fail_device(mk_fifo_ctrl* c, uint32_t error, uint32_t peer,
                                                           uint64_t ticket) {
  if (atomicCAS_system(&c->error_state, (unsigned)MK_FIFO_ERROR_FREE, (unsigned)MK_FIFO_ERROR_CLAIMED) !=
      (unsigned)MK_FIFO_ERROR_FREE)
    return;
  *(volatile uint32_t*)&c->error_peer = peer;
  *(volatile uint64_t*)&c->error_ticket = ticket;
  __threadfence_system();
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(&c->error), "r"(error) : "memory");
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(&c->error_state), "r"((unsigned)MK_FIFO_ERROR_SET)
               : "memory");
}

/* Steps 1 and 2 of both formats: a ticket, then bounded credit (see mk_fifo_push_device). */
static __device__ __forceinline__ mk_fifo_wait_result mk_fifo_take_ticket_device(mk_fifo_ctrl* c, uint32_t cap,
                                                                                 unsigned long long* head,
                                                                                 uint64_t* cached_tail,
                                                                                 uint32_t peer, uint64_t timeout_ns) {
  mk_fifo_wait_result r = {MK_FIFO_OK, 0u, 0u, 0u, 0u, 0u, 0u};
  r.ticket = (uint64_t)atomicAdd(head, 1ull);
  r.seen = *cached_tail;
  if (r.ticket - *cached_tail >= cap) {
    const uint64_t start = mk_fifo_globaltimer();
    for (;;) {
      r.seen = *cached_tail = mk_fifo_ld_acquire_sys(&c->tail);
      if (r.ticket - r.seen < cap) break;
      const uint32_t err = mk_fifo_ld_acquire_sys_u32(&c->error);
      if (err != MK_FIFO_ERR_NONE) {
        r.rc = MK_FIFO_FAILED;
        r.error = err;
        r.error_peer = *(volatile uint32_t*)&c->error_peer;
        r.elapsed_ns = mk_fifo_globaltimer() - start;
        return r;
      }
      r.elapsed_ns = mk_fifo_globaltimer() - start;
      if (r.elapsed_ns > timeout_ns) {
        mk_fifo_fail_device(c, MK_FIFO_ERR_PRODUCER, peer, r.ticket);
        r.rc = MK_FIFO_TIMEOUT;
        return r;
      }
      __nanosleep(64);
    }
  }
  return r;
}

/* Push one command from one thread. `c` is the device pointer of the mapped
 * FIFO and `cap` its capacity (pass it in the kernel's Params: reading
 * c->capacity would cost a PCIe round trip per push); `head` the ticket
 * counter (device memory shared by the FIFO's warps, or &c->head where PCIe
 * atomics are known to work); `cached_tail` the caller's cached tail (start it
 * at 0). cmd.seq and cmd.enqueue_ns are filled here (%globaltimer: the FIFO's
 * clock must be MK_FIFO_CLOCK_GLOBALTIMER for the proxy to use it).
 *
 * Returns rc MK_FIFO_OK once the command is published. MK_FIFO_FAILED: the FIFO
 * was failed by someone else (error/error_peer say why) while this thread
 * waited for credit. MK_FIFO_TIMEOUT: no credit within timeout_ns; this
 * producer then failed the FIFO itself (MK_FIFO_ERR_PRODUCER, cmd.peer, its
 * ticket) so that the proxy reports the lost ticket. In both failure cases the
 * ticket stays unpublished and the caller must not push again: record and trap.
 * No printf, no call: safe inside a wgmma kernel. Publication (a system fence,
 * then seq) orders every earlier store of THIS thread, and of the threads of its
 * CTA when they are synchronized with it by a barrier first (see net_ops.cuh's
 * net_put_signal), before the command. */
static __device__ __forceinline__ mk_fifo_wait_result mk_fifo_push_device(mk_fifo_ctrl* c, uint32_t cap,
                                                                          unsigned long long* head,
                                                                          uint64_t* cached_tail, mk_fifo_cmd cmd,
                                                                          uint64_t timeout_ns) {
  const mk_fifo_wait_result r = mk_fifo_take_ticket_device(c, cap, head, cached_tail, cmd.peer, timeout_ns);
  if (r.rc != MK_FIFO_OK) return r;
  mk_fifo_cmd* s = mk_fifo_slots(c) + (r.ticket & (uint64_t)(cap - 1u));
  cmd.enqueue_ns = mk_fifo_globaltimer();
  /* Words 1..7 of the slot (word 1 alone, then 16-byte stores: four PCIe writes, not seven),
   * then word 0 (seq) with ONE st.release.sys: a MEMBAR.ALL.SYS before the store orders the
   * slot and every earlier store of this thread — and, cumulatively, of its CTA after a
   * barrier — before seq. (__threadfence_system() + a relaxed store would be MEMBAR.SC.SYS
   * plus an L1 invalidation: the SC fence is the costlier one, and an acquire-side
   * invalidation buys the producer nothing.) */
  const uint64_t* w = (const uint64_t*)(const void*)&cmd;
  uint64_t* d = (uint64_t*)(void*)s;
  d[1] = w[1];
#pragma unroll
  for (int i = 2; i < 8; i += 2) {
    asm volatile("st.global.v2.u64 [%0], {%1, %2};" ::"l"(d + i), "l"(w[i]), "l"(w[i + 1]) : "memory");
  }
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(&s->seq), "l"(r.ticket + 1u) : "memory");
  return r;
}

/* The same push into an LL-format FIFO (mk_fifo_ctrl.format == MK_FIFO_FORMAT_LL; `cap` counts
 * its 128-byte entries): the 14 tagged words as seven 16-byte st.relaxed.sys stores (each
 * 8-byte half single-copy atomic), no publication store and no fence between payload and
 * publication. order_prior != 0 puts one fence.acq_rel.sys BEFORE the entry (what
 * st.release.sys implies in the SEQ format): required when the command depends on earlier
 * memory accesses of this thread or, after a barrier, its CTA — a WRITE of data the kernel
 * stored. With order_prior == 0 (a pure signal) the push issues no fence at all. Same return
 * values and failure handling as mk_fifo_push_device. */
static __device__ __forceinline__ mk_fifo_wait_result mk_fifo_push_device_ll(mk_fifo_ctrl* c, uint32_t cap,
                                                                             unsigned long long* head,
                                                                             uint64_t* cached_tail, mk_fifo_cmd cmd,
                                                                             uint64_t timeout_ns, int order_prior) {
  const mk_fifo_wait_result r = mk_fifo_take_ticket_device(c, cap, head, cached_tail, cmd.peer, timeout_ns);
  if (r.rc != MK_FIFO_OK) return r;
  cmd.enqueue_ns = mk_fifo_globaltimer();
  uint32_t p[MK_FIFO_LL_WORDS];
  mk_fifo_ll_payload(&cmd, p);
  const uint64_t tag = (uint64_t)mk_fifo_ll_tag(r.ticket) << 32;
  uint64_t* d = mk_fifo_ll_entries(c)[r.ticket & (uint64_t)(cap - 1u)].word;
  if (order_prior) asm volatile("fence.acq_rel.sys;" ::: "memory");
#pragma unroll
  for (int i = 0; i < (int)MK_FIFO_LL_WORDS; i += 2) {
    asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(d + i), "l"(tag | p[i]), "l"(tag | p[i + 1])
                 : "memory");
  }
  return r;
}

/* Receiver on the GPU: spin on an arrival flag until it holds >= seq, bounded.
 * rc MK_FIFO_OK, or MK_FIFO_TIMEOUT with `seen` the flag's last value; the
 * caller records and traps (C++ kernels use comm::wait_geq instead, which
 * does both). */
static __device__ __forceinline__ mk_fifo_wait_result mk_fifo_flag_wait_device(const uint64_t* flag, uint64_t seq,
                                                                               uint64_t timeout_ns) {
  mk_fifo_wait_result r = {MK_FIFO_OK, 0u, 0u, 0u, 0u, 0u, 0u};
  if ((r.seen = mk_fifo_ld_acquire_sys(flag)) >= seq) return r;
  const uint64_t start = mk_fifo_globaltimer();
  while ((r.seen = mk_fifo_ld_acquire_sys(flag)) < seq) {
    r.elapsed_ns = mk_fifo_globaltimer() - start;
    if (r.elapsed_ns > timeout_ns) {
      r.rc = MK_FIFO_TIMEOUT;
      return r;
    }
    __nanosleep(32);
  }
  return r;
}

#endif /* __CUDACC__ */

#ifdef __cplusplus
}
#endif

#endif /* MKERNEL_FIFO_H_ */
