// The host reference of the MoE ops (see moe_host.h for the layout they share).
//
// Every exchange is an all-to-all of byte blocks (one block per destination rank) over two
// calls of the group's host data path (host::Call): the first all-gathers every rank's block
// sizes and a few words of metadata (the per-expert counts), so that every rank knows the
// whole size matrix and takes the same buffer decisions; the second moves the blocks. A
// dispatch is one such exchange: the blocks do not depend on the other ranks' counts (the
// capacity drops happen at the destination), and the routes are computed from the gathered
// counts after the first call.
#include "moe_host.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "gemm_engine.h"
#include "host_reference.h"

namespace mkernel {
namespace moe {
namespace {

using Bytes = std::vector<uint8_t>;
using Words = std::vector<int64_t>;

// Where the rows of one destination rank's local experts sit (moe_host.h's layout).
class DestLayout {
 public:
  // kept [world][e_local]: rows expert e holds from source s, after the capacity drops.
  DestLayout(int64_t world, int64_t e_local, int64_t capacity, Words kept)
      : world_(world), e_local_(e_local), capacity_(capacity), kept_(std::move(kept)) {
    base_.assign(e_local_ + 1, 0);
    for (int64_t e = 0; e < e_local_; ++e) {
      int64_t n = 0;
      for (int64_t s = 0; s < world_; ++s) n += kept_[s * e_local_ + e];
      count_.push_back(n);
      base_[e + 1] = capacity_ > 0 ? (e + 1) * capacity_ : base_[e] + n;
    }
  }

  // The layout after the drops, from the rows each source asked for ([world][e_local]).
  static DestLayout from_requests(int64_t world, int64_t e_local, int64_t capacity,
                                  const Words& requested) {
    Words kept(requested.size());
    for (int64_t e = 0; e < e_local; ++e) {
      int64_t taken = 0;
      for (int64_t s = 0; s < world; ++s) {
        const int64_t want = requested[s * e_local + e];
        const int64_t n = capacity > 0 ? std::min(want, capacity - taken) : want;
        kept[s * e_local + e] = n;
        taken += n;
      }
    }
    return DestLayout(world, e_local, capacity, std::move(kept));
  }

  int64_t kept(int64_t s, int64_t e) const { return kept_[s * e_local_ + e]; }
  int64_t count(int64_t e) const { return count_[e]; }
  int64_t base(int64_t e) const { return base_[e]; }
  int64_t rows() const { return base_[e_local_]; }
  // The first row of source s's rows of expert e.
  int64_t start(int64_t s, int64_t e) const {
    int64_t row = base_[e];
    for (int64_t q = 0; q < s; ++q) row += kept(q, e);
    return row;
  }
  // Rows from source s over all experts.
  int64_t from(int64_t s) const {
    int64_t n = 0;
    for (int64_t e = 0; e < e_local_; ++e) n += kept(s, e);
    return n;
  }

 private:
  int64_t world_, e_local_, capacity_;
  Words kept_, count_, base_;
};

struct Exchanged {
  std::vector<Words> words;     // [world]: every rank's all-gathered words
  std::vector<Bytes> received;  // [world]: the block each rank sent to this one
};

// An all-to-all of byte blocks plus an all-gather of a few int64 words (the same count on
// every rank), over two host::Calls of the group. At world size 1 nothing moves.
class Alltoall {
 public:
  Alltoall(const char* op, int64_t group, int64_t world_size)
      : op_(op), group_(group), world_(static_cast<int>(world_size)) {
    if (world_ > 1) {
      call_ = std::make_unique<host::Call>(op, group, world_size);
      rank_ = call_->rank();
    }
  }

  int rank() const { return rank_; }

  // blocks[d]: what this rank sends to rank d (its own block stays here). `check` runs on the
  // gathered words between the two calls: an error it raises is raised on every rank alike
  // (every rank sees the same words), and leaves the group usable.
  Exchanged run(host::CallInfo info, const Words& words, std::vector<Bytes> blocks,
                const std::function<void(const std::vector<Words>&)>& check) {
    Exchanged ex;
    if (world_ == 1) {
      ex.words = {words};
      if (check) check(ex.words);
      ex.received = std::move(blocks);
      return ex;
    }
    const int W = world_, me = rank_;
    // Call 1: [block sizes to every rank][words], all-gathered.
    const uint64_t n = words.size();
    const uint64_t msg = (W + n) * sizeof(int64_t);
    Words mine(W + n);
    for (int d = 0; d < W; ++d) mine[d] = static_cast<int64_t>(blocks[d].size());
    std::copy(words.begin(), words.end(), mine.begin() + W);
    info.recv_bytes = W * msg;
    info.send_bytes = msg;
    call_->begin(info);
    stage_once([&](int peer) { return call_->send_area(peer); },
               [&](uint8_t* area, int) { std::memcpy(area, mine.data(), msg); });
    for (int j = 1; j < W; ++j) {
      const int peer = (me + j) % W;
      call_->send(peer, 0, me * msg, msg, host::Arrival::kPhaseA);
    }
    std::vector<Words> all(W, Words(W + n));
    all[me] = mine;
    for (int j = 1; j < W; ++j) {
      const int peer = (me + W - j) % W;
      call_->wait(peer, host::Arrival::kPhaseA, "the block sizes and counts");
      std::memcpy(all[peer].data(), call_->recv_area(peer) + peer * msg, msg);
    }
    call_->end();
    call_.reset();
    for (int s = 0; s < W; ++s) ex.words.emplace_back(all[s].begin() + W, all[s].end());
    if (check) check(ex.words);

    // Call 2: the blocks, at offsets every rank derives from the size matrix.
    auto size = [&](int s, int d) { return static_cast<uint64_t>(all[s][d]); };
    uint64_t send_need = 0, recv_need = 0;
    for (int r = 0; r < W; ++r) {
      uint64_t out = 0, in = 0;
      for (int q = 0; q < W; ++q) {
        if (q == r) continue;
        out += size(r, q);
        in += size(q, r);
      }
      send_need = std::max(send_need, out);
      recv_need = std::max(recv_need, in);
    }
    auto recv_off = [&](int s, int d) {
      uint64_t off = 0;
      for (int q = 0; q < s; ++q) off += q == d ? 0 : size(q, d);
      return off;
    };
    std::vector<uint64_t> send_off(W, 0);
    uint64_t off = 0;
    for (int d = 0; d < W; ++d) {
      send_off[d] = off;
      if (d != me) off += size(me, d);
    }
    call_ = std::make_unique<host::Call>(op_, group_, W);
    info.recv_bytes = recv_need;
    info.send_bytes = send_need;
    call_->begin(info);
    for (int j = 1; j < W; ++j) {
      const int peer = (me + j) % W;
      if (!blocks[peer].empty()) {
        std::memcpy(call_->send_area(peer) + send_off[peer], blocks[peer].data(),
                    blocks[peer].size());
      }
      call_->send(peer, send_off[peer], recv_off(me, peer), size(me, peer),
                  host::Arrival::kPhaseA);
    }
    ex.received.resize(W);
    ex.received[me] = std::move(blocks[me]);
    for (int j = 1; j < W; ++j) {
      const int peer = (me + W - j) % W;
      call_->wait(peer, host::Arrival::kPhaseA, "the rows");
      const uint8_t* at = call_->recv_area(peer) + recv_off(peer, me);
      ex.received[peer].assign(at, at + size(peer, me));
    }
    call_->end();
    call_.reset();
    return ex;
  }

 private:
  // Writes a message into the send area of each data path once (peers on one path share it).
  template <class Area, class Fill>
  void stage_once(Area area, Fill fill) {
    std::vector<uint8_t*> staged;
    for (int j = 1; j < world_; ++j) {
      const int peer = (rank_ + j) % world_;
      uint8_t* a = area(peer);
      if (std::find(staged.begin(), staged.end(), a) != staged.end()) continue;
      fill(a, peer);
      staged.push_back(a);
    }
  }

  const char* op_;
  int64_t group_;
  int world_;
  int rank_ = 0;
  std::unique_ptr<host::Call> call_;
};

template <class T>
void put(Bytes& b, const T* p, size_t n) {
  const auto* u = reinterpret_cast<const uint8_t*>(p);
  b.insert(b.end(), u, u + n * sizeof(T));
}

int64_t dest_of(int64_t code) { return code >> 32; }
int64_t row_of(int64_t code) { return code & 0xffffffffLL; }

Words read_counts(const at::Tensor& recv_counts) {
  at::Tensor c = recv_counts.to(at::kLong).contiguous();
  return Words(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// This rank's kept choices bound for rank d, as (row at d, flat choice t*k + j), by row: the
// order in which d keeps (and sends back) this rank's rows.
std::vector<std::vector<std::pair<int64_t, int64_t>>> choices_by_dest(const at::Tensor& route,
                                                                     int world) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> by(world);
  at::Tensor r = route.contiguous();
  const int64_t* p = r.data_ptr<int64_t>();
  for (int64_t i = 0; i < r.numel(); ++i) {
    if (p[i] < 0) continue;
    const int64_t d = dest_of(p[i]);
    TORCH_CHECK(d < world, "route[", i / std::max<int64_t>(r.size(1), 1), ", ",
                i % std::max<int64_t>(r.size(1), 1), "] names rank ", d,
                " outside the group: pass the route of the matching moe_dispatch_gemm");
    by[d].emplace_back(row_of(p[i]), i);
  }
  for (auto& v : by) std::sort(v.begin(), v.end());
  return by;
}

}  // namespace

void check_expert_ids(const char* op, const at::Tensor& topk_idx, int64_t num_experts) {
  const at::Tensor idx = topk_idx.to(at::kLong).contiguous();
  const int64_t* p = idx.data_ptr<int64_t>();
  const int64_t k = std::max<int64_t>(idx.size(1), 1);
  for (int64_t i = 0; i < idx.numel(); ++i) {
    TORCH_CHECK_VALUE(p[i] >= 0 && p[i] < num_experts, op, ": topk_idx[", i / k, ", ", i % k,
                      "] is ", p[i], ", not an expert id in [0, ", num_experts, ")");
  }
}

DispatchResult dispatch(const char* op, const at::Tensor& x, const at::Tensor& topk_idx,
                        const at::Tensor& w1, int64_t group, int64_t world_size,
                        int64_t num_experts, int64_t capacity, bool return_recv,
                        bool run_gemm) {
  const int64_t T = x.size(0), H = x.size(1), k = topk_idx.size(1);
  const int64_t W = world_size, E = num_experts, El = E / W, F = w1.size(1);
  const int64_t row_bytes = H * x.element_size();
  at::Tensor idx = topk_idx.to(at::kLong).contiguous();
  const int64_t* ip = idx.data_ptr<int64_t>();
  Alltoall a2a(op, group, W);
  const int me = a2a.rank();

  // Choices per expert in (token, choice) order; the first bad id is reported to every rank.
  std::vector<Words> by_expert(E);
  int64_t bad_at = -1, bad_id = 0;
  for (int64_t i = 0; i < T * k; ++i) {
    const int64_t g = ip[i];
    if (g < 0 || g >= E) {
      if (bad_at < 0) bad_at = i, bad_id = g;
      continue;
    }
    by_expert[g].push_back(i);
  }
  Words words = {bad_at, bad_id, k};
  for (int64_t g = 0; g < E; ++g) words.push_back(static_cast<int64_t>(by_expert[g].size()));

  // Block for rank d: each token once, and for each of its choices at d (expert, then token
  // order) the index of its row: [U][n][int32 index x n, padded to 8 B][U rows].
  const auto* xp = static_cast<const uint8_t*>(x.data_ptr());
  std::vector<Bytes> blocks(W);
  for (int64_t d = 0; d < W; ++d) {
    Words tokens;
    std::vector<int32_t> index;
    for (int64_t e = 0; e < El; ++e) {
      for (int64_t i : by_expert[d * El + e]) tokens.push_back(i / k);
    }
    Words unique = tokens;
    std::sort(unique.begin(), unique.end());
    unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
    for (int64_t t : tokens) {
      index.push_back(static_cast<int32_t>(
          std::lower_bound(unique.begin(), unique.end(), t) - unique.begin()));
    }
    if (index.size() % 2) index.push_back(0);
    Bytes& b = blocks[d];
    const int64_t head[2] = {static_cast<int64_t>(unique.size()),
                             static_cast<int64_t>(tokens.size())};
    put(b, head, 2);
    put(b, index.data(), index.size());
    for (int64_t t : unique) put(b, xp + t * row_bytes, row_bytes);
  }

  host::CallInfo info{host::OpKind::kMoeDispatch,
                      x.scalar_type(),
                      {T, H, E, capacity},
                      0b1110u,
                      {"T", "H (x's column count)", "num_experts", "capacity"},
                      0,
                      0};
  Exchanged ex = a2a.run(info, words, std::move(blocks), [&](const std::vector<Words>& all) {
    for (int64_t s = 0; s < W; ++s) {
      if (all[s][0] < 0) continue;
      const int64_t ks = all[s][2];
      TORCH_CHECK_VALUE(false, op, ": topk_idx[", all[s][0] / ks, ", ", all[s][0] % ks,
                        "] of rank ", s, " is ", all[s][1], ", not an expert id in [0, ",
                        num_experts, ")");
    }
  });

  // Every destination's layout, from what every source asked for.
  std::vector<DestLayout> layouts;
  for (int64_t d = 0; d < W; ++d) {
    Words req(W * El);
    for (int64_t s = 0; s < W; ++s) {
      for (int64_t e = 0; e < El; ++e) req[s * El + e] = ex.words[s][3 + d * El + e];
    }
    layouts.push_back(DestLayout::from_requests(W, El, capacity, req));
  }
  const DestLayout& L = layouts[me];

  // Routes of this rank's choices.
  at::Tensor route = at::full({T, k}, -1, x.options().dtype(at::kLong));
  int64_t* rp = route.data_ptr<int64_t>();
  for (int64_t g = 0; g < E; ++g) {
    const int64_t d = g / El, e = g % El;
    const int64_t keep = layouts[d].kept(me, e), first = layouts[d].start(me, e);
    for (int64_t n = 0; n < keep; ++n) rp[by_expert[g][n]] = (d << 32) | (first + n);
  }

  // The received rows, in the layout.
  const int64_t R = L.rows();
  TORCH_CHECK(R < (int64_t{1} << 31), op, ": rank ", me, " would receive ", R,
              " rows, more than a route can name (2^31)");
  at::Tensor recv = at::zeros({R, H}, x.options());
  auto* out_rows = static_cast<uint8_t*>(recv.data_ptr());
  for (int64_t s = 0; s < W; ++s) {
    const Bytes& b = ex.received[s];
    int64_t head[2];
    std::memcpy(head, b.data(), sizeof(head));
    const int64_t U = head[0], n = head[1];
    const auto* index = reinterpret_cast<const int32_t*>(b.data() + sizeof(head));
    const uint8_t* rows = b.data() + sizeof(head) + ((n + 1) / 2) * 2 * sizeof(int32_t);
    TORCH_CHECK(rows + U * row_bytes == b.data() + b.size(), op, ": rank ", me,
                ": the block from rank ", s, " has ", b.size(), " bytes, not what its header says");
    int64_t pos = 0;
    for (int64_t e = 0; e < El; ++e) {
      const int64_t asked = ex.words[s][3 + me * El + e];
      const int64_t keep = L.kept(s, e), first = L.start(s, e);
      for (int64_t c = 0; c < asked; ++c, ++pos) {
        if (c < keep) {
          std::memcpy(out_rows + (first + c) * row_bytes, rows + index[pos] * row_bytes,
                      row_bytes);
        }
      }
    }
    TORCH_CHECK(pos == n, op, ": rank ", me, ": rank ", s, " sent ", n, " choices, its counts say ",
                pos);
  }

  // The local experts' GEMMs.
  at::Tensor out = run_gemm ? at::zeros({R, F}, x.options()) : x.new_empty({0});
  at::Tensor counts = at::empty({El}, x.options().dtype(at::kInt));
  at::Tensor recv_counts = at::empty({W, El}, x.options().dtype(at::kInt));
  for (int64_t e = 0; e < El; ++e) {
    const int64_t n = L.count(e);
    counts[e] = static_cast<int32_t>(n);
    for (int64_t s = 0; s < W; ++s) recv_counts[s][e] = static_cast<int32_t>(L.kept(s, e));
    if (n > 0 && run_gemm) {
      out.narrow(0, L.base(e), n).copy_(reference_gemm(recv.narrow(0, L.base(e), n), w1[e]));
    }
  }
  if (capacity > 0) {
    if (run_gemm) out = out.view({El, capacity, F});
    recv = recv.view({El, capacity, H});
  }
  return {out, counts, route, recv_counts, return_recv || !run_gemm ? recv : x.new_empty({0})};
}

at::Tensor gather(const char* op, const at::Tensor& y, const at::Tensor& route,
                  const at::Tensor& recv_counts, int64_t group, int64_t world_size) {
  const int64_t D = y.size(-1), T = route.size(0), k = route.size(1);
  const int64_t El = recv_counts.size(1), capacity = y.dim() == 3 ? y.size(1) : 0;
  const int W = static_cast<int>(world_size);
  const at::Tensor y2 = y.reshape({-1, D});
  const int64_t row_bytes = D * y.element_size();
  Alltoall a2a(op, group, W);
  const int me = a2a.rank();
  const DestLayout L(W, El, capacity, read_counts(recv_counts));
  TORCH_CHECK(L.rows() <= y2.size(0), op, ": y holds ", y2.size(0), " rows but recv_counts (",
              recv_counts.sizes(), ") places ", L.rows(),
              ": pass the outputs of the matching moe_dispatch_gemm");
  const auto* yp = static_cast<const uint8_t*>(y2.data_ptr());
  std::vector<Bytes> blocks(W);
  for (int64_t s = 0; s < W; ++s) {
    for (int64_t e = 0; e < El; ++e) {
      const int64_t first = L.start(s, e);
      put(blocks[s], yp + first * row_bytes, L.kept(s, e) * row_bytes);
    }
  }
  host::CallInfo info{host::OpKind::kMoeCombine,
                      y.scalar_type(),
                      {T, D, El, k},
                      0b0110u,
                      {"T", "H (the rows' width)", "E_local", "k"},
                      0,
                      0};
  Exchanged ex = a2a.run(info, {}, std::move(blocks), nullptr);
  at::Tensor out = at::zeros({T, k, D}, y.options());
  auto* op_rows = static_cast<uint8_t*>(out.data_ptr());
  const auto by = choices_by_dest(route, W);
  for (int d = 0; d < W; ++d) {
    const Bytes& b = ex.received[d];
    TORCH_CHECK(b.size() == by[d].size() * row_bytes, op, ": rank ", me, " routed ",
                by[d].size(), " choices to rank ", d, " but rank ", d, " returned ",
                b.size() / std::max<int64_t>(row_bytes, 1),
                " rows: route and recv_counts must come from the same moe_dispatch_gemm call");
    for (size_t i = 0; i < by[d].size(); ++i) {
      std::memcpy(op_rows + by[d][i].second * row_bytes, b.data() + i * row_bytes, row_bytes);
    }
  }
  return out;
}

at::Tensor scatter(const char* op, const at::Tensor& rows, const at::Tensor& route,
                   const at::Tensor& recv_counts, int64_t group, int64_t world_size,
                   int64_t capacity, int64_t out_rows) {
  const int64_t T = rows.size(0), k = rows.size(1), D = rows.size(2);
  const int64_t El = recv_counts.size(1);
  const int W = static_cast<int>(world_size);
  const int64_t row_bytes = D * rows.element_size();
  const at::Tensor src = rows.contiguous();
  Alltoall a2a(op, group, W);
  const int me = a2a.rank();
  const auto by = choices_by_dest(route, W);
  const auto* sp = static_cast<const uint8_t*>(src.data_ptr());
  std::vector<Bytes> blocks(W);
  for (int d = 0; d < W; ++d) {
    for (const auto& c : by[d]) put(blocks[d], sp + c.second * row_bytes, row_bytes);
  }
  host::CallInfo info{host::OpKind::kMoeScatter,
                      rows.scalar_type(),
                      {T, D, El, capacity},
                      0b1110u,
                      {"T", "H (the rows' width)", "E_local", "capacity"},
                      0,
                      0};
  Exchanged ex = a2a.run(info, {}, std::move(blocks), nullptr);
  const DestLayout L(W, El, capacity, read_counts(recv_counts));
  const int64_t R = capacity > 0 ? El * capacity : out_rows;
  TORCH_CHECK(L.rows() <= R, op, ": recv_counts (", recv_counts.sizes(), ") places ", L.rows(),
              " rows, more than the ", R, " rows asked for");
  at::Tensor out = at::zeros({R, D}, rows.options());
  auto* op_rows = static_cast<uint8_t*>(out.data_ptr());
  for (int64_t s = 0; s < W; ++s) {
    const Bytes& b = ex.received[s];
    TORCH_CHECK(static_cast<int64_t>(b.size()) == L.from(s) * row_bytes, op, ": rank ", me,
                " expects ", L.from(s), " rows from rank ", s, " but got ",
                b.size() / std::max<int64_t>(row_bytes, 1),
                ": route and recv_counts must come from the same moe_dispatch_gemm call");
    int64_t i = 0;
    for (int64_t e = 0; e < El; ++e) {
      const int64_t first = L.start(s, e);
      for (int64_t c = 0; c < L.kept(s, e); ++c, ++i) {
        std::memcpy(op_rows + (first + c) * row_bytes, b.data() + i * row_bytes, row_bytes);
      }
    }
  }
  return capacity > 0 ? out.view({El, capacity, D}) : out;
}

at::Tensor weighted_sum(const at::Tensor& gathered, const at::Tensor& route,
                        const at::Tensor& topk_weights) {
  const int64_t T = gathered.size(0), k = gathered.size(1), D = gathered.size(2);
  at::Tensor w = topk_weights.to(at::kFloat).masked_fill(route.lt(0), 0.0);
  at::Tensor acc = at::zeros({T, D}, gathered.options().dtype(at::kFloat));
  for (int64_t j = 0; j < k; ++j) {
    acc.add_(gathered.select(1, j).to(at::kFloat) * w.select(1, j).unsqueeze(1));
  }
  return acc.to(gathered.scalar_type());
}

}  // namespace moe
}  // namespace mkernel
