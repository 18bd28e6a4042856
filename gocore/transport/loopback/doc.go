// Package loopback is the transport backend for emulated nodes on one host: every rank maps
// its peers' registered regions (memfd segments, see gocore/transport/shm) and a write is a
// memcpy into the peer's memory followed, for a signal, by an atomic release store of the
// flag word — the same protocol a NIC follows, at memory speed, with no extra thread.
//
// Ops complete inside Post (Caps.OrderedWrites: a signal covers every earlier write). A
// peer's death is noticed through a pidfd watched by one goroutine per transport; a peer's
// clean Close through a state word in its control segment. Regions must be file-backed
// (Region.File): ranks live in different processes.
//
// WithReorder (tests only) holds ops back for a random delay and applies them in random
// order, as EFA SRD may; Caps.OrderedWrites is then false and completions mean placement,
// so the proxy's fences are exercised against a backend that really reorders.
// Backend.Open turns it on when MKERNEL_NET_FAULTS=SEED:MAXDELAY is set (transport.EnvNetFaults)
// in a test build (-tags mkernel_faults); a production build refuses the variable.
//
// Select it with MKERNEL_NET=loopback; it is never chosen automatically.
package loopback
