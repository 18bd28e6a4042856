// The decision of a fused op's first-call measurement (fused_common.h choose_path; fused17):
// which of the op's paths — its fused candidates (plans x ag_gemm's copy / peer-TMA route) and
// the unfused path (the substrate's collective + the engine GEMM) — the group keeps for a shape.
//
// Why a test and not a margin (benchmarks/NOTES.md "fused17"): under MPS the same work timed
// twice differs by 5-50 % per sample (s13run2, W = 2 Llama fc1 M=16384: unfused samples 11.9 to
// 27.4 ms), so the old rule — the slowest rank's median of 7 samples per path, fused kept when
// 3 % faster — kept the copy kernel there on a 3.5 % edge and the op then ran 0.914x the unfused
// path; and at W = 4 it kept the copy kernel 2.7 % ahead of the peer-TMA kernel whose steady state
// ran 0.73x the copy kernel's. Here:
//   - every round times each active path once (choose_path: an untimed lead-in call, then
//     `calls` calls between CUDA events), the ranks exchange the round's samples, and a path's
//     figure in a round is the slowest rank's sample (the group's wall time for it);
//   - the comparisons are paired within rounds (a drift over the measurement, or the MPS phase of
//     the moment, reaches both sides of a ratio alike): fused f "wins" round i when
//     fig[f][i] < (1 - margin) x fig[unfused][i];
//   - fused is kept only when it wins with confidence: a one-sided sign test over the planned
//     number of test rounds n — at least wins_needed(n) wins, the smallest k with
//     P(Binomial(n, 1/2) >= k) <= alpha / (the number of finalists tested) — i.e. the
//     distribution-free upper confidence bound of the median ratio is below 1 - margin. The
//     test rounds are those after the screen wherever the op has several fused candidates (a
//     candidate kept for its lucky screen rounds would carry that luck into its test). Anything
//     less: the unfused path (the safe side: a wrong unfused verdict costs at most the
//     noise-sized edge; a wrong fused one can lose it);
//   - the route between the two best fused finalists (e.g. copy vs peer-TMA kernel) by the same
//     paired rounds: the median ratio of the pair, with a sign test deciding when to stop early;
//   - the cost is bounded: round 0 drops a candidate above prune_over x the round's fastest path
//     (xnode5: a 300 ms kernel across nodes) or first_tol behind the best fused one; the screen
//     (after screen_rounds rounds) keeps at most max_finalists fused candidates (those not
//     slower than the best fused by screen_tol in every screen round, nor slower than unfused by
//     screen_lose in every one); the number of test rounds n is planned once, after the screen,
//     from the budget (the rounds' measured cost), within [min_rounds (or the smallest n whose
//     test passes with tolerated_losses lost rounds), max_rounds]; and the measurement stops as soon as the outcome at n is
//     settled (curtailed: a finalist that has its k wins, or can no longer reach them, is
//     decided — stopping early then changes no verdict, so the tests' alpha holds).
// Every rank feeds the same gathered figures in the same order, so every rank reaches the same
// verdict (the group's); plain C++ (no torch, no CUDA): tests/fused/verdict_check.cpp runs it on
// the host (tests/fused/test_verdict.py), incl. noise models and s13run2's recorded samples.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace mkernel::fused_verdict {

struct Settings {
  int screen_rounds = 2;    // rounds with every candidate before the screen
  int min_rounds = 4;       // the test's n is at least this, and at least the smallest n whose
                            // test can pass (4 of 4 at 1/16 with one finalist, 5 of 5 at 1/32
                            // with two)...
  int max_rounds = 15;      // ... and at most this (small shapes: more power, cheap rounds)
  int tolerated_losses = 1;  // ... and at least the smallest n whose test passes with this many
                             // lost rounds (s14run2: gemm_ar W=4 fc2 M=16384, fused 0.652x unfused
                             // by the median, lost 1 of 4 test rounds to MPS noise and ran unfused
                             // at n = 6, which needs 6 of 6; one loss: 6 of 7, or 8 of 9 with two
                             // finalists)
  double alpha = 0.0625;    // the tests' one-sided level, shared by the finalists (Bonferroni)
  float margin = 0.01f;     // a win: fused < (1 - margin) x unfused in the round
  float screen_tol = 0.10f;   // screen: dropped if > this slower than the best fused, every round
  float screen_lose = 0.25f;  // screen: dropped if > this slower than unfused, every round
  float prune_over = 8.f;   // round 0: dropped if > this x the round's fastest path...
  float first_tol = 0.30f;  // ... or > this slower than round 0's best fused candidate
  int max_finalists = 2;    // fused candidates timed after the screen
  double budget_s = 0.8;    // the rounds' target, seconds (after the warm-up calls)
  // A test round's sample spans at least sample_ms of the fastest path still active (from its
  // median over the screen rounds), in at most max_calls calls; 0: the caller's count as given.
  // s54 (benchmarks/fused_sample_length.py, H100 under MPS, Llama shapes ~7 ms a call): the
  // unfused path's per-call times are bimodal (5 / 9 / 14 ms as the ranks' kernels interleave),
  // its samples' spread (cv) 0.12-0.21 at 2 calls, 0.04-0.075 at 8; at 2 calls the W=2 ag_gemm
  // test won 6 of 8 rounds at a median 0.90 and the op ran unfused, 1.15x slower sustained; at
  // 8 calls it won 8 of 9 and kept fused.
  double sample_ms = 50.0;
  int max_calls = 16;
  // An unfused verdict is kept for the next process (fused_verdict_store.h) only when the
  // measurement settled it: not where the fastest fused candidate's paired median ran below
  // this x the unfused path and only the test's confidence was missing (s55a: W = 2 ag_gemm,
  // median 0.893, 6 of 8 rounds won, 8 of 9 needed; the op then runs 1.15x slower sustained).
  // Stored, such a verdict would hold for every later process of the job configuration; left
  // out, the next process measures again. Within this process it stays (the safe side).
  float store_below = 0.95f;
};

// The smallest k such that P(Binomial(n, 1/2) >= k) <= alpha (n + 1 if no k is: e.g. n < 5 at
// alpha 0.05).
inline int wins_needed(int n, double alpha) {
  if (n <= 0) return 1;
  // tail[k] = P(X >= k), from k = n down.
  std::vector<double> pmf(n + 1);
  double c = 1.0;  // C(n, j)
  for (int j = 0; j <= n; ++j) {
    pmf[j] = c * std::pow(0.5, n);
    c = c * (n - j) / (j + 1);
  }
  double tail = 0.0;
  int k = n + 1;
  for (int j = n; j >= 0; --j) {
    tail += pmf[j];
    if (tail <= alpha + 1e-12) {
      k = j;
    } else {
      break;
    }
  }
  return k;
}

inline float median_of(std::vector<float> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : 0.5f * (v[h - 1] + v[h]);
}

// Rounds from `from` on where both a and b were timed: how many, in how many
// a < (1 - margin) x b, in how many b < (1 - margin) x a, and the median of a / b.
struct Paired {
  int n = 0;
  int wins = 0;
  int losses = 0;
  float median = NAN;
};

inline Paired paired(const std::vector<float>& a, const std::vector<float>& b, float margin,
                     int from = 0) {
  Paired p;
  std::vector<float> ratios;
  const size_t rounds = std::min(a.size(), b.size());
  for (size_t i = static_cast<size_t>(std::max(from, 0)); i < rounds; ++i) {
    if (!(a[i] > 0.f) || !(b[i] > 0.f)) continue;  // not timed (NaN) in this round
    ++p.n;
    if (a[i] < (1.f - margin) * b[i]) ++p.wins;
    if (b[i] < (1.f - margin) * a[i]) ++p.losses;
    ratios.push_back(a[i] / b[i]);
  }
  p.median = median_of(ratios);
  return p;
}

struct Result {
  int path = 0;            // the verdict: an index into the paths
  int fastest_fused = 0;   // the route among the fused candidates (MKERNEL_FUSED=force's verdict)
  bool confident = false;  // path is fused and won its test against the unfused path
  Paired vs_unfused;       // path (when fused) or fastest_fused against the unfused path
  int needed = 0;          // wins the test needed: wins_needed(test rounds planned)
  int test_rounds = 0;     // the test's n (0: decided at the screen, before planning)
  int test_from = 0;       // the first round the tests count (after the screen, if it chose)
  int rounds = 0;          // rounds measured
  Paired route;            // fastest_fused against the other finalist (n = 0 with one)
  int route_other = -1;
  bool fused_only = false; // no unfused path measured (MKERNEL_FUSED=force)
};

// One measurement: add_round() after each round's exchange, until done(); then result().
class Measurement {
 public:
  // `count` paths; `unfused` the unfused path's index, or -1 (MKERNEL_FUSED=force: fused only).
  Measurement(int count, int unfused, const Settings& s = Settings())
      : s_(s), count_(count), unfused_(unfused), active_(count, 1), fig_(count) {}

  const std::vector<char>& active() const { return active_; }
  bool done() const { return done_; }
  int rounds() const { return rounds_; }
  // Rounds planned in all (0 until the screen has planned them).
  int planned() const { return n_test_ > 0 ? test_from_ + n_test_ : 0; }
  const std::vector<std::vector<float>>& figures() const { return fig_; }
  // Whether the next round is a screen round (choose_path times those with fewer calls per
  // sample: they only need to tell candidates 10 % apart).
  bool screening() const { return rounds_ < s_.screen_rounds; }
  // A test round's calls per sample, given the caller's count `floor` (choose_path: ~40 GFLOP's
  // worth): enough calls of the fastest active path's screen median for sample_ms, within
  // [floor, max(floor, max_calls)]; `floor` before the screen or where sample_ms is 0. The same
  // on every rank (from the gathered figures).
  int test_calls(int floor) const {
    if (!(s_.sample_ms > 0.0) || !(sample_base_ms_ > 0.f)) return floor;
    const double want = std::ceil(s_.sample_ms / sample_base_ms_ - 1e-9);
    const int cap = std::max(floor, s_.max_calls);
    return want >= cap ? cap : std::max(floor, static_cast<int>(want));
  }

  // One round's figures (ms per call, slowest rank; NaN or <= 0 where a path was not timed),
  // the group's elapsed seconds since the rounds began (slowest rank) and the caller's calls per
  // sample (test_calls' floor; the planned rounds' cost: each active path costs
  // (1 + test_calls(calls)) calls a round).
  void add_round(const std::vector<float>& figs, double elapsed_s, int calls) {
    if (done_) return;
    for (int p = 0; p < count_; ++p) {
      const float v = p < static_cast<int>(figs.size()) && active_[p] ? figs[p] : NAN;
      fig_[p].push_back(v > 0.f ? v : NAN);
    }
    ++rounds_;
    if (rounds_ == 1) prune_round0();
    if (rounds_ == s_.screen_rounds) screen(elapsed_s, calls);
    if (n_test_ > 0 && !done_) evaluate();
    if (fused_active().empty()) done_ = true;
    if (rounds_ >= s_.screen_rounds + s_.max_rounds) done_ = true;  // (evaluate ends sooner)
  }

  Result result() const {
    Result r;
    r.rounds = rounds_;
    r.test_rounds = n_test_;
    r.test_from = test_from_;
    r.needed = n_test_ > 0 ? needed() : rounds_ + 1;
    std::vector<int> pool = contenders();
    if (pool.empty()) pool = finalists_;
    if (pool.empty()) pool = best_by_screen(all_fused(), 1);
    r.fastest_fused = pool.empty() ? 0 : pool[0];
    if (pool.size() >= 2) {
      const Paired q = paired(fig_[pool[0]], fig_[pool[1]], 0.f, test_from_);
      // The lower median ratio; a tie (or no common round) keeps the list's order.
      const bool second = q.n > 0 && q.median > 1.f;
      r.fastest_fused = second ? pool[1] : pool[0];
      r.route_other = second ? pool[0] : pool[1];
      r.route = paired(fig_[r.fastest_fused], fig_[r.route_other], 0.f, test_from_);
    }
    if (unfused_ < 0) {
      r.path = r.fastest_fused;
      r.fused_only = true;
      return r;
    }
    r.path = unfused_;
    r.vs_unfused = paired(fig_[r.fastest_fused], fig_[unfused_], s_.margin, test_from_);
    if (n_test_ == 0) return r;  // every fused candidate dropped before the test
    std::vector<int> order{r.fastest_fused};
    for (int f : pool) {
      if (f != r.fastest_fused) order.push_back(f);
    }
    for (int f : order) {
      const Paired v = paired(fig_[f], fig_[unfused_], s_.margin, test_from_);
      if (v.wins >= r.needed) {
        r.path = f;
        r.confident = true;
        r.vs_unfused = v;
        break;
      }
    }
    return r;
  }

  // The median figure of path p over the rounds from `from` on that timed it (NaN if none). The
  // fallback warning quotes it from the test's first round: over all rounds, screen rounds in
  // which the unfused path ran slow could put its figure above the fused one's while the test
  // (which counts only later rounds) found fused no faster (s53b: "fused 6576.6 us vs unfused
  // 9231.9 us" beside "median 1.036, 0 of 2 test rounds below 0.99").
  float median_figure(int p, int from = 0) const {
    std::vector<float> v;
    for (size_t i = static_cast<size_t>(std::max(from, 0)); i < fig_[p].size(); ++i) {
      if (fig_[p][i] > 0.f) v.push_back(fig_[p][i]);
    }
    return median_of(v);
  }

 private:
  // The wins a finalist's test needs: its share of alpha (each finalist is tested against the
  // unfused path, so the chance that any of them passes by luck stays within alpha).
  int needed() const {
    const int tests = std::max<int>(1, static_cast<int>(finalists_.size()));
    return wins_needed(n_test_, s_.alpha / tests);
  }

  std::vector<int> all_fused() const {
    std::vector<int> out;
    for (int p = 0; p < count_; ++p) {
      if (p != unfused_) out.push_back(p);
    }
    return out;
  }
  std::vector<int> fused_active() const {
    std::vector<int> out;
    for (int p = 0; p < count_; ++p) {
      if (p != unfused_ && active_[p]) out.push_back(p);
    }
    return out;
  }
  // Fused candidates still in the running: finalists not dropped as futile.
  std::vector<int> contenders() const {
    std::vector<int> out;
    for (int f : finalists_) {
      if (active_[f]) out.push_back(f);
    }
    return out;
  }

  // The fastest figure of round i among `among` (NaN if none was timed).
  float best_in(int i, const std::vector<int>& among) const {
    float best = NAN;
    for (int f : among) {
      const float v = fig_[f][i];
      if (v > 0.f && !(best <= v)) best = v;
    }
    return best;
  }

  // `among` ranked by the median over the rounds so far of (figure / the round's best among
  // them); ties keep the list's order. The first `keep`.
  std::vector<int> best_by_screen(const std::vector<int>& among, int keep) const {
    std::vector<std::pair<float, int>> scored;
    for (int f : among) {
      std::vector<float> rel;
      for (int i = 0; i < rounds_; ++i) {
        const float v = fig_[f][i], b = best_in(i, among);
        if (v > 0.f && b > 0.f) rel.push_back(v / b);
      }
      scored.push_back({rel.empty() ? INFINITY : median_of(rel), f});
    }
    std::stable_sort(scored.begin(), scored.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    std::vector<int> out;
    for (size_t i = 0; i < scored.size() && static_cast<int>(i) < keep; ++i) {
      out.push_back(scored[i].second);
    }
    return out;
  }

  // Round 0: a fused candidate above prune_over x the round's fastest path (xnode5: a 300 ms
  // kernel across nodes vs a 1 ms unfused path), or more than first_tol slower than the round's
  // best fused candidate (the share's grid under MPS: 1.4-1.7x the co-resident grid at the Llama
  // shapes), is timed no further; never the best fused candidate itself.
  void prune_round0() {
    std::vector<int> every(count_);
    for (int p = 0; p < count_; ++p) every[p] = p;
    const float fastest = best_in(0, every);
    const float best_fused = best_in(0, fused_active());
    if (!(fastest > 0.f) || !(best_fused > 0.f)) return;
    for (int f : fused_active()) {
      const float v = fig_[f][0];
      if (v > s_.prune_over * fastest || v > (1.f + s_.first_tol) * best_fused) active_[f] = 0;
    }
  }

  void screen(double elapsed_s, int calls) {
    const std::vector<int> fused = fused_active();
    std::vector<int> kept;
    for (int f : fused) {
      bool slow_every = true, lose_every = true;
      int timed = 0;
      for (int i = 0; i < rounds_; ++i) {
        const float v = fig_[f][i];
        if (!(v > 0.f)) continue;
        ++timed;
        if (!(v > (1.f + s_.screen_tol) * best_in(i, fused))) slow_every = false;
        const float u = unfused_ >= 0 ? fig_[unfused_][i] : NAN;
        if (!(u > 0.f) || !(v > (1.f + s_.screen_lose) * u)) lose_every = false;
      }
      if (timed > 0 && !slow_every && !lose_every) kept.push_back(f);
    }
    finalists_ = best_by_screen(kept, s_.max_finalists);
    std::sort(finalists_.begin(), finalists_.end());  // the list's order (copy kernel first)
    for (int f : fused) {
      if (std::find(finalists_.begin(), finalists_.end(), f) == finalists_.end()) active_[f] = 0;
    }
    if (finalists_.empty()) {
      done_ = true;  // unfused (fused only cannot get here: the best fused is kept)
      return;
    }
    // The tests count the rounds after the screen when there was a choice among fused
    // candidates (one kept for its lucky screen rounds would carry that luck into its test);
    // with a single fused path from the start there was none, and every round counts.
    test_from_ = all_fused().size() > 1 ? rounds_ : 0;
    // The test rounds' sample length: from the fastest path still active.
    for (int p = 0; p < count_; ++p) {
      const float m = active_[p] ? median_figure(p) : NAN;
      if (m > 0.f && !(sample_base_ms_ <= m)) sample_base_ms_ = m;
    }
    // The test's n: what the budget leaves after the screen, at the screen's cost per round of
    // the paths still active, within [min_rounds, max_rounds].
    const int test_c = test_calls(calls);
    double round_s = 0.0;
    for (int p = 0; p < count_; ++p) {
      if (!active_[p]) continue;
      const float m = median_figure(p);
      if (m > 0.f) round_s += (1.0 + test_c) * m * 1e-3;
    }
    int more = s_.max_rounds;
    if (round_s > 0.0) {
      const double left = s_.budget_s - elapsed_s;
      more = left <= 0.0 ? 0 : static_cast<int>(std::min(left / round_s, 1000.0));
    }
    int floor_n = s_.min_rounds;
    const int tests = static_cast<int>(finalists_.size());
    while (floor_n < s_.max_rounds &&
           wins_needed(floor_n, s_.alpha / tests) > floor_n - s_.tolerated_losses)
      ++floor_n;
    n_test_ = std::max(floor_n, std::min(s_.max_rounds, rounds_ - test_from_ + more));
  }

  // After each round once planned: the curtailed sign tests (stopping changes no verdict).
  void evaluate() {
    const int k = needed();
    const int left = test_from_ + n_test_ - rounds_;
    bool undecided = false;
    if (unfused_ >= 0) {
      for (int f : contenders()) {
        const Paired v = paired(fig_[f], fig_[unfused_], s_.margin, test_from_);
        if (v.wins >= k) continue;  // confident: decided
        if (v.wins + left < k) {    // can no longer reach k: decided (and timed no further)
          active_[f] = 0;
          continue;
        }
        undecided = true;
      }
    }
    const std::vector<int> c = contenders();
    bool route_open = false;
    if (c.size() >= 2) {
      const Paired q = paired(fig_[c[0]], fig_[c[1]], 0.f, test_from_);
      route_open = !(q.wins >= k || q.losses >= k || (q.wins + left < k && q.losses + left < k));
    }
    if (c.empty() || (!undecided && !route_open) || left <= 0) done_ = true;
  }

  Settings s_;
  int count_;
  int unfused_;
  std::vector<char> active_;
  std::vector<std::vector<float>> fig_;  // [path][round], NaN where not timed
  std::vector<int> finalists_;
  int rounds_ = 0;
  int test_from_ = 0;
  int n_test_ = 0;
  float sample_base_ms_ = NAN;  // the fastest active path's median at the screen
  bool done_ = false;
};

// The M bucket a verdict holds for (choose_path): the next power of two >= m (m >= 1), as the
// GEMM tuner's plans (gemm_plan_store.h m_bucket). A new token count (a prompt's length, a packed
// batch) reuses the verdict its bucket's first shape measured with the same candidate paths,
// instead of stalling its first call on a 1-4 s measurement (s54b: 2.7-4.0 s at the Llama shapes,
// warm-up included); the cost of a reuse across a crossover inside the bucket is at most the
// edge there (either path is correct).
inline int64_t m_bucket(int64_t m) {
  int64_t b = 1;
  while (b < m) b <<= 1;
  return b;
}

// `key` with its token count bucketed: the first space-separated field "M=<m>" (fused_common.h
// shape_key: the GEMM ops) or "Tm=<t>" (the MoE ops' tokens) as "M~<m_bucket(m)>" /
// "Tm~<...>"; a key with neither (or a malformed count) unchanged.
inline std::string bucket_key(const std::string& key) {
  size_t at = 0;
  while (at < key.size()) {
    const size_t stop = std::min(key.find(' ', at), key.size());
    const std::string field = key.substr(at, stop - at);
    const size_t name = field.compare(0, 2, "M=") == 0    ? 1
                        : field.compare(0, 3, "Tm=") == 0 ? 2
                                                          : 0;
    if (name > 0) {
      const std::string digits = field.substr(name + 1);
      if (digits.empty() || digits.size() > 12 ||
          digits.find_first_not_of("0123456789") != std::string::npos) {
        return key;
      }
      const int64_t m = std::stoll(digits);
      if (m < 1) return key;
      return key.substr(0, at) + field.substr(0, name) + "~" + std::to_string(m_bucket(m)) +
             key.substr(stop);
    }
    at = stop + 1;
  }
  return key;
}

// Whether `r` is kept for the next process (Settings::store_below): a fused verdict (it passed
// its test), a fused-only route, an unfused one where every fused candidate was dropped before
// the test or the fastest ran no better than store_below x unfused by its paired median.
inline bool storable(const Result& r, const Settings& s) {
  if (r.confident || r.fused_only || r.test_rounds == 0) return true;
  return !(r.vs_unfused.n > 0 && r.vs_unfused.median < s.store_below);
}

// The test's figures for the verbose line and the fallback warning, e.g. "fused/unfused per
// round: median 0.931, 5 of 5 test rounds below 0.99 (5 needed); route vs path 2: median 0.952,
// faster in 4 of 5".
inline std::string describe(const Result& r, float margin) {
  char buf[320];
  if (r.fused_only) {
    if (r.route_other < 0) {
      std::snprintf(buf, sizeof buf, "fused only: one candidate after the screen (%d rounds)",
                    r.rounds);
    } else {
      std::snprintf(buf, sizeof buf,
                    "fused only: route vs path %d: median %.3f, faster in %d of %d (%d rounds)",
                    r.route_other, r.route.median, r.route.wins, r.route.n, r.rounds);
    }
    return buf;
  }
  if (r.test_rounds == 0) {
    std::snprintf(buf, sizeof buf, "every fused candidate dropped by the screen (%d rounds)",
                  r.rounds);
    return buf;
  }
  int n = std::snprintf(buf, sizeof buf,
                        "fused/unfused per round: median %.3f, %d of %d test rounds below %.2f "
                        "(%d needed of %d planned; %d rounds, the test from round %d)",
                        r.vs_unfused.median, r.vs_unfused.wins, r.vs_unfused.n, 1.0 - margin,
                        r.needed, r.test_rounds, r.rounds, r.test_from);
  if (r.route_other >= 0 && n > 0 && n < static_cast<int>(sizeof buf)) {
    std::snprintf(buf + n, sizeof buf - n, "; route vs path %d: median %.3f, faster in %d of %d",
                  r.route_other, r.route.median, r.route.wins, r.route.n);
  }
  return buf;
}

}  // namespace mkernel::fused_verdict
