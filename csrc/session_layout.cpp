// Where the ranks of a group live (see session_layout.h).
#include "session_layout.h"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core_binding.h"
#include "env_knobs.h"

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
  const char* v = env::get(kTimeoutEnv);
  if (v == nullptr || *v == '\0') return kDefaultTimeoutS;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  TORCH_CHECK_VALUE(end != v && *end == '\0' && s > 0, kTimeoutEnv,
                    " must be a positive number of seconds, got \"", v, "\"");
  return s;
}

std::vector<std::string> session_allgather_blobs(const char* op, mk_session_t session,
                                                 const std::string& blob, double timeout_s,
                                                 const char* what) {
  const mk_api_v1& api = core_api();
  int32_t rank = -1, world = 0;
  check_core(api.session_rank(session, &rank, &world), "session_rank");
  std::vector<uint8_t> out(static_cast<size_t>(world) * (8 + blob.size() + 64));
  size_t len = out.size();
  mk_status g = api.session_allgather(session, blob.data(), blob.size(), out.data(), &len,
                                      static_cast<int64_t>(timeout_s * 1000));
  if (g == MK_ERR_BUFFER_TOO_SMALL) {
    out.resize(len);
    g = api.session_gathered(session, out.data(), &len);
  }
  const std::string call = std::string("session_allgather (") + what + ")";
  check_core(g, call.c_str());
  std::vector<std::string> blobs;
  size_t at = 0;
  for (int r = 0; r < world; ++r) {
    TORCH_CHECK(at + 8 <= len, op, ": short all-gather reply (", what, ")");
    uint64_t n = 0;
    std::memcpy(&n, out.data() + at, 8);
    TORCH_CHECK(at + 8 + n <= len, op, ": short all-gather reply (", what, ")");
    blobs.emplace_back(reinterpret_cast<const char*>(out.data() + at + 8), n);
    at += 8 + n;
  }
  return blobs;
}

SessionLayout session_layout(const char* op, int64_t group, int64_t world_size) {
  TORCH_CHECK(core_bound(), op,
              ": the mkernel core is not loaded: import mkernel and call mkernel.init() to "
              "create the group");
  const mk_api_v1& api = core_api();
  const mk_session_t s = static_cast<mk_session_t>(group);
  int32_t rank = -1, world = 0;
  const mk_status st = api.session_rank(s, &rank, &world);
  TORCH_CHECK_VALUE(st == MK_OK, op, ": group ", group,
                    " is not an open mkernel group (pass the context from mkernel.init()): ",
                    core_failure_message(st, "session_rank"));
  TORCH_CHECK_VALUE(world == world_size, op, ": world_size is ", world_size, " but group ", group,
                    " has ", world, " ranks");
  SessionLayout l;
  l.timeout_s = op_timeout_seconds();
  const char* emulated = env::get("MKERNEL_EMULATED_NODE");
  const std::string me = hostname() + "\n" + (emulated != nullptr ? emulated : "");
  const std::vector<std::string> ids =
      session_allgather_blobs(op, s, me, l.timeout_s, "the ranks' nodes");
  l.node.assign(world, 0);
  std::vector<std::string> seen, hosts;
  for (int r = 0; r < world; ++r) {
    auto it = std::find(seen.begin(), seen.end(), ids[r]);
    l.node[r] = static_cast<int>(it - seen.begin());
    if (it == seen.end()) seen.push_back(ids[r]);
    const std::string host = ids[r].substr(0, ids[r].find('\n'));
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
  }
  l.hosts = static_cast<int>(hosts.size());
  l.rank = rank;
  l.world = world;
  l.nodes = static_cast<int>(seen.size());
  return l;
}

}  // namespace mkernel
