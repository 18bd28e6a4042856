// The arithmetic of the MoE's inter-node exchange (moe_net.h), plain C++ with no CUDA or torch
// (tests/host/moe_net_plan_check.cpp compiles it with g++): how a block is cut into pieces, which
// whole rows have landed once a piece has, and where the dispatch's routing head sits in the
// inter-node areas.
//
// A block of `block` bytes (rows of `row_bytes`) travels in `pieces` pieces of `piece` bytes (the
// last shorter, 256-aligned cuts). A row may straddle two pieces: it is usable only once the
// later one landed. rows_landed(c) = the rows wholly inside pieces 0..c, so piece c newly
// completes rows [rows_landed(c - 1), rows_landed(c)) (possibly none); after the last piece every
// row has landed.
//
// The headed gather (the dispatch: the routing travels with the tokens, ahead of them): the send
// area holds the block at [0, stride) and the head at [stride, stride + head_stride); the receive
// area rank p's block at p * stride and its head at W * stride + p * head_stride. The head's
// arrival flag is data slot 0 of its source and the block's pieces take slots 1 .. pieces (so a
// headed block has at most kPieces - 1 pieces: the MoE's slot range stays [2048, 2624)).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

namespace mkernel::moe_net {

constexpr uint64_t kAlign = 256;
constexpr uint64_t kMinPiece = uint64_t{1} << 20;  // below 1 MiB a piece costs more than it hides

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

struct PiecePlan {
  uint64_t block = 0;   // bytes of the block
  uint64_t pieces = 0;  // pieces it travels in (>= 1 when block > 0)
  uint64_t piece = 0;   // bytes of each piece but the last (256-aligned)

  // Bytes of piece c (0 past the block's end).
  uint64_t bytes(uint64_t c) const {
    return std::min(block, (c + 1) * piece) - std::min(block, c * piece);
  }
  uint64_t offset(uint64_t c) const { return std::min(block, c * piece); }
  // Whole rows of `row_bytes` inside pieces 0..c (c >= pieces: every row of the block).
  uint64_t rows_landed(uint64_t c, uint64_t row_bytes) const {
    if (row_bytes == 0) return 0;
    const uint64_t end = c + 1 >= pieces ? block : std::min(block, (c + 1) * piece);
    return end / row_bytes;
  }
};

// At most `max_pieces` pieces, none below kMinPiece unless the block is (then one).
inline PiecePlan plan_pieces(uint64_t block, uint64_t max_pieces) {
  PiecePlan p;
  p.block = block;
  if (block == 0 || max_pieces == 0) return p;
  p.pieces = std::min<uint64_t>(max_pieces, std::max<uint64_t>(1, block / kMinPiece));
  p.piece = align_up((block + p.pieces - 1) / p.pieces, kAlign);
  // 256-aligned cuts can leave the last pieces empty (block just above a multiple): drop them.
  p.pieces = (block + p.piece - 1) / p.piece;
  return p;
}

// The headed gather's inter-node areas (see above).
struct HeadedLayout {
  uint64_t stride = 0;       // the block's slot, 256-aligned
  uint64_t head_stride = 0;  // the head's slot, 256-aligned
  uint64_t send_bytes(int /*world*/) const { return stride + head_stride; }
  uint64_t recv_bytes(int world) const { return static_cast<uint64_t>(world) * (stride + head_stride); }
  uint64_t send_head_off() const { return stride; }
  uint64_t recv_block_off(int src) const { return static_cast<uint64_t>(src) * stride; }
  uint64_t recv_head_off(int src, int world) const {
    return static_cast<uint64_t>(world) * stride + static_cast<uint64_t>(src) * head_stride;
  }
};

inline HeadedLayout headed_layout(uint64_t block, uint64_t head_bytes) {
  return HeadedLayout{align_up(block, kAlign), align_up(head_bytes, kAlign)};
}

// The exchange's arrival slots (moe_net_api.h defines them for the kernels; moe_net.cpp asserts
// that both agree), named here for the wait record (comm/wait_record.cpp, moe12): a timed-out
// wait of the MoE exchange then says which signal of which rank it waited for.
namespace slots {
constexpr uint32_t kBase = 2048;
constexpr uint32_t kMaxRanks = 32;
constexpr uint32_t kPieces = 16;
constexpr uint32_t kReady = kBase;                   // + src rank
constexpr uint32_t kDone = kBase + kMaxRanks;        // + src rank
constexpr uint32_t kData = kBase + 2 * kMaxRanks;    // + src * kPieces + piece
constexpr uint32_t kEnd = kData + kMaxRanks * kPieces;
}  // namespace slots

// What arrival slot `slot` of the MoE exchange signals, or "" outside the exchange's range.
inline std::string describe_slot(uint32_t slot) {
  namespace sl = slots;
  if (slot < sl::kBase || slot >= sl::kEnd) return "";
  if (slot < sl::kDone) {
    const std::string p = std::to_string(slot - sl::kReady);
    return "the MoE exchange's READY from rank " + p + " (sent when rank " + p +
           " begins the same exchange: its earlier ops are done with its receive area)";
  }
  if (slot < sl::kData) {
    const std::string p = std::to_string(slot - sl::kDone);
    return "the MoE exchange's DONE from rank " + p + " (sent by rank " + p +
           "'s receive stream once it unstaged every piece of this exchange: it still waits for "
           "a piece, or its host never queued the exchange)";
  }
  const uint32_t d = slot - sl::kData;
  const std::string p = std::to_string(d / sl::kPieces), c = std::to_string(d % sl::kPieces);
  return "data slot " + c + " of rank " + p + "'s block in the MoE exchange (the dispatch's " +
         "headed gather: slot 0 = the routing head, slot c >= 1 = rows piece c - 1; the other " +
         "exchanges: rows piece " + c + ")";
}

}  // namespace mkernel::moe_net
