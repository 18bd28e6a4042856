// A C caller of libmkernel_core through nothing but mkernel/core_api.h:
// it dlopens the library, takes the table from mk_get_api, and drives every
// entry once, including the error paths. Run by capi_test.go as
//   abi_test <path to libmkernel_core.so> <fake sysfs root>
// and, for the 2-rank case, as two processes sharing a job id.
#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mkernel/core_api.h"
#include "mkernel/fifo.h"

static const mk_api_v1* api;
static int failures;

#define EXPECT(cond, ...)                                      \
  do {                                                         \
    if (!(cond)) {                                             \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                            \
      fprintf(stderr, "\n");                                   \
      failures++;                                              \
    }                                                          \
  } while (0)

static const char* last_error(void) {
  static char buf[4096];
  size_t len = sizeof buf;
  if (api->last_error(buf, &len) != MK_OK) return "(last_error failed)";
  return buf;
}

static void test_diagnostics(void) {
  EXPECT(api->size >= sizeof(mk_api_v1), "table size %zu", api->size);
  EXPECT(api->version == MK_API_VERSION, "version %u", api->version);
  EXPECT(strcmp(api->name, MK_API_NAME) == 0, "name %s", api->name);
  EXPECT(strlen(api->get_version()) > 0, "empty version");
  EXPECT(strcmp(api->status_string(MK_ERR_TIMEOUT), "timeout") == 0, "%s", api->status_string(MK_ERR_TIMEOUT));
  EXPECT(strcmp(api->status_string((mk_status)999), "unknown status") == 0, "unknown");
  EXPECT(api->log_set_level("loud") == MK_ERR_INVALID_ARGUMENT, "bad level accepted");
  EXPECT(strstr(last_error(), "level") != NULL, "message: %s", last_error());
  EXPECT(api->log_set_level("error") == MK_OK, "%s", last_error());
  EXPECT(api->log_emit("info", "c.test", "hello from C") == MK_OK, "%s", last_error());
  EXPECT(strcmp(last_error(), "") == 0, "success must clear last error: %s", last_error());
}

static void test_topology(const char* sysfs) {
  size_t len = 0;
  EXPECT(api->topology_json(sysfs, NULL, &len) == MK_ERR_BUFFER_TOO_SMALL, "size probe");
  EXPECT(len > 2, "needed %zu", len);
  char* buf = malloc(len);
  size_t cap = len;
  EXPECT(api->topology_json(sysfs, buf, &cap) == MK_OK, "%s", last_error());
  EXPECT(cap == len && strlen(buf) + 1 == len, "len %zu cap %zu strlen %zu", len, cap, strlen(buf));
  EXPECT(strstr(buf, "\"gpus\"") && strstr(buf, "\"placements\""), "json: %.200s", buf);
  free(buf);
  cap = 8;
  char small[8];
  EXPECT(api->topology_json("/nonexistent/sysfs", small, &cap) != MK_OK, "missing root accepted");
  EXPECT(strstr(last_error(), "topology_json") != NULL, "message: %s", last_error());
}

static void test_session_errors(void) {
  mk_session_config cfg = MK_SESSION_CONFIG_INITIALIZER;
  mk_session_t s = 0;
  EXPECT(api->session_create(NULL, &s) == MK_ERR_INVALID_ARGUMENT, "NULL cfg");
  cfg.rank = 3;
  cfg.world = 2;
  cfg.id = "x";
  EXPECT(api->session_create(&cfg, &s) == MK_ERR_INVALID_ARGUMENT, "rank out of range");
  EXPECT(strstr(last_error(), "rank 3 of world 2") != NULL, "message: %s", last_error());
  cfg.size = 8;
  EXPECT(api->session_create(&cfg, &s) == MK_ERR_VERSION, "short config accepted");
  int32_t r, w;
  EXPECT(api->session_rank(12345, &r, &w) == MK_ERR_CLOSED, "unknown handle");
  EXPECT(api->session_destroy(12345) == MK_ERR_CLOSED, "unknown handle destroy");
  size_t len = 0;
  EXPECT(api->bootstrap_listen("", 0, NULL, &len) == MK_ERR_INVALID_ARGUMENT, "world 0");
}

// The data path from C: rank r writes a pattern into buffer 1 of rank r+1 through the FIFO
// (fifo.h's host producer), signals arrival slot r, and checks what rank r-1 wrote.
static void test_datapath(mk_session_t s, int rank, int world) {
  mk_datapath_config bad = MK_DATAPATH_CONFIG_INITIALIZER;
  mk_datapath_t d = 0;
  bad.size = 8;
  EXPECT(api->datapath_create(s, &bad, &d) == MK_ERR_VERSION, "short config accepted");
  bad.size = sizeof bad;
  bad.version = MK_API_VERSION + 1;
  EXPECT(api->datapath_create(s, &bad, &d) == MK_ERR_VERSION, "config from a future ABI accepted");
  uint32_t ids[1] = {1};
  uint64_t sizes[1] = {1 << 20};
  mk_datapath_config cfg = MK_DATAPATH_CONFIG_INITIALIZER;
  cfg.num_buffers = 1;
  cfg.buffer_ids = ids;
  cfg.buffer_bytes = sizes;
  cfg.net = "tcp";
  cfg.timeout_ms = 20000;
  // ABI v2: GPU memory offered for buffer 5; tcp cannot register it, so it becomes host
  // staging of the same size. (The address is never touched on this path.)
  mk_device_buffer dev = {5, 0, 0x7f0000000000ull, 3 << 16, -1, 0, 0};
  cfg.num_device_buffers = 1;
  cfg.device_buffers = &dev;
  cfg.fifo_clock = MK_FIFO_CLOCK_GLOBALTIMER;
  if (api->datapath_create(s, &cfg, &d) != MK_OK) {
    EXPECT(0, "datapath_create: %s", last_error());
    return;
  }
  void* buf = NULL;
  size_t bytes = 0;
  EXPECT(api->datapath_buffer(d, 1, &buf, &bytes) == MK_OK && bytes >= (1u << 20), "%s", last_error());
  EXPECT(api->datapath_buffer(d, 7, &buf, &bytes) == MK_ERR_INVALID_ARGUMENT, "unknown buffer");
  void* flags = NULL;
  size_t flag_bytes = 0;
  EXPECT(api->datapath_buffer(d, 0, &flags, &flag_bytes) == MK_OK && flag_bytes >= 4096 * 8, "%s", last_error());
  void* fifo = NULL;
  EXPECT(api->datapath_fifo(d, &fifo) == MK_OK && fifo != NULL, "%s", last_error());
  EXPECT(fifo == NULL || ((mk_fifo_ctrl*)fifo)->clock == MK_FIFO_CLOCK_GLOBALTIMER, "fifo_clock ignored");
  mk_buffer_info info = {sizeof(mk_buffer_info), 0, 0, NULL, 0};
  EXPECT(api->datapath_buffer_info(d, 5, &info) == MK_OK && info.kind == MK_BUFFER_HOST && info.gpu == -1 &&
             info.ptr != NULL && info.bytes == (3u << 16),
         "buffer 5: kind %u gpu %d bytes %llu: %s", info.kind, info.gpu, (unsigned long long)info.bytes, last_error());
  EXPECT(api->datapath_buffer(d, 5, &buf, &bytes) == MK_OK && buf == info.ptr, "staging not mapped: %s", last_error());
  EXPECT(api->datapath_buffer_info(d, 9, &info) == MK_ERR_INVALID_ARGUMENT, "unknown buffer 9");
  info.size = 4;
  EXPECT(api->datapath_buffer_info(d, 5, &info) == MK_ERR_VERSION, "short mk_buffer_info accepted");
  if (world > 1 && fifo != NULL) {
    api->datapath_buffer(d, 1, &buf, &bytes);
    unsigned char* mem = (unsigned char*)buf;
    for (int i = 0; i < 1000; i++) mem[4096 + i] = (unsigned char)(rank * 7 + i);
    mk_fifo_cmd cmd = {0};
    cmd.kind = MK_FIFO_WRITE_SIGNAL;
    cmd.peer = (uint16_t)((rank + 1) % world);
    cmd.local_buf = 1;
    cmd.local_off = 4096;
    cmd.remote_buf = 1;
    cmd.remote_off = (uint64_t)rank * 1000;
    cmd.bytes = 1000;
    cmd.arrival_slot = (uint32_t)rank;
    cmd.arrival_seq = 1;
    cmd.enqueue_ns = mk_fifo_now_ns();
    uint64_t ticket = 0;
    EXPECT(mk_fifo_push((mk_fifo_ctrl*)fifo, &cmd, 5000000000ull, &ticket) == MK_FIFO_OK, "push");
    int prev = (rank + world - 1) % world;
    const uint64_t* flag = (const uint64_t*)flags + prev;
    EXPECT(mk_fifo_flag_wait(flag, 1, 20000000000ull) == MK_FIFO_OK, "no arrival from rank %d", prev);
    for (int i = 0; i < 1000; i++) {
      if (mem[prev * 1000 + i] != (unsigned char)(prev * 7 + i)) {
        EXPECT(0, "byte %d from rank %d", i, prev);
        break;
      }
    }
    EXPECT(mk_fifo_wait_done((mk_fifo_ctrl*)fifo, ticket, 20000000000ull) == MK_FIFO_OK, "never done");
    EXPECT(api->session_barrier(s, 20000) == MK_OK, "%s", last_error());  // peers finished reading
  }
  EXPECT(api->datapath_check(d) == MK_OK, "%s", last_error());
  char stats[16384];
  size_t len = sizeof stats;
  EXPECT(api->datapath_stats_json(d, stats, &len) == MK_OK, "%s", last_error());
  EXPECT(strstr(stats, "\"latency\"") && strstr(stats, "\"queue_depth\""), "stats: %.300s", stats);
  EXPECT(world == 1 || strstr(stats, "\"finished\":1,") != NULL, "stats: %.300s", stats);
  EXPECT(api->datapath_destroy(d) == MK_OK, "%s", last_error());
  EXPECT(api->datapath_check(d) == MK_ERR_CLOSED, "check after destroy");
}

// ABI v3's device copier, as the torch extension's copy engine would be: every rank's "GPU
// buffer" is its slice of one file mapped by every rank process (the transport never touches
// those addresses), and a copy is a memcpy into the peer's slice.
enum { kGdrSlice = 1 << 16 };
typedef struct {
  unsigned char* base;  // world slices of kGdrSlice bytes
  int rank;
  uint64_t next;        // tokens handed out
  int calls;
  int bad_args;
} fake_copier;

static int32_t fake_copy_start(void* ctx, int32_t peer, uint32_t local_buf, uint64_t local_off,
                               uint32_t remote_buf, uint64_t remote_off, uint64_t bytes, uint64_t* token) {
  fake_copier* c = (fake_copier*)ctx;
  if (local_buf != 6 || remote_buf != 6 || local_off + bytes > kGdrSlice || remote_off + bytes > kGdrSlice) {
    c->bad_args++;
    return 1;
  }
  memcpy(c->base + (size_t)peer * kGdrSlice + remote_off, c->base + (size_t)c->rank * kGdrSlice + local_off, bytes);
  c->calls++;
  *token = c->next++;
  return 0;
}

static int32_t fake_copy_done(void* ctx, uint64_t token, int32_t* done) {
  fake_copier* c = (fake_copier*)ctx;
  *done = token < c->next;
  return 0;
}

// The loopback GPU-direct emulation through the C ABI: GPU buffer 6 on every rank (each rank on
// its own node), a device copier (which turns the emulation on without MKERNEL_NET_GDR), rank r
// writes 1000 bytes to rank r+1: the copier is called once with the command's buffers and
// offsets, the peer's flag comes after the bytes. A copier with one of its two functions is refused.
static void test_datapath_gdr(mk_session_t s, int rank, int world, const char* id) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the job id: one file name per job
  for (const char* p = id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  char path[128];
  snprintf(path, sizeof path, "/tmp/mk-abi-gdr-%016" PRIx64, h);
  int fd = open(path, O_RDWR | O_CREAT, 0600);
  EXPECT(fd >= 0 && ftruncate(fd, (off_t)world * kGdrSlice) == 0, "shared file %s", path);
  if (fd < 0) return;
  unsigned char* base = mmap(NULL, (size_t)world * kGdrSlice, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  EXPECT(base != MAP_FAILED, "mmap %s", path);
  if (base == MAP_FAILED) return;
  EXPECT(api->session_barrier(s, 20000) == MK_OK, "%s", last_error());  // every rank mapped it
  fake_copier copier = {base, rank, 0, 0, 0};
  int32_t node[64];
  for (int i = 0; i < world && i < 64; i++) node[i] = i;
  mk_device_buffer dev = {6, 0, (uint64_t)(uintptr_t)(base + (size_t)rank * kGdrSlice), kGdrSlice, -1, 0, 0};
  mk_datapath_config cfg = MK_DATAPATH_CONFIG_INITIALIZER;
  cfg.node = node;
  cfg.net = "loopback";
  cfg.timeout_ms = 20000;
  cfg.num_device_buffers = 1;
  cfg.device_buffers = &dev;
  cfg.fifo_clock = MK_FIFO_CLOCK_GLOBALTIMER;
  cfg.device_copy_start = fake_copy_start;
  cfg.device_copy_ctx = &copier;
  mk_datapath_t d = 0;
  EXPECT(api->datapath_create(s, &cfg, &d) == MK_ERR_INVALID_ARGUMENT, "a copier without device_copy_done accepted");
  cfg.device_copy_done = fake_copy_done;
  if (api->datapath_create(s, &cfg, &d) != MK_OK) {
    EXPECT(0, "datapath_create (GPU-direct): %s", last_error());
    munmap(base, (size_t)world * kGdrSlice);
    return;
  }
  mk_buffer_info info = {sizeof(mk_buffer_info), 0, 0, NULL, 0};
  EXPECT(api->datapath_buffer_info(d, 6, &info) == MK_OK && info.kind == MK_BUFFER_DEVICE &&
             info.bytes == kGdrSlice,
         "buffer 6: kind %u bytes %llu: %s", info.kind, (unsigned long long)info.bytes, last_error());
  void* flags = NULL;
  size_t flag_bytes = 0;
  void* fifo = NULL;
  EXPECT(api->datapath_buffer(d, 0, &flags, &flag_bytes) == MK_OK, "%s", last_error());
  EXPECT(api->datapath_fifo(d, &fifo) == MK_OK && fifo != NULL, "%s", last_error());
  unsigned char* mine = base + (size_t)rank * kGdrSlice;
  for (int i = 0; i < 1000; i++) mine[i] = (unsigned char)(rank * 13 + i);
  mk_fifo_cmd cmd = {0};
  cmd.kind = MK_FIFO_WRITE_SIGNAL;
  cmd.peer = (uint16_t)((rank + 1) % world);
  cmd.local_buf = 6;
  cmd.remote_buf = 6;
  cmd.remote_off = 4096;
  cmd.bytes = 1000;
  cmd.arrival_slot = (uint32_t)rank;
  cmd.arrival_seq = 1;
  cmd.enqueue_ns = mk_fifo_now_ns();
  uint64_t ticket = 0;
  EXPECT(mk_fifo_push((mk_fifo_ctrl*)fifo, &cmd, 5000000000ull, &ticket) == MK_FIFO_OK, "push");
  int prev = (rank + world - 1) % world;
  EXPECT(mk_fifo_flag_wait((const uint64_t*)flags + prev, 1, 20000000000ull) == MK_FIFO_OK, "no arrival from rank %d", prev);
  for (int i = 0; i < 1000; i++) {
    if (mine[4096 + i] != (unsigned char)(prev * 13 + i)) {
      EXPECT(0, "GPU-direct byte %d from rank %d", i, prev);
      break;
    }
  }
  EXPECT(mk_fifo_wait_done((mk_fifo_ctrl*)fifo, ticket, 20000000000ull) == MK_FIFO_OK, "never done");
  EXPECT(copier.calls == 1 && copier.bad_args == 0, "copier: %d calls, %d with bad arguments", copier.calls, copier.bad_args);
  EXPECT(api->session_barrier(s, 20000) == MK_OK, "%s", last_error());
  EXPECT(api->datapath_destroy(d) == MK_OK, "%s", last_error());
  munmap(base, (size_t)world * kGdrSlice);
  if (rank == 0) unlink(path);
}

// Runs one rank of a job; rank 0 also creates the id and prints it.
static void run_rank(int rank, int world, const char* id_in) {
  char id[512];
  if (rank == 0) {
    size_t len = 0;
    EXPECT(api->bootstrap_listen("127.0.0.1", world, NULL, &len) == MK_ERR_BUFFER_TOO_SMALL, "probe");
    len = sizeof id;
    EXPECT(api->bootstrap_listen("127.0.0.1", world, id, &len) == MK_OK, "%s", last_error());
    printf("ID %s\n", id);
    fflush(stdout);
  } else {
    snprintf(id, sizeof id, "%s", id_in);
  }
  mk_session_config cfg = MK_SESSION_CONFIG_INITIALIZER;
  cfg.rank = rank;
  cfg.world = world;
  cfg.id = id;
  cfg.timeout_ms = 20000;
  mk_session_t s = 0;
  if (api->session_create(&cfg, &s) != MK_OK) {
    EXPECT(0, "session_create: %s", last_error());
    return;
  }
  int32_t r = -1, w = -1;
  EXPECT(api->session_rank(s, &r, &w) == MK_OK && r == rank && w == world, "rank %d world %d", r, w);
  // Blob of rank r: r+1 bytes of value r (ragged sizes).
  unsigned char blob[64];
  memset(blob, rank, (size_t)rank + 1);
  size_t need = 0;
  for (int i = 0; i < world; i++) need += 8 + (size_t)i + 1;
  unsigned char out[4096];
  size_t out_len = 4;  // too small: the collective completes, the result stays retrievable
  EXPECT(api->session_allgather(s, blob, (size_t)rank + 1, out, &out_len, 20000) == MK_ERR_BUFFER_TOO_SMALL,
         "small buffer");
  EXPECT(out_len == need, "needed %zu, want %zu", out_len, need);
  out_len = sizeof out;
  EXPECT(api->session_gathered(s, out, &out_len) == MK_OK, "%s", last_error());
  size_t off = 0;
  for (int i = 0; i < world; i++) {
    uint64_t n;
    memcpy(&n, out + off, 8);
    off += 8;
    EXPECT(n == (uint64_t)i + 1, "rank %d blob length %" PRIu64, i, n);
    for (uint64_t k = 0; k < n; k++) EXPECT(out[off + k] == i, "rank %d byte %" PRIu64, i, k);
    off += n;
  }
  EXPECT(api->session_barrier(s, 20000) == MK_OK, "%s", last_error());
  test_datapath(s, rank, world);
  if (world > 1) test_datapath_gdr(s, rank, world, id);
  EXPECT(api->session_destroy(s) == MK_OK, "%s", last_error());
  EXPECT(api->session_barrier(s, 1000) == MK_ERR_CLOSED, "barrier after destroy");
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s LIB SYSFS [RANK WORLD [ID]]\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  mk_get_api_fn get = (mk_get_api_fn)dlsym(lib, "mk_get_api");
  if (!get) {
    fprintf(stderr, "dlsym mk_get_api: %s\n", dlerror());
    return 2;
  }
  if (get(MK_API_VERSION + 1) != NULL) {
    fprintf(stderr, "FAIL: a future ABI version must be refused\n");
    return 1;
  }
  api = get(MK_API_VERSION);
  if (!api) {
    fprintf(stderr, "mk_get_api(%u) = NULL\n", MK_API_VERSION);
    return 2;
  }
  if (argc == 3) {
    test_diagnostics();
    test_topology(argv[2]);
    test_session_errors();
    run_rank(0, 1, NULL);
  } else {
    run_rank(atoi(argv[3]), atoi(argv[4]), argc > 5 ? argv[5] : NULL);
  }
  if (failures) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("PASS\n");
  return 0;
}
