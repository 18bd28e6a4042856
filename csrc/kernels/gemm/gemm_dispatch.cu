// Runtime → compile-time dispatch of the GEMM engine: (ConfigId, DType) to
// the instantiation that implements it, and the shape heuristic for kAuto.
#include <cuda_runtime.h>

#include <cstdlib>

#include "../../env_knobs.h"
#include "gemm_api.h"

namespace mkernel::gemm {
namespace detail {
#define MKERNEL_GEMM_INSTANCE(ID, DT, SUFFIX)                                                    \
  const char* can_implement_##SUFFIX(const Problem&, const Launch&);                             \
  size_t workspace_size_##SUFFIX(const Problem&, const Launch&);                                 \
  cudaError_t run_##SUFFIX(const Problem&, const Launch&, const char**);                         \
  cudaError_t run_hooked_##SUFFIX(const Problem&, const Launch&, const HookArgs&, const char**); \
  size_t hooked_workspace_size_##SUFFIX(const Problem&, const Launch&);                          \
  TileCounts tile_counts_##SUFFIX(int, int);
#include "instances.inc"
#undef MKERNEL_GEMM_INSTANCE

struct Entry {
  ConfigId id;
  DType dtype;
  const char* (*can_implement)(const Problem&, const Launch&);
  size_t (*workspace_size)(const Problem&, const Launch&);
  cudaError_t (*run)(const Problem&, const Launch&, const char**);
  cudaError_t (*run_hooked)(const Problem&, const Launch&, const HookArgs&, const char**);
  size_t (*hooked_workspace_size)(const Problem&, const Launch&);
  TileCounts (*tile_counts)(int, int);
};

constexpr Entry kEntries[] = {
#define MKERNEL_GEMM_INSTANCE(ID, DT, SUFFIX) \
  {ID,                                        \
   DT,                                        \
   can_implement_##SUFFIX,                    \
   workspace_size_##SUFFIX,                   \
   run_##SUFFIX,                              \
   run_hooked_##SUFFIX,                       \
   hooked_workspace_size_##SUFFIX,            \
   tile_counts_##SUFFIX},
#include "instances.inc"
#undef MKERNEL_GEMM_INSTANCE
};

const Entry* find(ConfigId id, DType dt) {
  for (const Entry& e : kEntries) {
    if (e.id == id && e.dtype == dt) return &e;
  }
  return nullptr;
}

int device_sm_count() {
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return sms;
}
}  // namespace detail

const char* config_name(ConfigId id) {
  switch (id) {
    case ConfigId::kAuto:
      return "auto";
#define MKERNEL_GEMM_CONFIG(ENUM, ID, NAME) \
  case ConfigId::ENUM:                      \
    return NAME;
#include "configs.inc"
#undef MKERNEL_GEMM_CONFIG
    default:
      return "unknown";
  }
}

Plan select_plan(int m, int n, int k, int sm_count) {
  // Fitted to sweeps on one H200 (benchmarks/results/gemm_nvidia_h200_20261129-*.json:
  // 8 shapes x 8 configs x 6 tile orders); run-to-run spread there is about ±5%, so only
  // choices that won in every run are encoded.
  if (sm_count < 2) return {ConfigId::kPing64x256Cluster1x1, 1, 1};  // clusters need 2 SMs
  // Decode-sized M is bound by streaming B (memory floor of 128x8192x3584:
  // 14.7 us): every SM must stream its share. 64x256 tiles keep only
  // ceil(M/64) * N/256 SMs busy (64 of 132 there: 0.79x cuBLAS, run
  // 20261129-141925); 64x128 tiles fill the GPU when they make at most one
  // wave, walked along M so the M tiles of one B tile meet in L2. Split-K on
  // the hooked kernel lost: its partial sums add traffic to a memory-bound GEMM.
  (void)k;
  if (m <= 256 && static_cast<long>((m + 63) / 64) * ((n + 127) / 128) <= sm_count) {
    return {ConfigId::kPing64x128Cluster1x1, 1, 1};
  }
  if (m <= 256) return {ConfigId::kPing64x256Cluster1x1, 8, 1};
  if (m <= 1024) return {ConfigId::kPing64x256Cluster1x1, 1, 1};
  const long tiles = static_cast<long>((m + 127) / 128) * ((n + 255) / 256);
  const double waves = static_cast<double>(tiles) / sm_count;
  const double last = waves - static_cast<long>(waves);
  // A few waves with a thin last one: halve the tile to even the waves out.
  if (waves < 4.0 && last > 0.0 && last < 0.5) return {ConfigId::kCoop128x128Cluster2x1, 4, 2};
  return {ConfigId::kCoop128x256Cluster2x1, 1, 1};
}

int candidate_plans(int m, int n, int k, int sm_count, Plan* out, int capacity) {
  const Plan first = select_plan(m, n, k, sm_count);
  int count = 0;
  auto add = [&](ConfigId id, int swizzle, int raster) {
    const Plan p{id, swizzle, raster};
    for (int i = 0; i < count; ++i) {
      if (out[i].config == id && out[i].swizzle == swizzle && out[i].raster == raster) return;
    }
    if (count < capacity) out[count++] = p;
  };
  add(first.config, first.swizzle, first.raster);
  if (sm_count < 2) return count;
  using C = ConfigId;
  if (m <= 256) {  // memory-bound: how each SM streams B
    add(C::kPing64x128Cluster1x1, 1, 1);
    add(C::kPing64x128K128Cluster1x1, 1, 1);
    add(C::kPing64x128Cluster1x1, 8, 2);
    add(C::kPing64x256Cluster1x1, 8, 1);
  } else if (m <= 1024) {
    add(C::kPing64x256Cluster1x1, 1, 1);
    // A few hundred rows (decode batches, 333x8192x8192: 0.70x cuBLAS with 192
    // tiles = 1.45 waves): 64x128 tiles make ~3 nearly full waves.
    add(C::kPing64x128Cluster1x1, 1, 1);
    add(C::kPing64x128Cluster1x1, 8, 2);
    add(C::kCoop128x256Cluster2x1, 8, 2);
    add(C::kPing128x128Cluster1x2, 8, 1);
    add(C::kCoop256x128Cluster2x1, 1, 1);
  } else {  // compute-bound: tile shape against wave count, tile order against L2
    add(C::kCoop128x256Cluster2x1, 1, 1);
    add(C::kCoop128x256Cluster2x1, 8, 2);
    add(C::kCoop128x256Cluster2x1, 4, 2);
    add(C::kPing128x128Cluster1x2, 8, 2);
    add(C::kPing128x128Cluster1x2, 1, 1);
    add(C::kPing128x128Cluster1x2, 4, 1);
    add(C::kPing64x256Cluster1x1, 1, 1);
    add(C::kPing64x256Cluster1x1, 8, 2);  // 8192x8192x3584: 1.5-4% ahead of the rest, runs 13, 15
    add(C::kCoop256x128Cluster1x2, 8, 1);
  }
  (void)k;
  return count;
}

int grouped_candidate_plans(int t, int n, int k, int experts, int sm_count, Plan* out,
                            int capacity) {
  (void)t, (void)k, (void)experts, (void)sm_count;
  using C = ConfigId;
  // 128x128 ping-pong first: under sustained load it ran the 32-expert MoE
  // case 1.04x / 1.12x torch._grouped_mm (uniform / skewed routing) where
  // 128x256 cooperative ran 1.00x / 0.99x (benchmarks/NOTES.md, run 16).
  const Plan fixed{C::kPing128x128Cluster1x2, 1, 1};
  const Plan others[] = {
      {C::kPing128x128Cluster1x2, 8, 2}, {C::kPing128x128Cluster1x2, 4, 2},
      {C::kCoop128x256Cluster2x1, 8, 2}, {C::kCoop128x256Cluster2x1, 1, 1},
      {C::kCoop128x128Cluster2x1, 8, 2},
  };
  // coop_128x256_c1x2 / coop_256x128_c1x2 (A multicast along N: fewer L2 -> SM bytes per flop)
  // passed the packed tests in s9run1 (bitwise equal to every other plan) but ran 4-22% slower
  // solo than ping_128x128_c1x2 there: candidates only with MKERNEL_GEMM_GROUPED_C1X2=1 (the A/B).
  static const bool with_c1x2 = [] {
    const char* v = env::get("MKERNEL_GEMM_GROUPED_C1X2");
    return v != nullptr && v[0] == '1';
  }();
  const Plan c1x2[] = {{C::kCoop128x256Cluster1x2, 8, 2}, {C::kCoop256x128Cluster1x2, 8, 1}};
  int count = 0;
  auto add = [&](const Plan& p) {
    for (int i = 0; i < count; ++i) {
      if (out[i].config == p.config && out[i].swizzle == p.swizzle && out[i].raster == p.raster) return;
    }
    if (count < capacity) out[count++] = p;
  };
  add(fixed);
  for (const Plan& p : others) add(p);
  if (with_c1x2) {
    for (const Plan& p : c1x2) add(p);
  }
  return count;
}

ConfigId select_config(int m, int n, int k) {
  return select_plan(m, n, k, detail::device_sm_count()).config;
}

static int cluster_size(ConfigId id) {
  switch (id) {
    case ConfigId::kPing64x256Cluster1x1:
    case ConfigId::kPing64x128Cluster1x1:
    case ConfigId::kPing64x128K128Cluster1x1:
    case ConfigId::kCoop128x128StreamK:
      return 1;
    default:
      return 2;
  }
}

static Launch complete(const Launch& l) {
  Launch out = l;
  if (out.sm_count <= 0) out.sm_count = detail::device_sm_count();
  return out;
}

// kAuto → the planned config, and the plan's tile order where the caller left it open.
static ConfigId resolve(const Problem& p, ConfigId id, Launch* l) {
  if (id != ConfigId::kAuto) return id;
  const Plan plan = select_plan(p.m, p.n, p.k, l->sm_count);
  if (l->swizzle == 0) l->swizzle = plan.swizzle;
  if (l->raster == 0) l->raster = plan.raster;
  return plan.config;
}

const char* can_implement(const Problem& p, ConfigId id, const Launch& l) {
  if (p.m < 1 || p.n < 1 || p.k < 1) return "m, n and k must be >= 1";
  if (p.n % 8 || p.k % 8) return "n and k must be multiples of 8 (16-byte TMA alignment)";
  if (l.swizzle != 0 && l.swizzle != 1 && l.swizzle != 2 && l.swizzle != 4 && l.swizzle != 8)
    return "swizzle must be 0, 1, 2, 4 or 8";
  if (l.raster < 0 || l.raster > 2)
    return "raster must be 0 (by shape), 1 (along M) or 2 (along N)";
  if (l.splits < 0) return "splits must be >= 0 (0: by shape)";
  Launch launch = complete(l);
  const ConfigId cfg = resolve(p, id, &launch);
  if (launch.sm_count < cluster_size(cfg)) return "this config's thread-block cluster needs 2 SMs";
  const detail::Entry* e = detail::find(cfg, p.dtype);
  if (!e) return "no such (config, dtype) instantiation";
  return e->can_implement(p, launch);
}

size_t workspace_size(const Problem& p, ConfigId id, const Launch& l) {
  Launch launch = complete(l);
  const detail::Entry* e = detail::find(resolve(p, id, &launch), p.dtype);
  if (!e) return 0;
  return e->workspace_size(p, launch);
}

cudaError_t run(const Problem& p, ConfigId id, const Launch& l, const char** reason) {
  if (p.batches > 1 || p.batch_rows != nullptr || p.group_end != nullptr) {
    if (reason) *reason = "grouped problems run on the hooked kernel (run_hooked)";
    return cudaErrorInvalidValue;
  }
  Launch launch = complete(l);
  const detail::Entry* e = detail::find(resolve(p, id, &launch), p.dtype);
  if (!e) {
    if (reason) *reason = "no such (config, dtype) instantiation";
    return cudaErrorInvalidValue;
  }
  return e->run(p, launch, reason);
}

bool hooked_supported(ConfigId id) {
  switch (id) {
    case ConfigId::kCoop128x256Cluster2x1:
    case ConfigId::kCoop128x128Cluster2x1:
    case ConfigId::kCoop128x256Cluster1x2:
    case ConfigId::kCoop256x128Cluster2x1:
    case ConfigId::kCoop256x128Cluster1x2:
    case ConfigId::kPing128x128Cluster1x2:  // ping-pong consumers, no split-K
      return true;
    default:
      return false;
  }
}

bool packed_supported(ConfigId id) {
  switch (id) {
    case ConfigId::kCoop128x256Cluster2x1:
    case ConfigId::kCoop128x128Cluster2x1:
    case ConfigId::kPing128x128Cluster1x2:
    case ConfigId::kCoop128x256Cluster1x2:
    case ConfigId::kCoop256x128Cluster1x2:
      return true;
    default:
      return false;
  }
}

ConfigId resolve_hooked(const Problem& p, ConfigId id, const Launch& l) {
  if (id != ConfigId::kAuto) return id;
  Launch launch = complete(l);
  const ConfigId planned = resolve(p, id, &launch);
  return hooked_supported(planned) ? planned : ConfigId::kCoop128x128Cluster2x1;
}

TileCounts tile_counts(ConfigId id, int m, int n) {
  const detail::Entry* e = detail::find(id, DType::kBF16);
  return e ? e->tile_counts(m, n) : TileCounts{0, 0, 0, 0, 0};
}

// The hooked entry points with kAuto resolved (config and tile order).
static const detail::Entry* hooked_entry(const Problem& p, ConfigId id, Launch* launch,
                                         const char** reason) {
  const ConfigId cfg = resolve_hooked(p, id, *launch);
  Launch planned = *launch;
  if (resolve(p, id, &planned) == cfg) *launch = planned;  // kAuto: the plan's tile order too
  if (p.group_end != nullptr ? !packed_supported(cfg) : !hooked_supported(cfg)) {
    if (reason) {
      *reason = p.group_end != nullptr ? "config has no packed grouped kernel (packed_supported)"
                                       : "the hooked kernel needs a cooperative, persistent config";
    }
    return nullptr;
  }
  const detail::Entry* e = detail::find(cfg, p.dtype);
  if (!e && reason) *reason = "no such (config, dtype) instantiation";
  return e;
}

size_t hooked_workspace_size(const Problem& p, ConfigId id, const Launch& l) {
  Launch launch = complete(l);
  const detail::Entry* e = hooked_entry(p, id, &launch, nullptr);
  return e ? e->hooked_workspace_size(p, launch) : 0;
}

cudaError_t run_hooked(const Problem& p, ConfigId id, const Launch& l, const HookArgs& h,
                       const char** reason) {
  Launch launch = complete(l);
  const detail::Entry* e = hooked_entry(p, id, &launch, reason);
  if (!e) return cudaErrorInvalidValue;
  return e->run_hooked(p, launch, h, reason);
}

}  // namespace mkernel::gemm
