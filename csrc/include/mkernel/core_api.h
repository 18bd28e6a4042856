/*
 * mkernel/core_api.h — the one C ABI between the Go control plane
 * (libmkernel_core, gocore/capi) and the C++/CUDA torch extension.
 *
 * Contract
 *  - The Go library exports exactly one entry point, mk_get_api(), returning
 *    a versioned, immutable table of function pointers (mk_api_v1). Callers
 *    never link against the individual functions: inside a Python process the
 *    table's address travels from the gopy module to the torch extension at
 *    import (as NumPy hands out its C-API capsule), so exactly one Go runtime
 *    lives in the process.
 *  - Every function returns an mk_status. On failure a human-readable message
 *    naming what failed (argument, peer, rank) is kept per calling thread and
 *    read with last_error(). No Go panic ever crosses this boundary: a panic
 *    becomes MK_ERR_INTERNAL with the panic text as the message.
 *  - Handles are opaque 64-bit values; 0 is never a valid handle.
 *  - Config structs start with `size` and `version` and have an initializer
 *    macro, so they can grow without breaking old callers.
 *  - Strings passed in are NUL-terminated UTF-8 and borrowed for the call only.
 *    Strings/buffers passed out use (buf, *len): on entry *len is the buffer's
 *    capacity; on return it is the size needed (including the NUL for strings).
 *    If the buffer is too small the call returns MK_ERR_BUFFER_TOO_SMALL and
 *    writes nothing, so callers can size-probe with buf = NULL, *len = 0.
 *  - Thread safety: every function may be called from any thread. Blocking
 *    calls take a timeout in milliseconds (<= 0 selects the default).
 *
 * Versioning: a new field or function is appended to the table and bumps
 * MK_API_VERSION; the table's `size` tells a caller which fields exist. A
 * frozen layout is never edited.
 */
#ifndef MKERNEL_CORE_API_H_
#define MKERNEL_CORE_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MK_API_VERSION 3u /* 2: datapath GPU buffers and FIFO clock (mk_datapath_config tail),
                             datapath_buffer_info; 3: the device copier (mk_datapath_config tail) */
#define MK_API_NAME "mkernel-core"

/* Status codes. Stable numbers: they cross process and language boundaries. */
typedef enum mk_status {
  MK_OK = 0,
  MK_ERR_INVALID_ARGUMENT = 1, /* a caller mistake; the message names the argument */
  MK_ERR_TIMEOUT = 2,          /* a bounded wait expired; the message says what for */
  MK_ERR_REMOTE = 3,           /* a peer failed or disconnected; the message names it */
  MK_ERR_AUTH = 4,             /* a peer failed authentication (wrong job secret) */
  MK_ERR_NOT_SUPPORTED = 5,    /* missing hardware, library or feature */
  MK_ERR_SYSTEM = 6,           /* an OS / network / driver call failed */
  MK_ERR_BUFFER_TOO_SMALL = 7, /* the (buf, *len) output was too small; *len says what is needed */
  MK_ERR_CLOSED = 8,           /* the handle was closed or never existed */
  MK_ERR_INTERNAL = 9,         /* a bug in mkernel (including a recovered Go panic) */
  MK_ERR_VERSION = 10          /* caller and library disagree on the ABI version */
} mk_status;

typedef uint64_t mk_session_t; /* a bootstrap session (rank rendezvous of one job) */

/* Bootstrap session configuration. Rank 0 creates the job's rendezvous id with
 * bootstrap_listen(); every rank (0 included) then calls session_create() with
 * that id. The id carries the root address and the per-job secret: publish it
 * only through a trusted channel (the torch.distributed store). */
typedef struct mk_session_config {
  size_t size;      /* sizeof(mk_session_config) */
  uint32_t version; /* MK_API_VERSION */
  int32_t rank;     /* 0 <= rank < world */
  int32_t world;    /* number of ranks, >= 1 */
  const char* id;   /* from bootstrap_listen() on rank 0 */
  int64_t timeout_ms; /* rendezvous timeout; <= 0: default (300 s) */
} mk_session_config;

#define MK_SESSION_CONFIG_INITIALIZER \
  { sizeof(mk_session_config), MK_API_VERSION, 0, 1, NULL, 0 }

typedef uint64_t mk_datapath_t; /* one rank's inter-node data path (buffers, FIFO, proxy) */

/* GPU memory offered for a symmetric buffer (mk_datapath_config.device_buffers, ABI v2).
 * Where the chosen transport registers GPU memory with the NIC (ibverbs, efa: through the
 * DMA-BUF fd with ibv_reg_dmabuf_mr, else nvidia-peermem on the device address), the
 * buffer IS this memory; elsewhere (tcp, loopback, plugins) the data path allocates host
 * shared memory of `bytes` for the id instead — a staging area the caller maps into the
 * GPU (cudaHostRegister). Every rank gets the same kind (they agree on one transport);
 * datapath_buffer_info says which. The memory must stay allocated until datapath_destroy. */
typedef struct mk_device_buffer {
  uint32_t id;            /* buffer id, != 0, unique among buffer_ids and device_buffers */
  int32_t gpu;            /* CUDA device ordinal */
  uint64_t ptr;           /* device virtual address */
  uint64_t bytes;
  int32_t dmabuf_fd;      /* cuMemGetHandleForAddressRange(DMA_BUF_FD), or -1 */
  uint32_t reserved;      /* 0 */
  uint64_t dmabuf_offset; /* ptr's offset inside the DMA-BUF */
} mk_device_buffer;

/* Where a data path buffer lives (datapath_buffer_info). */
typedef enum mk_buffer_kind {
  MK_BUFFER_HOST = 1,   /* host shared memory: ptr is this process's mapping */
  MK_BUFFER_DEVICE = 2  /* GPU memory registered with the NIC: ptr is the device address */
} mk_buffer_kind;

typedef struct mk_buffer_info {
  size_t size;    /* sizeof(mk_buffer_info), set by the caller */
  uint32_t kind;  /* mk_buffer_kind */
  int32_t gpu;    /* MK_BUFFER_DEVICE: its CUDA device, else -1 */
  void* ptr;
  uint64_t bytes;
} mk_buffer_info;

/* Data path configuration (datapath_create). Buffer ids are symmetric: every
 * rank passes the same ids (sizes may differ). Id 0 is reserved for the
 * arrival flag array (flag_slots 8-byte words, see mkernel/fifo.h). */
typedef struct mk_datapath_config {
  size_t size;                 /* sizeof(mk_datapath_config) */
  uint32_t version;            /* MK_API_VERSION */
  uint32_t num_buffers;        /* entries of buffer_ids / buffer_bytes */
  const uint32_t* buffer_ids;  /* ids, unique, != 0 */
  const uint64_t* buffer_bytes;
  uint32_t flag_slots;         /* arrival flag words; 0: 4096 */
  uint32_t fifo_slots;         /* FIFO capacity, a power of two; 0: 1024 */
  const int32_t* node;         /* world entries: each rank's (emulated) node; NULL: one rank per node */
  int32_t all_peers;           /* nonzero: connect ranks of the same node too */
  const char* net;             /* backend name ("tcp", "loopback", "ibverbs", "efa"); NULL or "": MKERNEL_NET / automatic */
  int64_t timeout_ms;          /* setup and stuck-command timeout; <= 0: 60 s */
  int32_t gpu;                 /* GPU index whose topology placement picks the NICs and the
                                  proxy thread's CPUs; -1: none (the thread floats) */
  /* --- ABI v2 (read only when `size` covers them) --- */
  uint32_t fifo_clock;         /* mk_fifo_clock of the producers' enqueue_ns (mkernel/fifo.h);
                                  0: MK_FIFO_CLOCK_MONOTONIC (host producers). GPU producers:
                                  MK_FIFO_CLOCK_GLOBALTIMER */
  uint32_t num_device_buffers; /* entries of device_buffers */
  const mk_device_buffer* device_buffers;
  /* --- ABI v3 (read only when `size` covers them) --- */
  /* The device copier: the "NIC DMA" of the loopback transport's GPU-direct emulation
   * (MKERNEL_NET_GDR=1, gocore/transport/loopback/gpudirect.go). When an op between two
   * device_buffers is due at the peer (after the emulated link's serialization and
   * latency), the proxy thread calls device_copy_start to copy `bytes` from this rank's
   * buffer local_buf at local_off to rank peer's buffer remote_buf at remote_off (ranges
   * checked), and releases the op's signal and completion once device_copy_done reports the
   * copy (and every earlier one) complete. Both return 0 on success, else a nonzero error
   * code of the implementation (a cudaError_t); device_copy_done sets *done to 1 or 0. At
   * most MK_DEVICE_COPIES_IN_FLIGHT copies are started and not yet seen done. Without
   * device_copy_start the loopback transport refuses device_buffers under MKERNEL_NET_GDR=1
   * (MK_ERR_NOT_SUPPORTED) rather than run a path that moves no data. Called from the proxy's
   * thread only, between datapath_create and datapath_destroy. */
  int32_t (*device_copy_start)(void* ctx, int32_t peer, uint32_t local_buf, uint64_t local_off,
                               uint32_t remote_buf, uint64_t remote_off, uint64_t bytes, uint64_t* token);
  int32_t (*device_copy_done)(void* ctx, uint64_t token, int32_t* done);
  void* device_copy_ctx;
} mk_datapath_config;

#define MK_DEVICE_COPIES_IN_FLIGHT 512 /* transport.MaxDeviceCopies */

#define MK_DATAPATH_CONFIG_INITIALIZER \
  { sizeof(mk_datapath_config), MK_API_VERSION, 0, NULL, NULL, 0, 0, NULL, 0, NULL, 0, -1, 0, 0, NULL, NULL, NULL, NULL }

typedef struct mk_api_v1 {
  size_t size;      /* sizeof the table the library was built with */
  uint32_t version; /* MK_API_VERSION of the library */
  const char* name; /* MK_API_NAME */

  /* --- diagnostics --- */
  const char* (*get_version)(void);            /* library version, static string */
  const char* (*status_string)(mk_status s);   /* static string, never NULL */
  /* The message of the last failed call on this thread ("" if none). */
  mk_status (*last_error)(char* buf, size_t* len);

  /* --- logging (one zap logger for Go and C++/Python records) --- */
  mk_status (*log_set_level)(const char* level); /* debug|info|warn|error */
  mk_status (*log_emit)(const char* level, const char* logger, const char* msg);

  /* --- topology: JSON of GPUs, NICs, NUMA nodes and per-GPU placement.
   *     sysfs_root NULL or "" means "/sys". --- */
  mk_status (*topology_json)(const char* sysfs_root, char* buf, size_t* len);

  /* --- bootstrap --- */
  /* Rank 0: bind the rendezvous of a job of `world` ranks on host ("" =
   * loopback; the port is chosen by the OS) and return the
   * job id text (address + secret) into (buf, *len). */
  mk_status (*bootstrap_listen)(const char* host, int32_t world, char* buf, size_t* len);
  mk_status (*session_create)(const mk_session_config* cfg, mk_session_t* out);
  mk_status (*session_rank)(mk_session_t s, int32_t* rank, int32_t* world);
  /* All-gather one blob per rank. out receives `world` records laid out as
   * [uint64 little-endian length][bytes] in rank order. (out, *out_len)
   * follows the buffer rule above; when it is too small the collective has
   * still completed, and session_gathered() copies its result again. */
  mk_status (*session_allgather)(mk_session_t s, const void* blob, size_t blob_len,
                                 void* out, size_t* out_len, int64_t timeout_ms);
  mk_status (*session_gathered)(mk_session_t s, void* out, size_t* out_len);
  mk_status (*session_barrier)(mk_session_t s, int64_t timeout_ms);
  mk_status (*session_destroy)(mk_session_t s); /* idempotent for a valid handle */

  /* --- inter-node data path (gocore/datapath): symmetric buffers in shared
   *     memory, a transport connected over the session, the command FIFO of
   *     mkernel/fifo.h and the proxy draining it --- */
  /* Collective over the session: every rank calls it with the same buffer ids. */
  mk_status (*datapath_create)(mk_session_t s, const mk_datapath_config* cfg, mk_datapath_t* out);
  /* The mapping of buffer `id` in this process (id 0: the arrival flags); valid
   * until datapath_destroy. */
  mk_status (*datapath_buffer)(mk_datapath_t d, uint32_t id, void** ptr, size_t* bytes);
  /* The FIFO: an mk_fifo_ctrl* followed by its slots (mkernel/fifo.h); host
   * producers push with mk_fifo_push, receivers wait with mk_fifo_flag_wait. */
  mk_status (*datapath_fifo)(mk_datapath_t d, void** fifo);
  /* MK_OK while the data path works; else the status of its failure (e.g.
   * MK_ERR_REMOTE or MK_ERR_TIMEOUT) with last_error naming the peer and slot. */
  mk_status (*datapath_check)(mk_datapath_t d);
  /* Proxy diagnostics as JSON: queue depth, in-flight per peer, latency
   * histogram (fixed buckets), oldest unfinished and blocked commands, error. */
  mk_status (*datapath_stats_json)(mk_datapath_t d, char* buf, size_t* len);
  /* Stops the proxy, closes the transport, unmaps the memory: producers must
   * have stopped. Idempotent for a valid handle. */
  mk_status (*datapath_destroy)(mk_datapath_t d);

  /* --- ABI v2 --- */
  /* Where buffer `id` lives: host memory (datapath_buffer's mapping) or GPU memory the
   * transport registered (a device_buffers entry). out->size must be set. */
  mk_status (*datapath_buffer_info)(mk_datapath_t d, uint32_t id, mk_buffer_info* out);
} mk_api_v1;

/* The library's one exported entry point. Returns NULL if the library cannot
 * serve an ABI of version `version` (a caller built for a newer ABI). */
const mk_api_v1* mk_get_api(uint32_t version);
typedef const mk_api_v1* (*mk_get_api_fn)(uint32_t version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MKERNEL_CORE_API_H_ */
