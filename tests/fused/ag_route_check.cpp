// Host checks of csrc/fused_ag_route.h (ag_gemm's copy / peer-TMA candidates, fused16): the
// variable's parsing, where the peer kernel fits, the candidate list per setting and the verdict
// key's part. Prints "OK" or the failed checks (tests/fused/test_ag_route.py).
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "fused_ag_route.h"

using mkernel::ag_route::Candidate;
using mkernel::ag_route::PeerTma;
namespace r = mkernel::ag_route;

static int failures = 0;
#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      std::printf("FAIL line %d: %s\n", __LINE__, #cond);             \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

static std::string show(const std::vector<Candidate>& cs) {
  std::string s;
  for (const Candidate& c : cs) {
    s += std::to_string(c.plan) + (c.ce ? "e" : c.peer ? "p" : "c") + " ";
  }
  return s;
}

int main() {
  // Parsing: unset / empty -> the default (auto since fused16; the Python mirror's test pins
  // which); 0, 1, auto; nothing else.
  PeerTma m = PeerTma::kOn;
  CHECK(r::parse_peer_tma(nullptr, &m) && m == r::kPeerTmaDefault);
  m = r::kPeerTmaDefault == PeerTma::kOff ? PeerTma::kOn : PeerTma::kOff;
  CHECK(r::parse_peer_tma("", &m) && m == r::kPeerTmaDefault);
  CHECK(r::parse_peer_tma("0", &m) && m == PeerTma::kOff);
  CHECK(r::parse_peer_tma("1", &m) && m == PeerTma::kOn);
  CHECK(r::parse_peer_tma("auto", &m) && m == PeerTma::kAuto);
  for (const char* bad : {"2", "on", "off", "true", "AUTO", "auto ", " 1", "10", "-1", "yes"}) {
    m = PeerTma::kOff;
    const bool ok = r::parse_peer_tma(bad, &m);
    if (ok || m != PeerTma::kOff) {
      std::printf("FAIL: '%s' parsed (or changed the mode)\n", bad);
      ++failures;
    }
  }
  // Names round-trip (the key's part and the error message name the same values).
  for (PeerTma mode : {PeerTma::kOff, PeerTma::kOn, PeerTma::kAuto}) {
    PeerTma back = PeerTma::kOff;
    CHECK(r::parse_peer_tma(r::peer_tma_name(mode), &back) && back == mode);
  }

  // Where the peer kernel fits.
  CHECK(r::peer_tma_fits(128, 2, false, false));
  CHECK(r::peer_tma_fits(8192, 2, false, false));
  CHECK(r::peer_tma_fits(4096, 4, false, false));
  CHECK(r::peer_tma_fits(1024, 8, false, false));
  CHECK(!r::peer_tma_fits(1024, 9, false, false));   // > 8 sources
  CHECK(!r::peer_tma_fits(1024, 1, false, false));   // nothing to gather
  CHECK(!r::peer_tma_fits(333, 2, false, false));    // ragged: a tile straddles two ranks
  CHECK(!r::peer_tma_fits(64, 2, false, false));
  CHECK(!r::peer_tma_fits(0, 2, false, false));
  CHECK(!r::peer_tma_fits(1024, 2, true, false));    // return_gathered: G needs every row
  CHECK(!r::peer_tma_fits(1024, 4, false, true));    // across nodes

  // Candidates. Plans as candidate_plans gives them under an MPS limit: the model's config on
  // the share's grid, then on the co-resident grid; both 128-row configs (block_m 128).
  const std::vector<int> two = {128, 128};
  // auto, fits: the copy kernel on every plan first (paths[0] = copy plan 0: what an unmeasured
  // shape runs inside graph capture), then every plan on the peer kernel.
  CHECK(show(r::candidates(PeerTma::kAuto, true, two, 4096)) == "0c 1c 0p 1p ");
  // auto, does not fit: the copy kernel only (the list the op had before fused16).
  CHECK(show(r::candidates(PeerTma::kAuto, false, two, 4096)) == "0c 1c ");
  // off: the copy kernel only, fits or not.
  CHECK(show(r::candidates(PeerTma::kOff, true, two, 4096)) == "0c 1c ");
  CHECK(show(r::candidates(PeerTma::kOff, false, two, 4096)) == "0c 1c ");
  // on: every plan on the peer kernel where it fits (the fused13 / fused14 list), else copy.
  CHECK(show(r::candidates(PeerTma::kOn, true, two, 4096)) == "0p 1p ");
  CHECK(show(r::candidates(PeerTma::kOn, false, two, 4096)) == "0c 1c ");
  // A config without a peer kernel (block_m 0, e.g. 256x128) or whose block_m does not divide m:
  // copy only for that plan, in every mode.
  const std::vector<int> mixed = {128, 0, 256};
  CHECK(show(r::candidates(PeerTma::kAuto, true, mixed, 384)) == "0c 1c 2c 0p ");
  CHECK(show(r::candidates(PeerTma::kAuto, true, mixed, 512)) == "0c 1c 2c 0p 2p ");
  CHECK(show(r::candidates(PeerTma::kOn, true, mixed, 384)) == "0p 1c 2c ");
  // One plan (MKERNEL_FUSED_GRIDS=share or no MPS limit).
  CHECK(show(r::candidates(PeerTma::kAuto, true, {128}, 128)) == "0c 0p ");
  CHECK(show(r::candidates(PeerTma::kAuto, true, {}, 128)).empty());
  // Every mode lists every plan at least once (on the copy kernel where no peer route exists)
  // and never a (plan, kernel) pair twice.
  for (PeerTma mode : {PeerTma::kOff, PeerTma::kOn, PeerTma::kAuto}) {
    for (bool fits : {false, true}) {
      for (int64_t rows : {128, 256, 384, 333}) {
        const std::vector<Candidate> cs = r::candidates(mode, fits, mixed, rows);
        std::set<std::pair<int, bool>> seen;
        std::set<int> plans;
        for (const Candidate& c : cs) {
          CHECK(seen.insert({c.plan, c.peer}).second);
          plans.insert(c.plan);
          if (c.peer) CHECK(fits && mixed[c.plan] > 0 && rows % mixed[c.plan] == 0);
        }
        CHECK(plans.size() == mixed.size());
        if (mode != PeerTma::kOn) CHECK(!cs.empty() && !cs[0].peer);
      }
    }
  }

  // The key's part: the setting and whether the peer kernel fits, distinct for each.
  std::set<std::string> keys;
  for (PeerTma mode : {PeerTma::kOff, PeerTma::kOn, PeerTma::kAuto}) {
    for (bool fits : {false, true}) keys.insert(r::key_suffix(mode, fits));
  }
  CHECK(keys.size() == 6);
  CHECK(r::key_suffix(PeerTma::kAuto, true) == " peertma=auto");
  CHECK(r::key_suffix(PeerTma::kOff, true) == " peertma=0");
  CHECK(r::key_suffix(PeerTma::kOn, false) == " peertma=1/copy-only");

  // The copy-engine route (MKERNEL_FUSED_AG_COPY_ENGINE): the same spellings, off by default.
  using r::CopyEngine;
  CopyEngine ce = CopyEngine::kAuto;
  CHECK(r::parse_copy_engine(nullptr, &ce) && ce == r::kCopyEngineDefault);
  CHECK(r::kCopyEngineDefault == CopyEngine::kOff);
  CHECK(r::parse_copy_engine("1", &ce) && ce == CopyEngine::kOn);
  CHECK(r::parse_copy_engine("auto", &ce) && ce == CopyEngine::kAuto);
  CHECK(r::parse_copy_engine("0", &ce) && ce == CopyEngine::kOff);
  CHECK(!r::parse_copy_engine("ce", &ce) && ce == CopyEngine::kOff);
  CHECK(r::copy_engine_fits(2, false, true));
  CHECK(!r::copy_engine_fits(2, true, true));    // across nodes: the FIFO needs the copy role
  CHECK(!r::copy_engine_fits(1, false, true));   // nothing to gather
  CHECK(!r::copy_engine_fits(8, false, false));  // no copy-engine submission in this runtime
  // on: every plan on the route, nothing else; auto: appended after the other routes; a route
  // that does not fit or is off leaves the lists above unchanged.
  CHECK(show(r::candidates(PeerTma::kAuto, true, two, 4096, CopyEngine::kOn, true)) == "0e 1e ");
  CHECK(show(r::candidates(PeerTma::kAuto, true, two, 4096, CopyEngine::kAuto, true)) ==
        "0c 1c 0p 1p 0e 1e ");
  CHECK(show(r::candidates(PeerTma::kOff, true, two, 4096, CopyEngine::kAuto, true)) ==
        "0c 1c 0e 1e ");
  CHECK(show(r::candidates(PeerTma::kAuto, true, two, 4096, CopyEngine::kOn, false)) ==
        "0c 1c 0p 1p ");
  CHECK(show(r::candidates(PeerTma::kAuto, true, two, 4096, CopyEngine::kOff, true)) ==
        "0c 1c 0p 1p ");
  // Keys: unchanged while the route is off; distinct per setting and fit otherwise.
  CHECK(r::key_suffix(PeerTma::kAuto, true, CopyEngine::kOff, true) == " peertma=auto");
  CHECK(r::key_suffix(PeerTma::kAuto, true, CopyEngine::kAuto, true) == " peertma=auto ce=auto");
  CHECK(r::key_suffix(PeerTma::kAuto, true, CopyEngine::kOn, false) == " peertma=auto ce=1/none");
  for (CopyEngine mode : {CopyEngine::kOn, CopyEngine::kAuto}) {
    for (bool fits : {false, true}) keys.insert(r::key_suffix(PeerTma::kAuto, true, mode, fits));
  }
  CHECK(keys.size() == 10);
  // Pieces: 1, 1, 2, 4, 8, 8, ... chunks, the last what is left; they tile [0, chunks).
  auto pieces = [](int32_t chunks) {
    std::string s;
    for (int32_t b : r::copy_engine_pieces(chunks)) s += std::to_string(b) + " ";
    return s;
  };
  CHECK(pieces(0) == "0 ");
  CHECK(pieces(1) == "0 1 ");
  CHECK(pieces(3) == "0 1 2 3 ");
  CHECK(pieces(32) == "0 1 2 4 8 16 24 32 ");
  CHECK(pieces(20) == "0 1 2 4 8 16 20 ");
  for (int32_t chunks = 0; chunks < 300; ++chunks) {
    const std::vector<int32_t> b = r::copy_engine_pieces(chunks, 8);
    CHECK(b.front() == 0 && b.back() == chunks);
    for (size_t i = 1; i < b.size(); ++i) CHECK(b[i] > b[i - 1] && b[i] - b[i - 1] <= 8);
  }

  if (failures == 0) std::printf("OK\n");
  return failures == 0 ? 0 : 1;
}
