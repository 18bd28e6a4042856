// Package ibverbs is the transport backend for ConnectX-class HCAs over
// InfiniBand and RoCE: reliable-connected (RC) queue pairs driven through
// libibverbs, which package verbs loads with dlopen at run time, so this
// package builds and its tests run on hosts without rdma-core.
//
// # Endpoint
//
// Open takes the device and port from the placement (the first NICChoice of
// kind ibverbs — one NIC per endpoint, no striping over several; WithDevice
// overrides), checks that the port is ACTIVE,
// picks the source GID (SelectGID: on RoCE a RoCE v2 IPv4-mapped GID on the
// port's own netdev first, on InfiniBand index 0 and LID routing; WithGIDIndex
// overrides), and creates one PD and one CQ. Address creates one RC QP per
// peer (Config.Peer), moves it to INIT and posts one receive for the connect
// handshake; the blob lists each QP's number and starting PSN per peer rank,
// the port's LID, GID and active MTU, and every registered region's address,
// length and rkeys, with an HMAC under Config.Key. Connect checks every
// peer's blob (ErrAuth for a wrong MAC, ErrProtocol for a malformed one,
// ErrNotSupported for a link-layer or GID-family mismatch), moves each QP
// INIT → RTR (path MTU = the smaller active MTU; RoCE: GRH with the chosen
// GID index, hop limit 64; IB: DLID, GRH only across subnets) → RTS (ACK
// timeout derived from Config.Timeout, 7 retries, infinite RNR retry), then
// sends each peer a zero-byte SEND with its rank as immediate and waits for
// every peer's, so Connect returns only when every QP is known to reach its
// peer, or fails naming the ranks that did not answer.
//
// # Memory
//
// Host regions are registered with ibv_reg_mr. GPU regions
// (Region.Device) with ibv_reg_dmabuf_mr when the caller passes the DMA-BUF
// fd it exported with cuMemGetHandleForAddressRange (rdma-core >= 34, kernel
// >= 5.12, open GPU kernel modules), else — or when that fails — with
// ibv_reg_mr on the device pointer, which works where nvidia-peermem is
// loaded; if both fail, Register returns ErrNotSupported naming both causes.
// WithRelaxedOrdering registers data with IBV_ACCESS_RELAXED_ORDERING and a
// second, strict MR per region for flags (see below).
//
// # Writes and signals, and why the order holds
//
// OpWrite is one RDMA WRITE. OpWriteSignal is an RDMA WRITE of the data
// (unsignaled) followed, on the same QP, by an 8-byte RDMA WRITE of
// SignalValue to the flag word (inline where the QP allows, from registered
// memory otherwise), which is the op's signaled completion. This is safe on
// RC because:
//
//   - an RC responder executes a QP's requests in PSN order (IB spec vol. 1,
//     9.5 "Transaction ordering") and an HCA places one write message
//     before it starts the next, so the flag's DMA is issued after every
//     byte of the data — and of every earlier op to that peer, which is why
//     Caps.OrderedWrites is true;
//   - PCIe keeps posted writes from one device in order unless they carry
//     the relaxed-ordering attribute. Data MRs may be relaxed
//     (WithRelaxedOrdering), but the flag goes through an MR without it, and
//     a strictly ordered write never passes the writes before it;
//   - flags only grow: each is written once per op, in order, so the word
//     never moves backwards (contract rule 3) without any read-modify-write.
//
// On EFA's SRD none of the first point holds — SRD delivers each write
// independently, possibly out of order and over different paths — so the
// same pattern would let the flag land before the data. The efa package
// carries the signal on the data itself instead (see its doc).
//
// For a GPU destination, "placed" means written over PCIe; the GPU then reads
// the flag with an acquire load. That is sufficient on GPUs whose
// CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING is at least OWNER
// (Ampere and later, Hopper included); older ones need a flush (a local
// RDMA read, as NCCL does), which this backend does not issue.
//
// # Completions and failure
//
// Post groups consecutive ops to one peer into one ibv_post_send call and
// takes a ring slot per op (Caps.MaxInflight, default DefaultQueue); Poll
// calls ibv_poll_cq into a preallocated array and returns one Completion per
// op; neither allocates. A failed work completion fails the op, the peer
// (its QP is moved to the error state, which flushes the rest of its ops
// back with the same error) and the transport; the error names the peer
// rank, device and port and matches transport.ErrPeerGone (retry or RNR
// counter exceeded, response timeout) or ErrProtocol (access errors).
// Every few Polls a watchdog fails a peer whose oldest op has waited longer
// than Config.Timeout (ErrTimeout). Close destroys QPs, MRs, CQ, PD and the
// device context in that order and may be called more than once.
//
// # What was run, and what was not
//
// No machine available to this project has an RDMA device (no ConnectX, no
// EFA, no soft-RoCE), so nothing here has run against real hardware or a
// real kernel driver. What did run, under go test -race, on a CPU-only
// host:
//
//   - the pure parts: blob encoding and every malformed or forged form of it,
//     GID selection over hand-made RoCE and IB GID tables, the state
//     machine's attributes and masks against the spec's required sets, ACK
//     timeouts, sysfs GID tables and port netdevs from fake trees;
//   - the whole backend, C shim included, against the fake provider of
//     package verbstest: a libibverbs.so.1 stand-in compiled at test time
//     from the real rdma-core headers and loaded by path, which checks QP
//     transitions against the spec's attribute table, MR keys, bounds and
//     access, and executes RC writes, SENDs and immediates in order with
//     retry and RNR semantics. The transport conformance suite
//     (transporttest) passes on it for RoCE, InfiniBand, without inline data
//     and with relaxed ordering, as do DMA-BUF and peer-memory registration
//     paths (with host memory standing in for GPU memory);
//   - the build without rdma-core headers (-tags mkernel_nordma, or simply
//     no libibverbs-dev), where Open reports ErrNotSupported.
//
// Not run: real HCAs (so the in-order placement above has not been observed
// here, only modelled), real GID tables and RoCE routing, path MTU and ACK
// timeout behaviour on a fabric, DMA-BUF export of real GPU memory and
// nvidia-peermem, relaxed ordering on a real PCIe root complex, performance.
// TestConformance runs the suite on real hardware and skips, saying what is
// missing, where Available reports no usable device.
package ibverbs
