// Where the ranks of an mkernel group live, from the Go session: shared by the host reference
// backend (host_reference.cpp) and the GPU substrate (comm/symmetric_group.cpp), so both see
// the same ranks, the same (emulated) nodes and the same op timeout.
//
// A rank's node is the pair (host name, MKERNEL_EMULATED_NODE), all-gathered over the session:
// ranks of one host split into emulated nodes are on different nodes for every path.
#pragma once

#include <mkernel/core_api.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mkernel {

// MKERNEL_OP_TIMEOUT in seconds (default 60): the bound of every wait of an op, host or device.
// A malformed value raises ValueError naming the variable.
double op_timeout_seconds();

// All-gather one blob per rank over the session (rank order). `what` names the exchange in
// errors ("the ranks' nodes"). Throws on failure or timeout.
std::vector<std::string> session_allgather_blobs(const char* op, mk_session_t session,
                                                 const std::string& blob, double timeout_s,
                                                 const char* what);

struct SessionLayout {
  int rank = -1;
  int world = 0;
  std::vector<int> node;  // each rank's node: dense indices in order of first appearance
  int nodes = 0;          // distinct nodes
  int hosts = 0;          // distinct host names (1: every node is emulated on this host)
  double timeout_s = 60.0;
};

// Collective over the session: checks that `group` is an open session of world_size ranks
// (ValueError naming op otherwise), then all-gathers every rank's node. Errors name `op`.
SessionLayout session_layout(const char* op, int64_t group, int64_t world_size);

}  // namespace mkernel
