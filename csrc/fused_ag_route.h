// ag_gemm's ways to move the same-node peers' rows, as candidates of the op's first-call
// measurement (fused_common.h choose_path; fused16):
//   - the copy-role kernel: the side warps push every rank's x into every same-node peer's
//     gathered buffer G, the GEMM reads G (kernels/fused/fused_hooks.cuh, kModeAllGather);
//   - the peer-TMA kernel: the GEMM's producer loads the peers' rows by TMA straight from each
//     peer's own slot of its G, its own rows from x (kernels/fused/fused_peer_tma.cuh);
//   - the copy-engine route (opt-in, session 27): the copy kernel's GEMM with the rows pushed
//     by the copy engines instead of its side warps (ag_gemm.cpp, fused_copy_engine.h).
// Neither wins everywhere (s12run2, W = 2 under MPS: square ag M=16384 peer / copy paired 0.714,
// Llama fc1 M=16384 1.035; benchmarks/NOTES.md "fused16"), so by default both are measured per
// shape and the group keeps the faster (one verdict for every rank, as for every candidate).
//
// Plain C++ (no torch, no CUDA): ag_gemm.cpp builds its candidate list and its verdict key's
// setting from these functions, and tests/fused/test_ag_route.py checks them on the host (g++).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace mkernel::ag_route {

// MKERNEL_FUSED_AG_PEER_TMA: "0" the copy kernel only (the peer kernel never runs), "1" the
// peer kernel wherever it fits (the copy kernel where it does not: ragged m, return_gathered,
// across nodes, W > 8, a config without a peer kernel), "auto" both measured per shape where it
// fits. Unset or empty: kPeerTmaDefault. Every rank must see the same value: it shapes the
// candidate list (a rank with another list calls other kernels in the measurement, which the
// entry barrier reports as a signature mismatch naming the peer) and joins the verdict key.
enum class PeerTma { kOff = 0, kOn = 1, kAuto = 2 };
constexpr PeerTma kPeerTmaDefault = PeerTma::kAuto;  // fused16 (python mirror: _fused_defaults.py)

// Parses the variable's value into *mode; false (mode untouched) for anything but unset, "",
// "0", "1" or "auto" (the caller raises naming the variable: every rank reads the same
// environment, so every rank raises).
inline bool parse_peer_tma(const char* v, PeerTma* mode) {
  if (v == nullptr || *v == '\0') {
    *mode = kPeerTmaDefault;
  } else if (std::strcmp(v, "0") == 0) {
    *mode = PeerTma::kOff;
  } else if (std::strcmp(v, "1") == 0) {
    *mode = PeerTma::kOn;
  } else if (std::strcmp(v, "auto") == 0) {
    *mode = PeerTma::kAuto;
  } else {
    return false;
  }
  return true;
}

inline const char* peer_tma_name(PeerTma mode) {
  switch (mode) {
    case PeerTma::kOff:
      return "0";
    case PeerTma::kOn:
      return "1";
    default:
      return "auto";
  }
}

// Whether the peer-TMA kernel can take an ag_gemm call (shapes and flags only: the same answer
// on every rank): every 128-row tile's rows from one rank (m a multiple of 128), no gathered
// output (G then holds only the own rows), every rank on this node, at most 8 sources (the
// kernel's descriptors in parameter space).
inline bool peer_tma_fits(int64_t m, int64_t world, bool return_gathered, bool nodes) {
  return !return_gathered && !nodes && world >= 2 && world <= 8 && m > 0 && m % 128 == 0;
}

// MKERNEL_FUSED_AG_COPY_ENGINE: the copy-engine route (ag_gemm.cpp; fused_params.h
// kSideCopyEngine): the rows move by the copy engines (cudaMemcpyBatchAsync with the
// PreferOverlapWithCompute hint, on side streams) into every same-node peer's G, the copy
// kernel's GEMM consumes them as their flags arrive, and no SM copies. "0" never, "1" every plan
// on it wherever it fits (instead of the other routes), "auto" each plan on it as one more
// candidate of the measurement. Unset or empty: kCopyEngineDefault. Every rank must see the
// same value (the candidate list and the verdict key, as MKERNEL_FUSED_AG_PEER_TMA).
enum class CopyEngine { kOff = 0, kOn = 1, kAuto = 2 };
// Off until a GPU run has checked the route (correct under MPS, timed on two GPUs: session 24
// found the SM copy role's kernel 7-9 % over the GEMM alone on whole power-capped H200s, which
// PyTorch's copy-engine async-TP was not).
constexpr CopyEngine kCopyEngineDefault = CopyEngine::kOff;

inline bool parse_copy_engine(const char* v, CopyEngine* mode) {
  PeerTma m = PeerTma::kOff;
  if (v == nullptr || *v == '\0') {
    *mode = kCopyEngineDefault;
    return true;
  }
  if (!parse_peer_tma(v, &m)) return false;  // the same spellings: 0, 1, auto
  *mode = static_cast<CopyEngine>(static_cast<int>(m));
  return true;
}

inline const char* copy_engine_name(CopyEngine mode) {
  return peer_tma_name(static_cast<PeerTma>(static_cast<int>(mode)));
}

// Whether the copy-engine route can take an ag_gemm call: every rank on this node (the
// inter-node rows go through the FIFO, which only the copy role drives), at least two ranks,
// the runtime's copy-engine submission available (ce_ok: the batch copy API and the stream
// memory operations, the same on every rank of a node's job). Any m, return_gathered or not.
inline bool copy_engine_fits(int64_t world, bool nodes, bool ce_ok) {
  return ce_ok && !nodes && world >= 2;
}

// The copy-engine route's pieces of one source's rows, as chunk boundaries 0 = b[0] < b[1] < ...
// < b.back() = chunks: sizes 1, 1, 2, 4, ..., max_piece, max_piece, ... chunks (the last one
// what is left). Each piece is one copy and one batch of flag writes on the host, so the first
// tiles' rows land after a one-chunk copy while a long x costs ~chunks / max_piece calls.
inline std::vector<int32_t> copy_engine_pieces(int32_t chunks, int32_t max_piece = 8) {
  std::vector<int32_t> b{0};
  int32_t size = 1;
  while (b.back() < chunks) {
    b.push_back(std::min(chunks, b.back() + size));
    if (b.size() > 2) size = std::min(max_piece, size * 2);
  }
  return b;
}

// One fused candidate: plans[plan] (fused_common.h candidate_plans) on the peer-TMA kernel, on
// the copy kernel with the copy engines moving the rows (ce), or on the copy kernel.
struct Candidate {
  int plan;
  bool peer;
  bool ce = false;
};

// The fused candidates choose_path measures, in order (paths[i] runs the i-th; the unfused path
// follows them). peer_block_m[i]: the peer kernel's block_m for plans[i]'s config, 0 where the
// config has none (fused_api.h fused_peer_block_m). off, or where the peer kernel does not fit:
// every plan on the copy kernel. on: every plan, on the peer kernel where its config has one and
// m is a multiple of its block_m (else the copy kernel). auto: every plan on the copy kernel
// first — so paths[0], what an unmeasured shape runs inside graph capture, stays the copy
// kernel in the model's config — then each plan that takes it on the peer kernel.
//
// The copy-engine route (ce_mode, ce_fits): on, where it fits, every plan on it and nothing else
// (paths[0] is then the route too; inside graph capture the op runs its plan on the copy kernel:
// the batch copies cannot be captured); auto: each plan on it appended after the list above.
inline std::vector<Candidate> candidates(PeerTma mode, bool fits,
                                         const std::vector<int>& peer_block_m, int64_t m,
                                         CopyEngine ce_mode = CopyEngine::kOff,
                                         bool ce_fits = false) {
  const int plans = static_cast<int>(peer_block_m.size());
  auto peer_ok = [&](int i) {
    return fits && peer_block_m[i] > 0 && m % peer_block_m[i] == 0;
  };
  std::vector<Candidate> out;
  if (ce_fits && ce_mode == CopyEngine::kOn) {
    for (int i = 0; i < plans; ++i) out.push_back({i, false, true});
    return out;
  }
  if (mode == PeerTma::kOn) {
    for (int i = 0; i < plans; ++i) out.push_back({i, peer_ok(i)});
  } else {
    for (int i = 0; i < plans; ++i) out.push_back({i, false});
    if (mode == PeerTma::kAuto) {
      for (int i = 0; i < plans; ++i) {
        if (peer_ok(i)) out.push_back({i, true});
      }
    }
  }
  if (ce_fits && ce_mode == CopyEngine::kAuto) {
    for (int i = 0; i < plans; ++i) out.push_back({i, false, true});
  }
  return out;
}

// The verdict key's part for this setting (appended to fused_common.h shape_key, which has no
// return_gathered or node flags): the setting's name and whether the peer kernel fits, so a
// verdict measured under one setting (or one candidate list) never answers a call under another
// (e.g. MKERNEL_FUSED_AG_PEER_TMA=0 / =1 forced in benchmarks/bench_fused.py beside the op's
// auto; a return_gathered call of the same shape, whose list has the copy kernel only). The key
// also names known_unfused's entry (fused_common.h).
// The copy-engine setting joins it only when not off (keys measured before the route existed
// stay valid): " ce=<setting>", "/none" where the route does not fit.
inline std::string key_suffix(PeerTma mode, bool fits, CopyEngine ce_mode = CopyEngine::kOff,
                              bool ce_fits = false) {
  std::string key = std::string(" peertma=") + peer_tma_name(mode) + (fits ? "" : "/copy-only");
  if (ce_mode != CopyEngine::kOff) {
    key += std::string(" ce=") + copy_engine_name(ce_mode) + (ce_fits ? "" : "/none");
  }
  return key;
}

}  // namespace mkernel::ag_route
