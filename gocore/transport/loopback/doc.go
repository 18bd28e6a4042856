// Package loopback is the transport backend for emulated nodes on one host: every rank maps
// its peers' registered regions (memfd segments, see gocore/transport/shm) and a write is a
// memcpy into the peer's memory followed, for a signal, by an atomic release store of the
// flag word — the same protocol a NIC follows, at memory speed, with no extra thread.
//
// Ops complete inside Post (Caps.OrderedWrites: a signal covers every earlier write),
// except in two cases where they wait in an in-order queue that Poll advances:
//   - link emulation (WithShape, MKERNEL_NET_EMULATE=50GB/s,3us): the endpoint's egress is
//     a link of that rate, and an op is placed (data, signal, completion) its latency after
//     its last byte left — emulated nodes are then communication-bound like real ones;
//   - large ops (>= ParallelCopyMin) are copied in CopyPiece pieces by a few worker
//     goroutines together with the polling thread (WithCopyWorkers, MKERNEL_NET_COPY_THREADS);
//     copies of consecutive ops overlap unless their destinations do, and ops are placed
//     (signal, completion) strictly in order.
//
// A peer's death is noticed by one goroutine per transport, through the peer's pidfd and its
// liveness socket (an abstract Unix listener nobody accepts on: the kernel resets our
// connection as soon as the peer's files are released, which can be long before its pidfd
// reports the exit); a peer's clean Close through a state word in its control segment. Regions must be file-backed
// (Region.File): ranks live in different processes.
//
// WithReorder (tests only) holds ops back for a random delay and applies them in random
// order, as EFA SRD may; Caps.OrderedWrites is then false and completions mean placement,
// so the proxy's fences are exercised against a backend that really reorders.
// Backend.Open turns it on when MKERNEL_NET_FAULTS=SEED:MAXDELAY is set (transport.EnvNetFaults)
// in a test build (-tags mkernel_faults); a production build refuses the variable.
//
// Select it with MKERNEL_NET=loopback; the registry never picks it on its own, but the GPU
// inter-node path (csrc/comm/net_path) asks for it when every rank of the group is on one
// host (emulated nodes) and MKERNEL_NET is unset.
package loopback
