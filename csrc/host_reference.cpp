// The host reference backend's plumbing (see host_reference.h for the protocol).
#include "host_reference.h"

#include <c10/util/Exception.h>
#include <torch/library.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>
#include <utility>

#include "core_binding.h"
#include "ops_validation.h"
#include "session_layout.h"

#ifdef MKERNEL_WITH_CUDA
#include "comm/symmetric_group.h"
#endif

namespace mkernel {
namespace host {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHeaderMagic = 0x52484b4du;  // "MKHR"
constexpr uint16_t kHeaderVersion = 1;
constexpr uint64_t kHeaderBytes = 128;  // one header slot
constexpr uint32_t kRecvBuffer = 1;
constexpr uint32_t kSendBuffer = 2;
constexpr uint64_t kMinCapacity = 64 << 10;
constexpr double kDefaultTimeoutS = 60.0;
constexpr const char* kTimeoutEnv = "MKERNEL_OP_TIMEOUT";

// The header as it travels (little-endian hosts only, like the rest of the data path).
struct WireHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t op;
  uint64_t epoch;
  int32_t rank;
  int32_t dtype;
  int64_t dims[4];
  uint64_t recv_capacity;  // the sender's receive data area
  uint64_t send_capacity;  // the sender's send area
  uint8_t pad[kHeaderBytes - 72];
};
static_assert(sizeof(WireHeader) == kHeaderBytes, "a header fills one slot");

const char* op_name(uint16_t op) {
  switch (static_cast<OpKind>(op)) {
    case OpKind::kAgGemm:
      return "mkernel.ag_gemm";
    case OpKind::kGemmRs:
      return "mkernel.gemm_rs";
    case OpKind::kGemmAr:
      return "mkernel.gemm_ar";
    case OpKind::kRingAttention:
      return "mkernel.ring_attention";
    case OpKind::kAllGather:
      return "mkernel.all_gather";
    case OpKind::kReduceScatter:
      return "mkernel.reduce_scatter";
    case OpKind::kAllReduce:
      return "mkernel.all_reduce";
    case OpKind::kMoeDispatch:
      return "mkernel.moe_dispatch_gemm";
    case OpKind::kMoeCombine:
      return "mkernel.moe_combine";
    case OpKind::kMoeScatter:
      return "mkernel._moe_scatter";
  }
  return "an unknown op";
}

uint64_t capacity_for(uint64_t need) {
  uint64_t c = kMinCapacity;
  while (c < need) c <<= 1;
  return c;
}

// Sleeps progressively longer while a wait makes no progress: no busy loop on a machine whose
// cores are shared with the peers and the proxies.
class Backoff {
 public:
  void pause() {
    if (++rounds_ <= 16) {
      mk_fifo_pause();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(500));
  }

 private:
  int rounds_ = 0;
  std::chrono::microseconds sleep_{10};
};

}  // namespace

// Owns a data path handle: destroyed with its owner, also when the owner's constructor throws.
struct DatapathHandle {
  DatapathHandle() = default;
  ~DatapathHandle() {
    if (h != 0) core_api().datapath_destroy(h);
  }
  DatapathHandle(const DatapathHandle&) = delete;
  DatapathHandle& operator=(const DatapathHandle&) = delete;
  mk_datapath_t h = 0;
};

// One data path (gocore/datapath) through the C ABI.
class DataPath {
 public:
  DataPath(const char* label, mk_session_t session, const char* net, std::vector<int32_t> node,
           std::vector<int> peers, int world, uint64_t recv_capacity, uint64_t send_capacity,
           int64_t timeout_ms)
      : label_(label),
        peers_(std::move(peers)),
        recv_capacity_(recv_capacity),
        send_capacity_(send_capacity) {
    const mk_api_v1& api = core_api();
    const uint32_t ids[2] = {kRecvBuffer, kSendBuffer};
    const uint64_t bytes[2] = {header_area(world) + recv_capacity, kHeaderBytes + send_capacity};
    mk_datapath_config cfg = MK_DATAPATH_CONFIG_INITIALIZER;
    cfg.num_buffers = 2;
    cfg.buffer_ids = ids;
    cfg.buffer_bytes = bytes;
    cfg.flag_slots = std::max<uint32_t>(4096, kArrivalKinds * static_cast<uint32_t>(world));
    cfg.node = node.data();
    cfg.net = net;
    cfg.timeout_ms = timeout_ms;
    const std::string what = std::string("datapath_create (") + label + ")";
    check_core(api.datapath_create(session, &cfg, &handle_.h), what.c_str());
    void* p = nullptr;
    size_t n = 0;
    check_core(api.datapath_buffer(handle_.h, kRecvBuffer, &p, &n), "datapath_buffer");
    recv_ = static_cast<uint8_t*>(p);
    check_core(api.datapath_buffer(handle_.h, kSendBuffer, &p, &n), "datapath_buffer");
    send_ = static_cast<uint8_t*>(p);
    check_core(api.datapath_buffer(handle_.h, 0, &p, &n), "datapath_buffer");
    flags_ = static_cast<uint64_t*>(p);
    check_core(api.datapath_fifo(handle_.h, &p), "datapath_fifo");
    fifo_ = static_cast<mk_fifo_ctrl*>(p);
    transport_ = stat_field("transport");
  }

  DataPath(const DataPath&) = delete;
  DataPath& operator=(const DataPath&) = delete;

  static uint64_t header_area(int world) { return 2 * kHeaderBytes * static_cast<uint64_t>(world); }

  const std::string& label() const { return label_; }
  const std::string& transport() const { return transport_; }
  const std::vector<int>& peers() const { return peers_; }
  uint64_t recv_capacity() const { return recv_capacity_; }
  uint64_t send_capacity() const { return send_capacity_; }

  uint8_t* header_slot(uint64_t epoch, int rank, int world) {
    return recv_ + ((epoch & 1) * world + rank) * kHeaderBytes;
  }
  uint8_t* header_staging() { return send_; }
  uint8_t* recv_data(int world) { return recv_ + header_area(world); }
  uint8_t* send_data() { return send_ + kHeaderBytes; }
  const uint64_t* flag(uint32_t slot) const { return flags_ + slot; }

  bool failed() const { return mk_fifo_error(fifo_) != MK_FIFO_ERR_NONE; }

  // The data path's failure as text ("" while it works).
  std::string failure() const {
    const mk_status s = core_api().datapath_check(handle_.h);
    if (s == MK_OK) {
      return failed()
                 ? "the FIFO was marked failed (error " + std::to_string(mk_fifo_error(fifo_)) +
                       ", peer " + std::to_string(static_cast<int32_t>(fifo_->error_peer)) + ")"
                 : "";
    }
    // The core's message leads with the cause ("rank 4 is gone (...)": gocore/datapath's
    // Err); the status framing follows it instead of preceding it.
    const std::string what = "datapath_check (" + label_ + ")";
    const std::string full = core_failure_message(s, what.c_str());
    const std::string marker = ": datapath_check: ";
    const size_t at = full.find(marker);
    if (at == std::string::npos) return full;
    return full.substr(at + marker.size()) + " [" + full.substr(0, at) + "]";
  }

  std::string stats() const {
    const mk_api_v1& api = core_api();
    return read_core_string([&](char* buf, size_t* len) {
             return api.datapath_stats_json(handle_.h, buf, len);
           })
        .value_or("{}");
  }

  // Pushes one command with the host producer protocol; returns "" or why it failed.
  std::string push(const mk_fifo_cmd& cmd, Clock::time_point deadline) {
    uint64_t ticket = 0;
    constexpr uint64_t kSliceNs = 50000;
    int rc = mk_fifo_push(fifo_, &cmd, kSliceNs, &ticket);
    Backoff backoff;
    while (rc == MK_FIFO_TIMEOUT) {
      if (Clock::now() > deadline) {
        // The ticket is ours: it must be published or failed, never dropped.
        mk_fifo_fail(fifo_, MK_FIFO_ERR_PRODUCER, cmd.peer, ticket);
        return "no FIFO credit before the timeout (ticket " + std::to_string(ticket) +
               ", the proxy is stuck: " + stats() + ")";
      }
      backoff.pause();
      rc = mk_fifo_push_resume(fifo_, &cmd, kSliceNs, ticket);
    }
    if (rc != MK_FIFO_OK) return failure();
    last_ticket_ = ticket;
    pushed_ = true;
    return "";
  }

  // Waits until every command pushed so far has finished (its source memory is free again).
  std::string wait_done(Clock::time_point deadline) {
    if (!pushed_) return "";
    Backoff backoff;
    for (;;) {
      const int rc = mk_fifo_wait_done(fifo_, last_ticket_, 20000);
      if (rc == MK_FIFO_OK) return "";
      if (rc == MK_FIFO_FAILED) return failure();
      if (Clock::now() > deadline) {
        return "commands up to ticket " + std::to_string(last_ticket_) +
               " unfinished at the timeout: " + stats();
      }
      backoff.pause();
    }
  }

 private:
  std::string stat_field(const char* key) const {
    const std::string s = stats();
    const std::string pat = std::string("\"") + key + "\":\"";
    const size_t at = s.find(pat);
    if (at == std::string::npos) return "?";
    const size_t from = at + pat.size();
    return s.substr(from, s.find('"', from) - from);
  }

  std::string label_;
  std::vector<int> peers_;
  uint64_t recv_capacity_, send_capacity_;
  DatapathHandle handle_;
  uint8_t* recv_ = nullptr;
  uint8_t* send_ = nullptr;
  uint64_t* flags_ = nullptr;
  mk_fifo_ctrl* fifo_ = nullptr;
  std::string transport_;
  uint64_t last_ticket_ = 0;
  bool pushed_ = false;
};

// One group's host state. Guarded by mu (a Call holds it).
class HostGroup {
 public:
  explicit HostGroup(int64_t handle) : handle_(handle) {}

  std::mutex mu;

  int64_t handle() const { return handle_; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  bool ready() const { return world_ > 0; }

  // First use: rank, world and every rank's node (an all-gather over the session).
  void setup(const char* op, int64_t world_size) {
    const SessionLayout l = session_layout(op, handle_, world_size);
    timeout_s_ = l.timeout_s;
    node_ = l.node;
    rank_ = l.rank;
    world_ = l.world;
  }

  const std::vector<int>& node() const { return node_; }
  double timeout_s() const { return timeout_s_; }
  Clock::time_point deadline() const {
    return Clock::now() + std::chrono::microseconds(static_cast<int64_t>(timeout_s_ * 1e6));
  }

  // The data paths exist and have at least these capacities (a collective the first time).
  void open_paths(uint64_t recv_capacity, uint64_t send_capacity) {
    const mk_session_t s = static_cast<mk_session_t>(handle_);
    const int64_t timeout_ms = static_cast<int64_t>(timeout_s_ * 1000);
    std::vector<int> intra, inter;
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      (node_[r] == node_[rank_] ? intra : inter).push_back(r);
    }
    bool any_intra = false, any_inter = false;
    for (int r = 0; r < world_; ++r) {
      any_intra |= std::count(node_.begin(), node_.end(), node_[r]) > 1;
      any_inter |= node_[r] != node_[0];
    }
    path_of_.assign(world_, -1);
    paths_.clear();
    ++opens_;
    if (any_intra) {
      // A rank connects the ranks whose node entry differs from its own: mark the ranks of
      // this node apart and every other rank like this one, so only same-node pairs connect.
      std::vector<int32_t> node(world_, world_);
      for (int r : intra) node[r] = r;
      paths_.push_back(std::make_unique<DataPath>("intra-node", s, "loopback", std::move(node),
                                                  intra, world_, recv_capacity, send_capacity,
                                                  timeout_ms));
      for (int r : intra) path_of_[r] = static_cast<int>(paths_.size()) - 1;
    }
    if (any_inter) {
      std::vector<int32_t> node(node_.begin(), node_.end());
      paths_.push_back(std::make_unique<DataPath>("inter-node", s, nullptr, std::move(node), inter,
                                                  world_, recv_capacity, send_capacity,
                                                  timeout_ms));
      for (int r : inter) path_of_[r] = static_cast<int>(paths_.size()) - 1;
    }
  }

  void close_paths() { paths_.clear(); }
  bool has_paths() const { return !paths_.empty(); }
  std::vector<std::unique_ptr<DataPath>>& paths() { return paths_; }
  DataPath& path_to(int peer) { return *paths_[path_of_[peer] < 0 ? 0 : path_of_[peer]]; }

  uint64_t next_epoch() { return ++epoch_; }
  uint64_t epoch() const { return epoch_; }

  const std::string& broken() const { return broken_; }
  void mark_broken(const std::string& why) {
    if (broken_.empty()) broken_ = why;
  }

  // Own commands finished, then every rank at a barrier: nobody has commands in flight.
  // Returns "" or why not.
  std::string quiesce(double barrier_timeout_s) {
    for (auto& p : paths_) {
      std::string e = p->wait_done(deadline());
      if (!e.empty()) return p->label() + " data path: " + e;
    }
    const mk_status st = core_api().session_barrier(static_cast<mk_session_t>(handle_),
                                                    static_cast<int64_t>(barrier_timeout_s * 1000));
    return st == MK_OK ? "" : core_failure_message(st, "session_barrier");
  }

  std::string info() {
    std::ostringstream os;
    os << "{\"group\":" << handle_ << ",\"rank\":" << rank_ << ",\"world\":" << world_
       << ",\"epoch\":" << epoch_ << ",\"opens\":" << opens_ << ",\"timeout_s\":" << timeout_s_
       << ",\"node\":[";
    for (size_t r = 0; r < node_.size(); ++r) os << (r ? "," : "") << node_[r];
    os << "],\"broken\":\"";
    for (char c : broken_) {
      if (c == '"' || c == '\\') os << '\\';
      os << (c == '\n' ? ' ' : c);
    }
    os << "\",\"paths\":[";
    for (size_t i = 0; i < paths_.size(); ++i) {
      const DataPath& p = *paths_[i];
      os << (i ? "," : "") << "{\"label\":\"" << p.label() << "\",\"transport\":\"" << p.transport()
         << "\",\"recv_capacity\":" << p.recv_capacity()
         << ",\"send_capacity\":" << p.send_capacity() << ",\"peers\":[";
      for (size_t j = 0; j < p.peers().size(); ++j) os << (j ? "," : "") << p.peers()[j];
      os << "],\"stats\":" << p.stats() << "}";
    }
    os << "]}";
    return os.str();
  }

 private:
  int64_t handle_;
  int rank_ = -1, world_ = 0;
  double timeout_s_ = kDefaultTimeoutS;
  std::vector<int> node_;
  std::vector<int> path_of_;
  std::vector<std::unique_ptr<DataPath>> paths_;
  uint64_t epoch_ = 0;
  int opens_ = 0;  // times the data paths were opened (1 + growths)
  std::string broken_;
};

namespace {

// Group handle -> host state. Leaked on purpose: nothing may call into Go from static
// destructors at process exit (mkernel.shutdown() releases the groups before that).
struct Registry {
  std::mutex mu;
  std::map<int64_t, std::shared_ptr<HostGroup>> groups;
};
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

std::shared_ptr<HostGroup> find_group(int64_t handle, bool create) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> guard(reg.mu);
  auto it = reg.groups.find(handle);
  if (it != reg.groups.end()) return it->second;
  if (!create) return nullptr;
  auto g = std::make_shared<HostGroup>(handle);
  reg.groups.emplace(handle, g);
  return g;
}

void forget_group(int64_t handle) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> guard(reg.mu);
  reg.groups.erase(handle);
}

std::string dims_text(OpKind op, const std::array<int64_t, 4>& d) {
  std::ostringstream os;
  if (op == OpKind::kAllGather || op == OpKind::kReduceScatter || op == OpKind::kAllReduce) {
    os << "x of " << d[2] << " dimension(s), " << d[0] << " row(s) of " << d[1] << " element(s)";
  } else {
    os << "x [" << d[0] << ", " << d[1] << "], w [" << d[2] << ", " << d[3] << "]";
  }
  return os.str();
}

}  // namespace

Call::Call(const char* op, int64_t group, int64_t world_size) : op_(op) {
  TORCH_CHECK_VALUE(world_size > 1, op, ": the host reference data path needs world_size > 1");
  group_ = find_group(group, true);
  lock_ = std::unique_lock<std::mutex>(group_->mu);
  if (!group_->ready()) {
    try {
      group_->setup(op, world_size);
    } catch (...) {
      lock_.unlock();
      forget_group(group);  // nothing was set up: a later call may try again
      throw;
    }
  }
  TORCH_CHECK_VALUE(world_size == group_->world(), op, ": world_size is ", world_size,
                    " but group ", group, " has ", group_->world(), " ranks");
  TORCH_CHECK(group_->broken().empty(), op, ": rank ", group_->rank(), ": group ", group,
              " is unusable after an earlier failure (create a new context with "
              "mkernel.init()): ",
              group_->broken());
}

Call::~Call() {
  if (begun_ && !ended_ && !consistent_ && group_->broken().empty()) {
    group_->mark_broken(std::string(op_) + " was interrupted mid-protocol on rank " +
                        std::to_string(group_->rank()));
  }
}

int Call::rank() const { return group_->rank(); }
int Call::world() const { return group_->world(); }

void Call::fail(const std::string& message) {
  group_->mark_broken(message);
  TORCH_CHECK(false, message);
}

void Call::begin(const CallInfo& info) {
  HostGroup& g = *group_;
  const int rank = g.rank(), world = g.world();
  begun_ = true;
  consistent_ = false;
  if (!g.has_paths()) {
    try {
      g.open_paths(capacity_for(info.recv_bytes), capacity_for(info.send_bytes));
    } catch (const c10::Error& e) {
      g.close_paths();
      fail(std::string(op_) + ": rank " + std::to_string(rank) +
           ": cannot open the group's data paths: " + e.what_without_backtrace());
    }
  }
  const uint64_t epoch = g.next_epoch();
  for (auto& p : g.paths()) {
    const std::string e = p->wait_done(g.deadline());
    if (!e.empty()) {
      fail(std::string(op_) + ": rank " + std::to_string(rank) + ": the " + p->label() +
           " data path failed before call " + std::to_string(epoch) + ": " + e);
    }
  }
  // 1. Headers: ours to every peer, every peer's to us.
  WireHeader mine{};
  mine.magic = kHeaderMagic;
  mine.version = kHeaderVersion;
  mine.op = static_cast<uint16_t>(info.op);
  mine.epoch = epoch;
  mine.rank = rank;
  mine.dtype = static_cast<int32_t>(info.dtype);
  for (int i = 0; i < 4; ++i) mine.dims[i] = info.dims[i];
  mine.recv_capacity = UINT64_MAX;  // what every data path of this rank has
  mine.send_capacity = UINT64_MAX;
  for (auto& p : g.paths()) {
    mine.recv_capacity = std::min(mine.recv_capacity, p->recv_capacity());
    mine.send_capacity = std::min(mine.send_capacity, p->send_capacity());
  }
  for (auto& p : g.paths()) std::memcpy(p->header_staging(), &mine, sizeof(mine));
  const uint64_t slot_off = ((epoch & 1) * world + rank) * kHeaderBytes;
  for (int k = 1; k < world; ++k) {
    const int peer = (rank + k) % world;
    mk_fifo_cmd c{};
    c.kind = MK_FIFO_WRITE_SIGNAL;
    c.peer = static_cast<uint16_t>(peer);
    c.arrival_slot = static_cast<uint32_t>(Arrival::kHeader) * world + rank;
    c.local_buf = kSendBuffer;
    c.local_off = 0;
    c.remote_buf = kRecvBuffer;
    c.remote_off = slot_off;
    c.bytes = kHeaderBytes;
    c.arrival_seq = epoch;
    c.enqueue_ns = mk_fifo_now_ns();
    DataPath& p = g.path_to(peer);
    const std::string e = p.push(c, g.deadline());
    if (!e.empty()) {
      fail(std::string(op_) + ": rank " + std::to_string(rank) +
           ": sending the call header to rank " + std::to_string(peer) + " over the " + p.label() +
           " data path failed: " + e);
    }
  }
  std::vector<WireHeader> heads(world);
  heads[rank] = mine;
  for (int k = 1; k < world; ++k) {
    const int peer = (rank + world - k) % world;
    wait(peer, Arrival::kHeader, "the call header");
    std::memcpy(&heads[peer], g.path_to(peer).header_slot(epoch, peer, world), sizeof(WireHeader));
  }
  // Protocol facts: a mismatch here means the ranks lost step; the group is unusable.
  for (int r = 0; r < world; ++r) {
    const WireHeader& h = heads[r];
    if (h.magic != kHeaderMagic || h.version != kHeaderVersion || h.rank != r || h.epoch != epoch) {
      fail(std::string(op_) + ": rank " + std::to_string(rank) + ": the call header from rank " +
           std::to_string(r) + " is corrupt or out of step (magic " + std::to_string(h.magic) +
           ", rank " + std::to_string(h.rank) + ", call " + std::to_string(h.epoch) +
           ", this rank is at call " + std::to_string(epoch) + ")");
    }
  }
  // Every peer is in this call, done with the previous one, and nothing is in flight to us:
  // from here until the first data command, an error is raised on every rank alike.
  consistent_ = true;
  for (int r = 0; r < world; ++r) {
    const WireHeader& h = heads[r];
    TORCH_CHECK(h.op == mine.op, op_, ": rank ", r, " called ", op_name(h.op), " while rank ", rank,
                " called ", op_,
                ": every rank of the group must call the same ops in the same order");
  }
  for (int r = 0; r < world; ++r) {
    const WireHeader& h = heads[r];
    TORCH_CHECK(h.dtype == mine.dtype, op_, ": rank ", r, " passed x of dtype ",
                validation::dtype_name(static_cast<at::ScalarType>(h.dtype)), " but rank ", rank,
                " passed ", validation::dtype_name(info.dtype),
                ": every rank must use the same dtype");
    std::array<int64_t, 4> theirs{h.dims[0], h.dims[1], h.dims[2], h.dims[3]};
    for (int i = 0; i < 4; ++i) {
      if ((info.must_match >> i & 1u) && theirs[i] != info.dims[i]) {
        TORCH_CHECK(false, op_, ": rank ", r, " passed ", dims_text(info.op, theirs), " but rank ",
                    rank, " passed ", dims_text(info.op, info.dims), ": ", info.names[i],
                    " must be the same on every rank of the group");
      }
    }
  }
  // 2. Growth: every rank sees every header, so all take the same decision.
  bool grow = false;
  uint64_t recv_cap = 0, send_cap = 0;
  for (int r = 0; r < world; ++r) {
    recv_cap = std::max(recv_cap, heads[r].recv_capacity);
    send_cap = std::max(send_cap, heads[r].send_capacity);
    grow |= heads[r].recv_capacity < info.recv_bytes || heads[r].send_capacity < info.send_bytes;
  }
  if (grow) {
    consistent_ = false;
    const std::string q = g.quiesce(g.timeout_s());
    if (!q.empty()) {
      fail(std::string(op_) + ": rank " + std::to_string(rank) +
           ": cannot quiesce the data paths to grow them: " + q);
    }
    g.close_paths();
    try {
      g.open_paths(capacity_for(std::max(recv_cap, info.recv_bytes)),
                   capacity_for(std::max(send_cap, info.send_bytes)));
    } catch (const c10::Error& e) {
      g.close_paths();
      fail(std::string(op_) + ": rank " + std::to_string(rank) +
           ": cannot reopen the group's data paths with larger buffers: " +
           e.what_without_backtrace());
    }
  }
  consistent_ = false;  // data commands follow
}

uint8_t* Call::send_area(int peer) { return group_->path_to(peer).send_data(); }

uint8_t* Call::recv_area(int peer) { return group_->path_to(peer).recv_data(world()); }

void Call::send(int peer, uint64_t local_off, uint64_t remote_off, uint64_t bytes, Arrival kind) {
  HostGroup& g = *group_;
  mk_fifo_cmd c{};
  c.kind = MK_FIFO_WRITE_SIGNAL;
  c.peer = static_cast<uint16_t>(peer);
  c.arrival_slot = static_cast<uint32_t>(kind) * g.world() + g.rank();
  c.local_buf = kSendBuffer;
  c.local_off = kHeaderBytes + local_off;
  c.remote_buf = kRecvBuffer;
  c.remote_off = DataPath::header_area(g.world()) + remote_off;
  c.bytes = bytes;
  c.arrival_seq = g.epoch();
  c.enqueue_ns = mk_fifo_now_ns();
  DataPath& p = g.path_to(peer);
  const std::string e = p.push(c, g.deadline());
  if (!e.empty()) {
    // The cause first (a lost rank, named by the core), then what this rank was doing.
    fail(std::string(op_) + ": " + e + " (rank " + std::to_string(g.rank()) + " was sending " +
         std::to_string(bytes) + " bytes to rank " + std::to_string(peer) + " over its " +
         p.label() + " data path, " + p.transport() + ")");
  }
}

void Call::wait(int peer, Arrival kind, const char* what) {
  HostGroup& g = *group_;
  DataPath& p = g.path_to(peer);
  const uint32_t slot = static_cast<uint32_t>(kind) * g.world() + peer;
  const uint64_t* flag = p.flag(slot);
  const uint64_t epoch = g.epoch();
  if (mk_fifo_flag_wait(flag, epoch, 20000) == MK_FIFO_OK) return;
  const auto start = Clock::now();
  const auto deadline = g.deadline();
  Backoff backoff;
  for (;;) {
    if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) >= epoch) return;
    // A failed data path (a dead peer, a stuck command) ends the wait at once: any of them,
    // since a peer stuck on a dead rank never sends to us either.
    for (auto& q : g.paths()) {
      if (q->failed()) {
        fail(std::string(op_) + ": " + q->failure() + " (rank " + std::to_string(g.rank()) +
             " was waiting for " + what + " from rank " + std::to_string(peer) + ", call " +
             std::to_string(epoch) + ", when its " + q->label() + " data path, " +
             q->transport() + ", failed)");
      }
    }
    if (Clock::now() > deadline) {
      const double waited = std::chrono::duration<double>(Clock::now() - start).count();
      std::ostringstream os;
      os << op_ << ": rank " << g.rank() << " timed out after " << waited << " s waiting for "
         << what << " from rank " << peer << " (call " << epoch << " of group " << g.handle()
         << ", arrival slot " << slot << " holds " << __atomic_load_n(flag, __ATOMIC_ACQUIRE)
         << " over the " << p.label() << " data path, " << p.transport() << "): is rank " << peer
         << " alive and calling the same op? (" << kTimeoutEnv
         << " sets the timeout) proxy: " << p.stats();
      fail(os.str());
    }
    backoff.pause();
  }
}

void Call::end() { ended_ = true; }

void release_group(int64_t group) {
  std::shared_ptr<HostGroup> g = find_group(group, false);
  if (!g) return;
  forget_group(group);
  std::lock_guard<std::mutex> guard(g->mu);
  if (g->has_paths() && g->broken().empty()) {
    // Peers may still be finishing the last call: a transport that closes under in-flight
    // commands fails them at the peer. Bounded; a failure here only means a peer is gone.
    (void)g->quiesce(std::min(g->timeout_s(), 10.0));
  }
  g->close_paths();
}

std::string group_info(int64_t group) {
  std::shared_ptr<HostGroup> g = find_group(group, false);
  if (!g) return "{}";
  std::lock_guard<std::mutex> guard(g->mu);
  return g->info();
}

namespace {

// Context.close / mkernel.shutdown: the GPU substrate's memory of the group, then the host
// backend's data paths.
void release_op(int64_t group) {
#ifdef MKERNEL_WITH_CUDA
  comm::release_symmetric_group(group);
#endif
  release_group(group);
}
std::string info_op(int64_t group) { return group_info(group); }

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, CompositeExplicitAutograd, m) {
  m.impl("_release_group", &release_op);
  m.impl("_group_info", &info_op);
}

}  // namespace host
}  // namespace mkernel
