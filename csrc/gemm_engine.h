// Torch-facing entry to the Hopper GEMM engine (csrc/kernels/gemm): used by
// the `gemm` op and by ag_gemm / gemm_rs / gemm_ar at world size 1.
#pragma once

#include <ATen/ATen.h>

#include <string>

#ifdef MKERNEL_WITH_CUDA
#include "kernels/gemm/gemm_api.h"
#include "kernels/gemm/gemv_api.h"
#endif

namespace mkernel {

// out[M, N] = a[M, K] · b[N, K]ᵀ on the current CUDA stream. `config` is a
// gemm::ConfigId value (-1: by shape); `sm_count` limits the persistent grid
// (0: every SM the process may use). Errors name `op`.
// `swizzle`/`raster` set the persistent scheduler's tile order (0: by shape).
// `splits` > 1 cuts K into that many slices on the hooked kernel (0: by shape).
// `pdl`: programmatic dependent launch (gemm::Launch::pdl).
// config -1 with swizzle, raster and splits left open runs engine_plan's choice.
at::Tensor engine_gemm(const char* op, const at::Tensor& a, const at::Tensor& b,
                       int64_t config = -1, int64_t sm_count = 0, int64_t swizzle = 0,
                       int64_t raster = 0, int64_t splits = 0, bool pdl = false);

// `bytes` of zero-initialised device scratch on `like`'s device for the
// current stream, reused call after call (the engine's workspace contract:
// gemm::hooked_workspace_size). Null when bytes is 0.
void* engine_workspace(size_t bytes, const at::Tensor& like);

#ifdef MKERNEL_WITH_CUDA
// SMs of the current device as this process sees them (fewer under MPS), cached.
int device_sms();
// A plan as the *_plan ops report it: "<config>/s<swizzle>/<m|n>[ (tuned)]".
std::string plan_name(gemm::ConfigId config, int swizzle, int raster, bool tuned);
// The engine's input checks, naming `op`: a Hopper GPU, bf16/fp16 operands.
void check_engine_inputs(const char* op, const at::Tensor& a);

// The engine's problem for a [rows, k] · b [n, k]ᵀ (or their batched/grouped
// forms) written to d, in a's dtype; each extent must fit in int32.
gemm::Problem engine_problem(const char* op, const at::Tensor& a, const at::Tensor& b, void* d,
                             int64_t rows, int64_t n, int64_t k);

// What the engine's timings depend on, as the plan table's keys hold it: "NVIDIA H200;sm90;
// sms132;drv13000;rt13000;tune2" (model, compute capability, `sms` of the launch, driver and
// runtime, the tuner's method). The fused verdict cache keys its entries by it too.
std::string gemm_device_signature(int device, int sms);

// What config "auto" runs for problem p under launch l (sm_count filled in):
// the plan the autotuner measured fastest for this shape's M bucket (timed on
// the first call, cached in memory and in the plan file: gemm_autotune.cpp),
// or the shape heuristic's when tuning is off, a graph is being captured, or
// (`wait` false) the device is busy tuning another shape. *tuned says which.
gemm::Plan engine_plan(const gemm::Problem& p, const gemm::Launch& l, const at::Tensor& like,
                       bool* tuned = nullptr, bool wait = false);
// Config "auto" for 9 <= M <= kSwapMaxRows: what the small-M tuner measured fastest on this
// shape among the engine's own plan (`engine`), the swapped GEMM's variants that fit M
// (gemm_swap_api.h: A's rows on the MMA's N, so they pad to a multiple of 8 instead of 64) and,
// up to 16 rows, the GEMV's variants (gemv_api.h). Timed on the first call of a shape's M
// bucket (as engine_plan), cached in memory and in the plan table (so mkernel.share_gemm_plans
// hands it to every rank). kind kNone when there is no measured choice (MKERNEL_GEMM_AUTOTUNE=0,
// graph capture, or `wait` false while the device tunes another shape): then the GEMV's
// by-shape plan runs up to 16 rows and the engine's plan above. The candidates sum K in other
// orders: the choice changes the bits, never from one call of a shape to the next.
constexpr int64_t kSwapMaxRows = 512;
struct SmallPlan {
  // kSplit (session 11, opt-in MKERNEL_GEMM_SMALLM_S11=1): the engine's hooked cooperative
  // kernel with K split `splits` ways (tokens on the MMA's M), for shapes whose tiles fill
  // under half of the SMs (333 x 3584 x 8192: 3 x 14 tiles of 128x256, x 3 = 126 CTAs).
  enum Kind { kNone, kEngine, kSwap, kGemv, kSplit } kind = kNone;
  int swap = 0;     // kSwap: gemm_swap variant
  gemv::Plan gemv;  // kGemv
  gemm::ConfigId split_config = gemm::ConfigId::kCoop128x256Cluster1x2;  // kSplit
  int splits = 1;                                                         // kSplit
};
SmallPlan engine_small_plan(const gemm::Problem& p, const gemm::Launch& l,
                            const gemm::Plan& engine, const at::Tensor& like,
                            bool* tuned = nullptr, bool wait = false);
// The small-M choice already in memory for p's M bucket (no tuning, no plan-table read, no
// engine plan): what engine_gemm looks up first at 9..kSwapMaxRows rows, so that a decode call
// costs one map lookup. kNone on a miss (then the full path: engine_plan, engine_small_plan).
SmallPlan cached_small_plan(const gemm::Problem& p, int sms, int device);
// "split:<config>/k<splits>": a kSplit plan's name as gemm_plan reports it.
std::string split_plan_name(const SmallPlan& c);
// out = a · bᵀ with a kSplit plan on the current stream; false (nothing launched) when the
// hooked kernel cannot take these operands with it.
bool engine_split(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                  const SmallPlan& plan);
// out [m, n] = a · bᵀ with the swapped GEMM's `variant` on the current stream; false (nothing
// launched) when the variant cannot take these operands.
bool engine_swap(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                 int variant);
// The same for a packed grouped problem (p.group_end set, p.m = T rows of
// p.batches experts) on the hooked kernel; tuned on the first call's routing.
gemm::Plan grouped_plan(const gemm::Problem& p, const gemm::Launch& l, const at::Tensor& like,
                        bool* tuned = nullptr, bool wait = false);
// The packed grouped GEMM (gemm_grouped_packed's tuned plan) with its A rows gathered where
// they lie (gemm::Problem::a_row_map): out [rows, N] holds, for each expert e of offs (its rows
// [offs[e-1], offs[e])), A_e · b[e]ᵀ, where packed row r of A is row row_map[r] of a_pos when
// row_map[r] >= 0, else row -1 - row_map[r] of a_neg. a_neg [*, K] gives the dtype and the
// device; a_pos holds rows of K elements on that device (16-byte aligned). Rows past
// offs[E-1] are not written.
at::Tensor grouped_packed_gathered(const char* op, const void* a_pos, const at::Tensor& a_neg,
                                   const int32_t* row_map, int64_t rows, const at::Tensor& b,
                                   const at::Tensor& offs);
// The same GEMM over row segments into out [rows, N] (allocated by the caller; other rows
// untouched): b.size(0) * groups_per_b groups, group i the rows [group_begin[i], group_end[i])
// (device int32 arrays) times b[i / groups_per_b]ᵀ, on the current stream with a persistent
// grid of every SM but `leave_sms` (the MoE dispatch's sends run beside it there). The plan is
// the tuned one of the problem's shape (the same key as grouped_packed_gathered's).
void grouped_packed_gathered_segments(const char* op, const void* a_pos, const at::Tensor& a_neg,
                                      const int32_t* row_map, const at::Tensor& b,
                                      const int32_t* group_begin, const int32_t* group_end,
                                      int groups_per_b, at::Tensor& out, int leave_sms);
#endif

// The host reference: a · bᵀ accumulated in float32, returned in a's dtype.
at::Tensor reference_gemm(const at::Tensor& a, const at::Tensor& b);

}  // namespace mkernel
