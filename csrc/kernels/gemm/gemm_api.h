// Host API of mkernel's Hopper GEMM engine: D[M,N] = A[M,K] · B[N,K]ᵀ
// (the torch.nn.functional.linear layout; A and B K-major, D row-major),
// bf16/fp16 in and out, fp32 accumulation.
//
// Plain C++ (no torch, no CUTLASS): the torch glue (csrc/gemm.cpp) and the
// fused ops include this; the CUTLASS instantiations implement it, one .cu per
// (config, dtype) so builds run in parallel and a compile error names a case.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mkernel::gemm {

enum class DType : int { kBF16 = 0, kFP16 = 1 };

// Tile configurations shipped (see gemm_config.hpp for the shapes), listed
// once in generate_instantiations.py's CONFIGS (configs.inc is generated from
// it, as are config_name, the instantiations and mkernel.GEMM_CONFIGS). kAuto
// picks by shape (select_config).
enum class ConfigId : int {
  kAuto = -1,
#define MKERNEL_GEMM_CONFIG(ENUM, ID, NAME) ENUM = ID,
#include "configs.inc"
#undef MKERNEL_GEMM_CONFIG
  kNumConfigs,  // ids are 0..kNumConfigs-1 (the generator numbers them in order)
};

// The config's user-facing name ("coop_128x256_c2x1"; "auto" for kAuto).
const char* config_name(ConfigId id);

struct Problem {
  const void* a;  // [m, k], row stride k
  const void* b;  // [n, k], row stride k
  void* d;        // [m, n], row stride n
  int m, n, k;    // m >= 1; n, k multiples of 8 (16-byte TMA alignment)
  DType dtype;
  // Grouped (MoE) problems, hooked kernel only: `batches` GEMMs of this shape
  // laid out back to back (a [batches, m, k], b [batches, n, k], d [batches, m, n]);
  // rows >= batch_rows[i] (device array) of batch i are neither computed nor
  // stored (their output is unspecified).
  int batches = 1;
  const int* batch_rows = nullptr;
  // Packed groups (hooked kernel, the torch._grouped_mm layout): a [m, k] and
  // d [m, n] hold every group's rows back to back, b [batches, n, k];
  // group_end[i] (device, non-decreasing) ends group i's rows. Rows past
  // group_end[batches - 1] are not written.
  const int* group_end = nullptr;
  // Packed groups with gathered A rows (the MoE dispatch's receive layout): row r of the
  // packed A is read from a + i * k if i = a_row_map[r] >= 0, else from a_neg + (-1 - i) * k
  // (both row-major with row stride k); a is then the base of the i >= 0 rows and m only
  // bounds the rows. Rows past group_end[batches - 1] are not read.
  const int* a_row_map = nullptr;
  const void* a_neg = nullptr;
  // Packed groups as row segments (the MoE dispatch's overlapped launches: one rank's own rows,
  // then the peers'): batches * groups_per_b groups, group i the rows [group_begin[i],
  // group_end[i]) of A and D (device; ranges may leave gaps, any order, none overlapping) with
  // B matrix i / groups_per_b. Null: group i starts where group i - 1 ends (groups_per_b 1).
  const int* group_begin = nullptr;
  int groups_per_b = 1;
  // Row segments with a head (the MoE fused dispatch: every expert's own rows first, then the
  // peers' rows of each expert in two segments): group_b_head + batches * groups_per_b groups,
  // groups i < group_b_head taking B matrix i, the others (i - group_b_head) / groups_per_b.
  int group_b_head = 0;
};

struct Launch {
  cudaStream_t stream = nullptr;
  int sm_count = 0;  // CTAs of the persistent grid; 0: the device's SM count (shrinks under MPS)
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Tile order of the persistent scheduler: tiles are walked along `raster`
  // within bands of `swizzle` tiles so operands stay hot in L2.
  int swizzle = 0;  // 1, 2, 4 or 8; 0: by shape
  int raster = 0;   // 0: by shape, 1: along M, 2: along N
  // Split-K slices per output tile (hooked kernel): 1 none; 0 by shape — when
  // the tiles leave most clusters idle (small M), K is cut so that every
  // cluster streams its share of B. Needs hooked_workspace_size() bytes.
  int splits = 0;
  // Programmatic dependent launch: the kernel may start (barrier set-up,
  // descriptor prefetch) while the previous kernel on the stream drains; it
  // waits for that kernel's memory (griddepcontrol.wait) before touching any.
  // Off by default: back-to-back GEMMs measured no faster with it (0-3%
  // slower, benchmarks/NOTES.md run 10).
  bool pdl = false;
};

// Why a problem can't run (nullptr if it can): shapes, alignment, dtype.
const char* can_implement(const Problem& p, ConfigId id, const Launch& l);

// Bytes of device workspace the config needs for this problem.
size_t workspace_size(const Problem& p, ConfigId id, const Launch& l);

// What kAuto runs: a config and a tile order, from a shape heuristic fitted to
// H200 measurements (benchmarks/results/gemm_*.json).
struct Plan {
  ConfigId config;
  int swizzle;
  int raster;
};
Plan select_plan(int m, int n, int k, int sm_count);
// Plans worth timing for this shape, select_plan's first, then the configs and
// tile orders that won some measured shape of its class (an autotuner times
// them once per shape: csrc/gemm_autotune.cpp). Writes at most `capacity`
// plans, returns how many. None splits K, so all give the same bits.
int candidate_plans(int m, int n, int k, int sm_count, Plan* out, int capacity);
ConfigId select_config(int m, int n, int k);
// The same for the packed grouped GEMM (hooked kernel, T rows over `experts`
// groups): the fixed plan it ran before tuning first, then hooked configs and
// tile orders; none splits K.
int grouped_candidate_plans(int t, int n, int k, int experts, int sm_count, Plan* out,
                            int capacity);

// The hooked kernel (gemm_kernel_sm90.cuh): the same GEMM with the engine's
// communication hooks. The cooperative persistent configs and
// ping_128x128_c1x2 (hooked_supported); split-K on the cooperative ones only.
struct HookArgs {
  // (a) wait before loading A rows [r, r+BLOCK_M): a_ready[i] >= a_ready_value
  //     for every i covering those rows, i = row / rows_per_flag. Null: no wait.
  const uint64_t* a_ready = nullptr;
  int rows_per_flag = 1;
  uint64_t a_ready_value = 1;
  // (b) after tile (m, n) is in global memory: tile_done[m * tiles_n + n] =
  //     tile_done_value (release, system scope). Null: no signal.
  uint64_t* tile_done = nullptr;
  uint64_t tile_done_value = 1;
  // (c) order of the M units (cluster rows of tiles): a permutation of
  //     [0, units_m) on the device, or null for the natural order.
  const int* m_order = nullptr;
  // Bound of every wait, in seconds (%globaltimer). On a timeout the kernel
  // writes what it waited for into *diag (host-mapped memory: a
  // comm::WaitDiagnostic, see kernels/comm/group_sync.cuh) and traps.
  double timeout_s = 10.0;
  void* diag = nullptr;
};

struct TileCounts {
  int tiles_m, tiles_n;  // tiles of the output (tile_done has tiles_m * tiles_n flags)
  int units_m;           // M units of the scheduler (m_order has units_m entries)
  int block_m, block_n;
};

bool hooked_supported(ConfigId id);
// Configs of the packed grouped GEMM (run_hooked with Problem::group_end): coop_128x256_c2x1,
// coop_128x128_c2x1, coop_128x256_c1x2, coop_256x128_c1x2 and ping_128x128_c1x2.
bool packed_supported(ConfigId id);
TileCounts tile_counts(ConfigId id, int m, int n);
// kAuto resolves to a hooked-capable config.
ConfigId resolve_hooked(const Problem& p, ConfigId id, const Launch& l);
cudaError_t run_hooked(const Problem& p, ConfigId id, const Launch& l, const HookArgs& h,
                       const char** reason = nullptr);
// Workspace bytes run_hooked needs for this problem and launch (0 without
// split-K). Its first bytes are split-K tickets: the workspace must be zero
// before its first use; each launch leaves it so, so one workspace serves
// every launch on one stream (not launches that may overlap).
size_t hooked_workspace_size(const Problem& p, ConfigId id, const Launch& l);

// Launches on l.stream. Returns cudaSuccess or the launch error; a CUTLASS
// status other than success maps to cudaErrorInvalidValue with the reason in
// *reason (static string) when reason is non-null.
cudaError_t run(const Problem& p, ConfigId id, const Launch& l, const char** reason = nullptr);

}  // namespace mkernel::gemm
