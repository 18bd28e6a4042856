// The GEMM tuner's warm-up rule (gemm_autotune.cpp warm_up), plain C++ so that the host tests run
// it (tests/gemm/test_gemm_warm_up.py): blocks of ~25 ms of one candidate's calls run until the
// call time settles — three blocks in a row within 0.5% of the one before, at least 300 ms in — or
// 1500 ms have passed. Why: a big GEMM takes the H100 to its 700 W cap within a fraction of a
// second, the SM clock then falls from 1980 to ~1350 MHz, and the plans do not slow down alike
// (session 52: the tuner, warmed for 100 ms, ranked near the boost clock and picked plans that ran
// 0.85-0.93x cuBLAS at the cap).
#pragma once

#include <cmath>

namespace mkernel::gemm {

class WarmUpRule {
 public:
  static constexpr float kBlockMs = 25.f;    // a block's target length
  static constexpr float kMinMs = 300.f;     // never shorter (s52e: the call time rose for ~150 ms)
  static constexpr float kMaxMs = 1500.f;    // never longer (a clock that keeps wandering)
  static constexpr float kSettled = 0.005f;  // a block within this fraction of the one before
  static constexpr int kSteadyBlocks = 3;    // ... this many blocks in a row

  // Adds one block's time; true once the warm-up is over.
  bool add(float block_ms) {
    spent_ += block_ms;
    const bool near = previous_ > 0.f && std::abs(block_ms - previous_) <= kSettled * previous_;
    steady_ = near ? steady_ + 1 : 0;
    previous_ = block_ms;
    return (settled() && spent_ >= kMinMs) || spent_ >= kMaxMs;
  }
  bool settled() const { return steady_ >= kSteadyBlocks; }
  float spent_ms() const { return spent_; }

 private:
  float spent_ = 0.f, previous_ = 0.f;
  int steady_ = 0;
};

}  // namespace mkernel::gemm
