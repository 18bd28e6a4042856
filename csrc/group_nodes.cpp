// gather_nodes and the small helpers the multi-rank backends share (group_nodes.h).
#include "group_nodes.h"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core_binding.h"

namespace mkernel {
namespace {

constexpr double kDefaultTimeoutS = 60.0;
constexpr const char* kTimeoutEnv = "MKERNEL_OP_TIMEOUT";

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

double op_timeout_seconds() {
  const char* v = std::getenv(kTimeoutEnv);
  if (v == nullptr || *v == '\0') return kDefaultTimeoutS;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  TORCH_CHECK_VALUE(end != v && *end == '\0' && s > 0, kTimeoutEnv,
                    " must be a positive number of seconds, got \"", v, "\"");
  return s;
}

std::string core_failure(mk_status status, const char* what) {
  try {
    check_core(status, what);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

DatapathHandle::~DatapathHandle() {
  if (h != 0) core_api().datapath_destroy(h);
}

std::vector<int> gather_nodes(const char* op, mk_session_t s, int world, int64_t timeout_ms) {
  const mk_api_v1& api = core_api();
  const char* emulated = std::getenv("MKERNEL_EMULATED_NODE");
  const std::string me = hostname() + "\n" + (emulated != nullptr ? emulated : "");
  std::vector<uint8_t> out(static_cast<size_t>(world) * (8 + 512));
  size_t len = out.size();
  mk_status g = api.session_allgather(s, me.data(), me.size(), out.data(), &len, timeout_ms);
  if (g == MK_ERR_BUFFER_TOO_SMALL) {
    out.resize(len);
    g = api.session_gathered(s, out.data(), &len);
  }
  check_core(g, "session_allgather (the ranks' nodes)");
  std::vector<std::string> ids;
  size_t at = 0;
  for (int r = 0; r < world; ++r) {
    TORCH_CHECK(at + 8 <= len, op, ": short all-gather reply");
    uint64_t n = 0;
    std::memcpy(&n, out.data() + at, 8);
    TORCH_CHECK(at + 8 + n <= len, op, ": short all-gather reply");
    ids.emplace_back(reinterpret_cast<const char*>(out.data() + at + 8), n);
    at += 8 + n;
  }
  std::vector<int> node(world, 0);
  std::vector<std::string> seen;
  for (int r = 0; r < world; ++r) {
    auto it = std::find(seen.begin(), seen.end(), ids[r]);
    node[r] = static_cast<int>(it - seen.begin());
    if (it == seen.end()) seen.push_back(ids[r]);
  }
  return node;
}

}  // namespace mkernel
