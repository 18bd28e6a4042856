// The mk_api_v1 table: the only symbol of libmkernel_core meant for C
// callers. Built by cgo together with _cgo_export.h, so a prototype that
// drifts from core_api.h fails this compile (incompatible pointer types are
// errors here).
#pragma GCC diagnostic error "-Wincompatible-pointer-types"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "_cgo_export.h"
#include "mkernel/core_api.h"

// The per-thread last-error message lives behind a pthread key, not in
// __thread storage: Go marks the library STATIC_TLS, so every byte of TLS
// here would come out of the static TLS block that dlopen() can run out of
// (it does inside a torch process).
enum { kLastErrorBytes = 4096 };
static pthread_key_t last_error_key;
static pthread_once_t last_error_once = PTHREAD_ONCE_INIT;

static void last_error_key_init(void) { pthread_key_create(&last_error_key, free); }

static char* last_error_buffer(void) {
  pthread_once(&last_error_once, last_error_key_init);
  char* buf = (char*)pthread_getspecific(last_error_key);
  if (buf == NULL) {
    buf = (char*)calloc(1, kLastErrorBytes);
    if (buf != NULL) pthread_setspecific(last_error_key, buf);
  }
  return buf;
}

void mk_capi_set_last_error(const char* msg) {
  char* buf = last_error_buffer();
  if (buf == NULL) return;
  size_t n = strlen(msg);
  if (n >= kLastErrorBytes) n = kLastErrorBytes - 1;
  memcpy(buf, msg, n);
  buf[n] = '\0';
}

const char* mk_capi_get_last_error(void) {
  const char* buf = last_error_buffer();
  return buf != NULL ? buf : "out of memory for the error message";
}

static const mk_api_v1 kApiV1 = {
    .size = sizeof(mk_api_v1),
    .version = MK_API_VERSION,
    .name = MK_API_NAME,
    .get_version = mk_get_version,
    .status_string = mk_status_string,
    .last_error = mk_last_error,
    .log_set_level = mk_log_set_level,
    .log_emit = mk_log_emit,
    .topology_json = mk_topology_json,
    .bootstrap_listen = mk_bootstrap_listen,
    .session_create = mk_session_create,
    .session_rank = mk_session_rank,
    .session_allgather = mk_session_allgather,
    .session_gathered = mk_session_gathered,
    .session_barrier = mk_session_barrier,
    .session_destroy = mk_session_destroy,
    .datapath_create = mk_datapath_create,
    .datapath_buffer = mk_datapath_buffer,
    .datapath_fifo = mk_datapath_fifo,
    .datapath_check = mk_datapath_check,
    .datapath_stats_json = mk_datapath_stats_json,
    .datapath_destroy = mk_datapath_destroy,
    .datapath_buffer_info = mk_datapath_buffer_info,
};

const mk_api_v1* mk_get_api(uint32_t version) {
  if (version == 0 || version > MK_API_VERSION) return NULL;
  return &kApiV1;
}

uintptr_t mk_capi_table_address(void) { return (uintptr_t)&kApiV1; }
