// Package datapath assembles one rank's inter-node data path from the parts: symmetric
// shared-memory buffers and the arrival flag array, a transport chosen and connected over
// the bootstrap session, the command FIFO, and the proxy that drains it. It is what the C
// ABI, the Python bindings, the host reference backend and the benchmarks open; the
// parts stay usable on their own.
//
// Every rank calls Open with the same buffer ids (collective: it all-gathers over the
// session twice, to agree on a backend and to exchange connection blobs). Afterwards a
// producer — a host thread through fifo.h's mk_fifo_push or fifo.Ring.Push, later a GPU
// kernel — writes commands naming buffer ids and offsets into Ring(); the proxy moves the
// bytes; receivers wait on Flag(slot). Memory is memfd-backed (gocore/transport/shm), so
// the loopback backend and out-of-process plugins can map it; on a GPU machine the
// buffers become host-pinned by cudaHostRegister of the same mappings.
package datapath
