// Binding of the Go control plane's C API table (see core_binding.h) and the ops that expose it:
// mkernel::_bind_core(int api_table_address) -> int and mkernel::core_version() -> str.
#include "core_binding.h"

#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>

namespace mkernel {
namespace {

constexpr const char* kBindOp = "mkernel._bind_core";

// Set once by _bind_core; read by every call into the core.
std::atomic<const mk_api_v1*> g_api{nullptr};

std::string hex_address(const void* p) {
  std::ostringstream os;
  os << "0x" << std::hex << reinterpret_cast<uintptr_t>(p);
  return os.str();
}

// A table we can serve: an ABI at least as new as ours (the table only grows, see core_api.h; the
// size is checked before any field past it is read), the right library, every v1 entry present.
void check_table(const mk_api_v1& api) {
  TORCH_CHECK_VALUE(api.size != 0 && api.version != 0, kBindOp, ": the API table is empty (size ",
                    api.size, ", version ", api.version,
                    "); pass the address that mk_get_api(MK_API_VERSION) returned");
  TORCH_CHECK_VALUE(api.version >= MK_API_VERSION && api.size >= sizeof(mk_api_v1), kBindOp,
                    ": the mkernel core library serves ABI version ", api.version,
                    " with a table of ", api.size,
                    " bytes, but this extension needs version >= ", MK_API_VERSION,
                    " with >= ", sizeof(mk_api_v1),
                    " bytes: rebuild the extension and the core library together");
  TORCH_CHECK_VALUE(api.name != nullptr && std::strcmp(api.name, MK_API_NAME) == 0, kBindOp,
                    ": the API table is not mkernel's (name \"",
                    api.name != nullptr ? api.name : "(null)", "\", expected \"", MK_API_NAME,
                    "\")");
  const std::pair<const char*, bool> entries[] = {
      {"get_version", api.get_version != nullptr},
      {"status_string", api.status_string != nullptr},
      {"last_error", api.last_error != nullptr},
      {"log_set_level", api.log_set_level != nullptr},
      {"log_emit", api.log_emit != nullptr},
      {"topology_json", api.topology_json != nullptr},
      {"bootstrap_listen", api.bootstrap_listen != nullptr},
      {"session_create", api.session_create != nullptr},
      {"session_rank", api.session_rank != nullptr},
      {"session_allgather", api.session_allgather != nullptr},
      {"session_gathered", api.session_gathered != nullptr},
      {"session_barrier", api.session_barrier != nullptr},
      {"session_destroy", api.session_destroy != nullptr},
      {"datapath_create", api.datapath_create != nullptr},
      {"datapath_buffer", api.datapath_buffer != nullptr},
      {"datapath_fifo", api.datapath_fifo != nullptr},
      {"datapath_check", api.datapath_check != nullptr},
      {"datapath_stats_json", api.datapath_stats_json != nullptr},
      {"datapath_destroy", api.datapath_destroy != nullptr},
      {"datapath_buffer_info", api.datapath_buffer_info != nullptr},
  };
  for (const auto& [name, present] : entries) {
    TORCH_CHECK_VALUE(present, kBindOp, ": the API table's entry ", name, " is NULL");
  }
}

}  // namespace

std::optional<std::string> read_core_string(
    const std::function<mk_status(char* buf, size_t* len)>& call) {
  size_t len = 0;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string buf(len, '\0');
    size_t cap = len;
    const mk_status s = call(cap > 0 ? buf.data() : nullptr, &cap);
    if (s == MK_OK) {
      buf.resize(std::min(cap, buf.size()));
      buf.resize(std::strlen(buf.c_str()));  // drop the NUL and anything after it
      return buf;
    }
    if (s != MK_ERR_BUFFER_TOO_SMALL || cap <= len) return std::nullopt;
    len = cap + cap / 4;  // headroom: the content may grow again before the next call
  }
  return std::nullopt;
}

namespace {
// The core's last_error() message of this thread.
std::string last_error_message(const mk_api_v1& api) {
  return read_core_string([&](char* buf, size_t* len) { return api.last_error(buf, len); })
      .value_or("(the core's last_error() is unavailable)");
}

int64_t bind_core(int64_t api_table_address) {
  TORCH_CHECK_VALUE(api_table_address != 0, kBindOp,
                    ": api_table_address is 0 (NULL): the mkernel core library returned no API "
                    "table; call mkernel.init() / import mkernel, which hands over the address");
  TORCH_CHECK_VALUE(api_table_address > 0, kBindOp,
                    ": api_table_address must be a user-space address > 0, got ",
                    api_table_address);
  const auto* api = reinterpret_cast<const mk_api_v1*>(static_cast<uintptr_t>(api_table_address));
  check_table(*api);
  const mk_api_v1* bound = nullptr;
  if (!g_api.compare_exchange_strong(bound, api, std::memory_order_acq_rel)) {
    // Binding the same table again (a re-import) is fine; a second table means a second Go
    // library, and two Go runtimes in one process deadlock.
    TORCH_CHECK(bound == api, kBindOp, ": the mkernel core is already bound to the API table at ",
                hex_address(bound), ", not ", hex_address(api),
                ": exactly one Go library (one Go runtime) may be loaded in a process");
  }
  return static_cast<int64_t>(api->version);
}

std::string core_version() {
  const char* version = core_api().get_version();
  return version != nullptr ? version : "";
}

}  // namespace

const mk_api_v1& core_api() {
  const mk_api_v1* api = g_api.load(std::memory_order_acquire);
  TORCH_CHECK(api != nullptr,
              "mkernel core not bound: call mkernel.init() / import mkernel first (it hands the Go "
              "control plane's API table to torch.ops.mkernel._bind_core)");
  return *api;
}

bool core_bound() noexcept { return g_api.load(std::memory_order_acquire) != nullptr; }

void check_core(mk_status status, const char* what) {
  if (status == MK_OK) return;
  const mk_api_v1& api = core_api();
  const char* name = api.status_string(status);
  if (name == nullptr) name = "an unknown status";
  const std::string message = last_error_message(api);
  TORCH_CHECK_VALUE(status != MK_ERR_INVALID_ARGUMENT, "mkernel core: ", what, " failed with ",
                    name, " (", static_cast<int>(status), "): ", message);
  TORCH_CHECK_NOT_IMPLEMENTED(status != MK_ERR_NOT_SUPPORTED, "mkernel core: ", what,
                              " failed with ", name, " (", static_cast<int>(status),
                              "): ", message);
  TORCH_CHECK(false, "mkernel core: ", what, " failed with ", name, " (", static_cast<int>(status),
              "): ", message);
}

std::string core_failure_message(mk_status status, const char* what) {
  try {
    check_core(status, what);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

// No tensor arguments: one kernel serves every dispatch key.
TORCH_LIBRARY_IMPL(mkernel, CompositeExplicitAutograd, m) {
  m.impl("_bind_core", &bind_core);
  m.impl("core_version", &core_version);
}

}  // namespace mkernel
