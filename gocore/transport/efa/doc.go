// Package efa is the transport backend for AWS Elastic Fabric Adapter: one
// SRD (scalable reliable datagram) queue pair per endpoint, created with
// efadv_create_qp_ex and driven through the extended verbs API (ibv_qp_ex,
// ibv_wr_*), with an address handle per peer. libibverbs and libefa are
// loaded with dlopen at run time by package verbs (in
// gocore/transport/ibverbs/verbs), so this package has no cgo of its own,
// builds everywhere, and reports ErrNotSupported where they are missing.
//
// # Endpoint
//
// Open takes the EFA device from the placement (the first NICChoice of kind
// efa — one device per endpoint, although p5 hosts give each GPU several;
// WithDevice overrides), checks the port is ACTIVE and that
// efadv_query_device reports EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE (without it,
// ErrNotSupported: the registry falls back to tcp), creates the PD, one CQ
// and the SRD QP (RESET → INIT with a random qkey → RTR → RTS, with infinite
// RNR retry where the device has EFADV_DEVICE_ATTR_CAPS_RNR_RETRY), and posts
// a pool of receive buffers. The blob carries the GID (table index 0), QP
// number, qkey and every region's address, length and rkey, with an HMAC
// under Config.Key. Connect creates an address handle per peer and exchanges
// a handshake message with each, so it returns only when every peer has
// been heard from. The order matters: an EFA receiver accepts RDMA writes
// only from senders it holds an address handle for, and a peer creates its
// handles before it sends its handshake, so once Connect has heard from
// a peer, that peer accepts this rank's writes.
//
// # Why signals are not a second write
//
// SRD delivers every message independently, over several paths, and does
// not keep their order: an RDMA WRITE of a flag posted after an RDMA WRITE of
// data can be placed first. So this backend never signals with a plain write
// (the pattern the ibverbs backend uses, which is only correct on RC).
// OpWriteSignal is instead:
//
//   - the data as an RDMA WRITE WITH IMMEDIATE, the immediate a token
//     (sender rank << 16 | op sequence number). The receiving device places
//     the data, then reports a receive completion carrying the token;
//   - the descriptor (flag buffer, offset, value, token) as a 32-byte SEND
//     into one of the receiver's posted buffers.
//
// The receiver pairs the two by token, whichever arrives first (a per-peer
// window, 4× the per-peer queue), and only then stores the value into the
// flag word with the CPU — an atomic max, so flags never move backwards
// when two signals to one word are applied out of order. That is the
// "receiver-side flag write after the data completed" of the transport
// contract. A signal without data is the descriptor alone; it covers the ops
// whose completions returned before it was posted (Caps.OrderedWrites is
// false, so the proxy fences): an SRD write completes at its sender only
// after the receiving device acknowledged it, and that device writes the
// descriptor's receive completion later, in PCIe order after the data.
// Consequences: flag words must be in host memory on the receiving side
// (Post refuses a flag in a peer's GPU memory with ErrNotSupported; data may
// be in GPU memory), and every signal consumes one or two receive buffers,
// which Poll reposts as it goes — so every rank must keep polling (the
// transport contract already asks for it).
//
// Writes use RDMA WRITE (one work request per op, up to the device's
// max_rdma_size); all work requests of a Post go to the device in
// ibv_wr_start/ibv_wr_complete batches. Every work request is signaled; an
// op completes when all of its work requests have. Nothing on the data path
// allocates.
//
// # Memory, failure, Close
//
// Registration is the ibverbs backend's (package memreg, shared by both):
// ibv_reg_dmabuf_mr for GPU memory with a DMA-BUF fd, ibv_reg_mr on the
// device pointer (nvidia-peermem) otherwise, ibv_reg_mr for host memory. A failed completion fails its peer
// and the transport with an error naming the peer rank and device
// (transport.ErrPeerGone for retry/RNR/timeout statuses, ErrProtocol
// otherwise); since the one QP serves every peer it is not moved to the
// error state: the failed peer's ops in flight complete with the error at
// once and their late completions are ignored. A watchdog fails a peer whose
// oldest op has waited longer than Config.Timeout (ErrTimeout). Close
// destroys address handles, the QP, MRs, the CQ, the PD and the device
// context, in that order, and may be called more than once.
//
// # What was run, and what was not
//
// No machine available to this project has an EFA device (or any RDMA
// device). Under go test -race on a CPU-only host, the following ran: the
// blob, descriptor, token and pairing-window logic, the SRD state sequence;
// and the whole backend against verbstest's fake provider, whose EFA device
// implements efadv_query_device, efadv_create_qp_ex and the ibv_qp_ex
// work-request functions and delivers SRD messages in random order (both
// pairing orders are observed, see TestReorderedArrivals). The transport
// conformance suite passes on it, as do the refusals (no RDMA write
// capability, not an EFA device, libefa missing) and DMA-BUF registration
// with host memory standing in for GPU memory.
//
// Not run: a real EFA device and libefa (rdma-core 44 in Debian bookworm
// predates RDMA write support, added in rdma-core 46, mid-2023; EFA devices
// with RDMA write are p5-class and later), SRD's real reordering, retransmission and RNR
// behaviour, the unsolicited-write-receive mode (not used), real GPU memory,
// performance. TestConformance runs the suite on a real device and skips,
// saying what is missing, where Available reports none.
package efa
