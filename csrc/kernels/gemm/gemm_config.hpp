// Compile-time tile configurations of the GEMM engine, one per ConfigId.
// A config is a type: tile shape, cluster shape, kernel schedule and tile
// scheduler, so choosing a config is choosing a type (as CUTLASS's dispatch
// policies do).
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/epilogue/dispatch_policy.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "gemm_api.h"

namespace mkernel::gemm {

using cute::_1;
using cute::_128;
using cute::_2;
using cute::_256;
using cute::_64;
using cute::Shape;

template <class TileShape_, class ClusterShape_, class KernelSchedule_, class EpilogueSchedule_,
          class Scheduler_>
struct ConfigTraits {
  using TileShape = TileShape_;
  using ClusterShape = ClusterShape_;
  using KernelSchedule = KernelSchedule_;
  using EpilogueSchedule = EpilogueSchedule_;
  using Scheduler = Scheduler_;
};

using Coop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using CoopEpi = cutlass::epilogue::TmaWarpSpecializedCooperative;
using Ping = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using PingEpi = cutlass::epilogue::TmaWarpSpecialized;
using Persistent = cutlass::gemm::PersistentScheduler;
using StreamK = cutlass::gemm::StreamKScheduler;

template <ConfigId Id>
struct Config;

template <>
struct Config<ConfigId::kCoop128x256Cluster2x1>
    : ConfigTraits<Shape<_128, _256, _64>, Shape<_2, _1, _1>, Coop, CoopEpi, Persistent> {};
template <>
struct Config<ConfigId::kCoop128x128Cluster2x1>
    : ConfigTraits<Shape<_128, _128, _64>, Shape<_2, _1, _1>, Coop, CoopEpi, Persistent> {};
template <>
struct Config<ConfigId::kCoop128x256Cluster1x2>
    : ConfigTraits<Shape<_128, _256, _64>, Shape<_1, _2, _1>, Coop, CoopEpi, Persistent> {};
template <>
struct Config<ConfigId::kPing64x256Cluster1x1>
    : ConfigTraits<Shape<_64, _256, _64>, Shape<_1, _1, _1>, Ping, PingEpi, Persistent> {};
template <>
struct Config<ConfigId::kCoop128x128StreamK>
    : ConfigTraits<Shape<_128, _128, _64>, Shape<_1, _1, _1>, Coop, CoopEpi, StreamK> {};
template <>
struct Config<ConfigId::kPing128x128Cluster1x2>
    : ConfigTraits<Shape<_128, _128, _64>, Shape<_1, _2, _1>, Ping, PingEpi, Persistent> {};

template <>
struct Config<ConfigId::kCoop256x128Cluster2x1>
    : ConfigTraits<Shape<_256, _128, _64>, Shape<_2, _1, _1>, Coop, CoopEpi, Persistent> {};
template <>
struct Config<ConfigId::kCoop256x128Cluster1x2>
    : ConfigTraits<Shape<_256, _128, _64>, Shape<_1, _2, _1>, Coop, CoopEpi, Persistent> {};
template <>
struct Config<ConfigId::kPing64x128Cluster1x1>
    : ConfigTraits<Shape<_64, _128, _64>, Shape<_1, _1, _1>, Ping, PingEpi, Persistent> {};

template <>
struct Config<ConfigId::kPing64x128K128Cluster1x1>
    : ConfigTraits<Shape<_64, _128, _128>, Shape<_1, _1, _1>, Ping, PingEpi, Persistent> {};
template <>
struct Config<ConfigId::kCoop128x256StreamK2x1>
    : ConfigTraits<Shape<_128, _256, _64>, Shape<_2, _1, _1>, Coop, CoopEpi, StreamK> {};
// Cluster-free 128x256 (fused18): not an engine candidate (candidate_plans never lists it); the
// fused ops take it under MKERNEL_FUSED_C1X1=1, where MPS places 1-CTA grids on 126 of 132 SMs
// for two clients but 2-CTA clusters on 96 (NOTES "fused8", s8run2 probe).
template <>
struct Config<ConfigId::kCoop128x256Cluster1x1>
    : ConfigTraits<Shape<_128, _256, _64>, Shape<_1, _1, _1>, Coop, CoopEpi, Persistent> {};

}  // namespace mkernel::gemm
