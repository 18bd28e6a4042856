// Package transport is the inter-node data path's interface: one-sided writes of a local
// registered buffer range into a peer's registered buffer, with an optional arrival signal
// that the peer sees only after the data. The proxy (gocore/proxy) drives it from the
// command FIFO; backends implement it:
//
//	tcp       any host; the default where there is no RDMA NIC (gocore/transport/tcp)
//	ibverbs   RC queue pairs on ConnectX / InfiniBand / RoCE (gocore/transport/ibverbs)
//	efa       SRD through efadv on AWS EFA (gocore/transport/efa)
//	loopback  emulated nodes on one host through shared memory (gocore/transport/loopback)
//	plugin    any backend in a separate process through hashicorp/go-plugin
//	          (gocore/transport/plugin, MKERNEL_NET_PLUGIN=/path/to/binary)
//
// ibverbs and efa share what is the same in both under gocore/transport/rdma: the
// connection blob's envelope (rdma/connblob), registered memory (rdma/memreg) and the
// endpoint's life from Connect to Close (rdma/session).
//
// Connection setup follows NCCL's net plugins: each endpoint describes itself in an opaque
// blob (Transport.Address), the blobs travel over the bootstrap session (Connect does the
// AllGather), and Transport.Connect dials the peers. Backends never see the bootstrap.
//
// The Transport doc comment is the contract every backend honours, the signal contract
// above all; gocore/transport/transporttest checks it and every backend runs that suite.
//
// Backend choice (Open): MKERNEL_NET names one backend; MKERNEL_NET_PLUGIN a plugin
// binary; otherwise the best usable backend that opens on every rank. These two variables
// are read in env.go only.
package transport
