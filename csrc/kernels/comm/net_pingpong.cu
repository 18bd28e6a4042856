// Self-test of the GPU-driven inter-node path between two ranks of different (emulated) nodes:
//   1. latency: `iters` ping-pongs of pure signals (WRITE_SIGNAL, 0 bytes); both ranks share a
//      GPU under MPS, so %globaltimer stamps of the two ranks compare directly (one-way time =
//      responder's arrival stamp - initiator's enqueue stamp);
//   2. data: `rounds` rounds in which every thread writes a pattern into send_area, one lane
//      pushes it in chunks (WRITE ... WRITE_SIGNAL on the last), the peer verifies every 16-byte
//      word and acknowledges; each side reuses its send_area only after its commands finished;
//   3. bulk: the initiator streams bulk_rounds x data_bytes to the responder (throughput).
#include "net_ops.cuh"
#include "net_pingpong_api.h"

namespace mkernel::comm {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint4 pattern(int src, int round, uint64_t word) {
  const uint32_t x = static_cast<uint32_t>(word) * 2654435761u ^ (static_cast<uint32_t>(src) << 24) ^
                     static_cast<uint32_t>(round) * 40503u;
  return make_uint4(x, x ^ 0x9e3779b9u, static_cast<uint32_t>(word), static_cast<uint32_t>(round * 64 + src));
}

__global__ void __launch_bounds__(kThreads, 1) net_pingpong_kernel(const NetPingPongParams p) {
  const GroupDevice& g = p.g;
  NetCursor cur;
  const int iters = p.stop_after >= 0 && p.stop_after < p.iters ? p.stop_after : p.iters;
  if (threadIdx.x == 0) {
    for (int i = 1; i <= iters; ++i) {
      const uint64_t v = p.seq_base + i;
      if (p.initiator) {
        const uint64_t t0 = globaltimer_ns();
        net_put_signal(g, cur, p.peer, 0, 0, 0, NetPingPongSlot::kPing + g.rank, v, kOpNone);
        net_wait(g, p.peer, NetPingPongSlot::kPing + p.peer, v, WaitSite{});
        p.times[2 * (i - 1)] = t0;
        p.times[2 * (i - 1) + 1] = globaltimer_ns();
      } else {
        net_wait(g, p.peer, NetPingPongSlot::kPing + p.peer, v, WaitSite{});
        p.times[2 * (i - 1)] = globaltimer_ns();
        net_put_signal(g, cur, p.peer, 0, 0, 0, NetPingPongSlot::kPing + g.rank, v, kOpNone);
        p.times[2 * (i - 1) + 1] = 0;
      }
    }
    p.data_ns[0] = globaltimer_ns();
  }
  if (p.stop_after >= 0) return;  // the fault test's victim leaves its peer waiting
  __syncthreads();
  const uint64_t words = p.data_bytes / 16;
  uint4* send = reinterpret_cast<uint4*>(g.net.send_area);
  const uint4* recv = reinterpret_cast<const uint4*>(g.net.recv_area);
  uint64_t last_ticket = 0;
  unsigned long long bad = 0;
  for (int round = 1; round <= p.rounds; ++round) {
    const uint64_t v = p.seq_base + round;
    // Our previous round's commands finished before we overwrite their source.
    if (threadIdx.x == 0 && round > 1) net_wait_sent(g, last_ticket, p.peer, kOpNone);
    __syncthreads();
    for (uint64_t w = threadIdx.x; w < words; w += kThreads) send[w] = pattern(g.rank, round, w);
    __syncthreads();
    if (threadIdx.x == 0) {
      // The peer finished verifying the previous round before we overwrite its recv_area.
      if (round > 1) net_wait(g, p.peer, NetPingPongSlot::kAck + p.peer, v - 1, WaitSite{});
      for (uint64_t off = 0; off < p.data_bytes; off += p.chunk_bytes) {
        const uint64_t n = p.data_bytes - off < p.chunk_bytes ? p.data_bytes - off : p.chunk_bytes;
        last_ticket = off + n < p.data_bytes
                          ? net_put(g, cur, p.peer, off, off, n, kOpNone)
                          : net_put_signal(g, cur, p.peer, off, off, n, NetPingPongSlot::kData + g.rank, v, kOpNone);
      }
      net_wait(g, p.peer, NetPingPongSlot::kData + p.peer, v, WaitSite{});
    }
    __syncthreads();
    for (uint64_t w = threadIdx.x; w < words; w += kThreads) {
      const uint4 got = recv[w];
      const uint4 want = pattern(p.peer, round, w);
      bad += (got.x != want.x) | (got.y != want.y) | (got.z != want.z) | (got.w != want.w);
    }
    __syncthreads();
    if (threadIdx.x == 0) net_put_signal(g, cur, p.peer, 0, 0, 0, NetPingPongSlot::kAck + g.rank, v, kOpNone);
  }
  if (bad != 0) atomicAdd(p.mismatches, bad);
  __syncthreads();
  if (threadIdx.x == 0) {
    if (p.rounds > 0) net_wait_sent(g, last_ticket, p.peer, kOpNone);
    p.data_ns[1] = globaltimer_ns();
    if (p.bulk_rounds > 0 && p.initiator) {
      p.bulk_ns[0] = globaltimer_ns();
      for (int r = 1; r <= p.bulk_rounds; ++r) {
        for (uint64_t off = 0; off < p.data_bytes; off += p.chunk_bytes) {
          const uint64_t n = p.data_bytes - off < p.chunk_bytes ? p.data_bytes - off : p.chunk_bytes;
          last_ticket = off + n < p.data_bytes
                            ? net_put(g, cur, p.peer, off, off, n, kOpNone)
                            : net_put_signal(g, cur, p.peer, off, off, n, NetPingPongSlot::kBulk + g.rank,
                                             p.seq_base + r, kOpNone);
        }
      }
      net_wait(g, p.peer, NetPingPongSlot::kBulk + p.peer, p.seq_base + p.bulk_rounds, WaitSite{});
      p.bulk_ns[1] = globaltimer_ns();
      net_wait_sent(g, last_ticket, p.peer, kOpNone);
    } else if (p.bulk_rounds > 0) {
      net_wait(g, p.peer, NetPingPongSlot::kBulk + p.peer, p.seq_base + p.bulk_rounds, WaitSite{});
      last_ticket = net_put_signal(g, cur, p.peer, 0, 0, 0, NetPingPongSlot::kBulk + g.rank,
                                   p.seq_base + p.bulk_rounds, kOpNone);
      net_wait_sent(g, last_ticket, p.peer, kOpNone);
    }
  }
}

}  // namespace

cudaError_t launch_net_pingpong(const NetPingPongParams& p, cudaStream_t stream) {
  net_pingpong_kernel<<<1, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace mkernel::comm
