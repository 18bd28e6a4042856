// What every multi-rank backend of a group needs to know first: which ranks share a node.
// Shared by the host reference backend (host_reference.cpp) and the GPU inter-node path
// (comm/net_path.cpp), so that both split a group into the same nodes.
#pragma once

#include <mkernel/core_api.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mkernel {

// Each rank's node index (dense, numbered in order of first appearance by rank) from the
// pair (host name, MKERNEL_EMULATED_NODE), all-gathered over session `s` of `world` ranks: a
// collective. Ranks of one host with different MKERNEL_EMULATED_NODE values are different
// nodes (the one-box emulation). Errors name `op`.
std::vector<int> gather_nodes(const char* op, mk_session_t s, int world, int64_t timeout_ms);

// MKERNEL_OP_TIMEOUT in seconds (default 60); a clear ValueError for a bad value.
double op_timeout_seconds();

// The message of a failed core call (check_core's text), without throwing.
std::string core_failure(mk_status status, const char* what);

// Owns a data path handle: destroyed with its owner, also when the owner's constructor throws.
struct DatapathHandle {
  DatapathHandle() = default;
  ~DatapathHandle();
  DatapathHandle(const DatapathHandle&) = delete;
  DatapathHandle& operator=(const DatapathHandle&) = delete;
  mk_datapath_t h = 0;
};

}  // namespace mkernel
