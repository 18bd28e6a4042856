// Standalone timing of the packed grouped GEMM with gathered A rows (gemm::Problem::a_row_map,
// the MoE dispatch's layout) against the same GEMM on a packed copy of those rows (TMA A), one
// config, bf16, on one GPU: the dev loop for the gather producer without a full extension build.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//     -Icsrc -Icsrc/include -I$CUTLASS/include -I$CUTLASS/tools/util/include -DCFG=kCoop128x256Cluster2x1 \
//     benchmarks/micro/gemm_gather.cu -o /tmp/gemm_gather -lcuda
//   /tmp/gemm_gather [experts rows_per_expert N K sm_count [seq]]  (seq: row r reads source row r)
//
// Checks the two outputs bit for bit (same K order) and prints the medians of 20 runs each.
// Session 23 measured the gather's variants with it (NOTES.md; load_gathered's comment).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/gemm/gemm_sm90.cuh"

#ifndef CFG
#define CFG kCoop128x256Cluster2x1
#endif

#define STRINGIFY2(x) #x
#define STRINGIFY(x) STRINGIFY2(x)
#define CFG_NAME STRINGIFY(CFG)

using namespace mkernel::gemm;
using G = GemmSm90<ConfigId::CFG, DType::kBF16>;
using Elem = cutlass::bfloat16_t;

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

__global__ void fill(Elem* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = Elem((static_cast<float>(h & 0xffff) / 65536.0f - 0.5f));
  }
}

// packed[r] = map[r] >= 0 ? pos[map[r]] : neg[-1 - map[r]]
__global__ void gather_rows(Elem* packed, const Elem* pos, const Elem* neg, const int* map,
                            int rows, int k) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const int i = map[r];
    const uint4* src = reinterpret_cast<const uint4*>(i >= 0 ? pos + int64_t(i) * k
                                                             : neg + int64_t(-1 - i) * k);
    uint4* dst = reinterpret_cast<uint4*>(packed + int64_t(r) * k);
    for (int c = threadIdx.x; c < k / 8; c += blockDim.x) dst[c] = src[c];
  }
}

static float time_ms(const Problem& p, const Launch& l, int iters) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < iters + 2; ++i) {
    CHECK(cudaEventRecord(a, l.stream));
    const char* why = nullptr;
    cudaError_t err = G::run_hooked(p, l, HookArgs{}, &why);
    if (err != cudaSuccess) {
      std::fprintf(stderr, "run_hooked: %s (%s)\n", cudaGetErrorString(err), why ? why : "");
      std::exit(1);
    }
    CHECK(cudaEventRecord(b, l.stream));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 2) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  const int E = argc > 1 ? std::atoi(argv[1]) : 128;
  const int per = argc > 2 ? std::atoi(argv[2]) : 256;
  const int N = argc > 3 ? std::atoi(argv[3]) : 2048;
  const int K = argc > 4 ? std::atoi(argv[4]) : 7168;
  const int sms = argc > 5 ? std::atoi(argv[5]) : 0;
  const int M = E * per;
  // Ragged experts: sizes per +- 50 %, same total.
  std::vector<int> ends(E);
  srand(7);
  int64_t acc = 0;
  for (int e = 0; e < E; ++e) {
    int n = per / 2 + rand() % (per + 1);
    if (e == E - 1) n = 0;
    acc += n;
    ends[e] = static_cast<int>(std::min<int64_t>(acc, M));
  }
  ends[E - 1] = M;
  // Source rows: half from `pos` (a token area), half from `neg` (x), in a random order.
  std::vector<int> perm(M), map(M);
  for (int i = 0; i < M; ++i) perm[i] = i;
  for (int i = M - 1; i > 0; --i) std::swap(perm[i], perm[rand() % (i + 1)]);
  const bool seq = argc > 6 && std::strcmp(argv[6], "seq") == 0;
  for (int r = 0; r < M; ++r) map[r] = seq ? r : (r & 1) ? perm[r] : -1 - perm[r];
  Elem *pos, *neg, *packed, *b, *d1, *d2;
  int *dmap, *dends;
  CHECK(cudaMalloc(&pos, sizeof(Elem) * int64_t(M) * K));
  CHECK(cudaMalloc(&neg, sizeof(Elem) * int64_t(M) * K));
  CHECK(cudaMalloc(&packed, sizeof(Elem) * int64_t(M) * K));
  CHECK(cudaMalloc(&b, sizeof(Elem) * int64_t(E) * N * K));
  CHECK(cudaMalloc(&d1, sizeof(Elem) * int64_t(M) * N));
  CHECK(cudaMalloc(&d2, sizeof(Elem) * int64_t(M) * N));
  CHECK(cudaMalloc(&dmap, sizeof(int) * M));
  CHECK(cudaMalloc(&dends, sizeof(int) * E));
  fill<<<1024, 256>>>(pos, int64_t(M) * K, 1);
  fill<<<1024, 256>>>(neg, int64_t(M) * K, 2);
  fill<<<1024, 256>>>(b, int64_t(E) * N * K, 3);
  CHECK(cudaMemcpy(dmap, map.data(), sizeof(int) * M, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dends, ends.data(), sizeof(int) * E, cudaMemcpyHostToDevice));
  gather_rows<<<1024, 256>>>(packed, pos, neg, dmap, M, K);
  CHECK(cudaMemset(d1, 0xff, sizeof(Elem) * int64_t(M) * N));
  CHECK(cudaMemset(d2, 0x7f, sizeof(Elem) * int64_t(M) * N));
  CHECK(cudaDeviceSynchronize());

  Launch l;
  int dev_sms = 0;
  CHECK(cudaDeviceGetAttribute(&dev_sms, cudaDevAttrMultiProcessorCount, 0));
  l.sm_count = sms > 0 ? sms : dev_sms;
  l.splits = 1;
  Problem plain{packed, b, d1, M, N, K, DType::kBF16};
  plain.batches = E;
  plain.group_end = dends;
  Problem gath = plain;
  gath.a = pos;
  gath.a_neg = neg;
  gath.a_row_map = dmap;
  gath.d = d2;
  const float t_plain = time_ms(plain, l, 20);
  const float t_gath = time_ms(gath, l, 20);
  std::vector<uint16_t> h1(int64_t(M) * N), h2(int64_t(M) * N);
  CHECK(cudaMemcpy(h1.data(), d1, h1.size() * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(h2.data(), d2, h2.size() * 2, cudaMemcpyDeviceToHost));
  int64_t diff = 0;
  for (size_t i = 0; i < h1.size(); ++i) diff += h1[i] != h2[i];
  const double flop = 2.0 * M * N * double(K);
  std::printf("%s E=%d rows=%d N=%d K=%d sms=%d %s: packed %.3f ms (%.0f TF/s), "
              "gathered %.3f ms (%.0f TF/s), ratio %.3f, differing outputs %lld of %zu\n",
              CFG_NAME, E, M, N, K, l.sm_count, seq ? " seq" : "", t_plain,
              flop / t_plain / 1e9, t_gath, flop / t_gath / 1e9, t_plain / t_gath,
              static_cast<long long>(diff), h1.size());
  return diff == 0 ? 0 : 2;
}
