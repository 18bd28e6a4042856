package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/mkernel/mkernel/gocore/topology"
)

// Sentinel errors. Backends wrap them with what they were doing and with whom ("write to
// rank 3 via mlx5_2: %w"), so callers match them with errors.Is.
var (
	// ErrPeerGone: a peer closed, crashed or became unreachable. The message names the rank.
	ErrPeerGone = errors.New("transport: peer gone")
	// ErrTimeout: a bounded wait (connect, a stuck operation) ran out. The message names the
	// rank and what was awaited.
	ErrTimeout = errors.New("transport: timed out")
	// ErrNotSupported: the backend cannot do this here: no such device, library missing,
	// memory kind it cannot register, a feature it lacks. Open returning it lets the registry
	// fall back to the next backend.
	ErrNotSupported = errors.New("transport: not supported")
	// ErrClosed: the transport was closed by its owner.
	ErrClosed = errors.New("transport: closed")
	// ErrAuth: a connection did not prove knowledge of the job key; it was rejected.
	ErrAuth = errors.New("transport: authentication failed")
	// ErrProtocol: a peer sent something malformed or from another version; the connection
	// was rejected.
	ErrProtocol = errors.New("transport: protocol error")
	// ErrInvalid: a caller error: unknown buffer or peer, range outside a region, bad blob.
	ErrInvalid = errors.New("transport: invalid argument")
)

// BufferID names a registered region. IDs are chosen by the caller and are symmetric: the
// same ID names "the same" buffer on every rank (its size may differ), so an Op names the
// remote buffer by ID, never by address or key.
type BufferID uint32

// Region is memory offered to Register. Exactly one of Bytes (host memory) or Device (GPU
// memory) is set.
type Region struct {
	// Bytes is host memory as this process sees it. It must stay valid, and must not move,
	// until Close: pass memory from mmap, cudaHostAlloc or a shm.Segment, never a Go heap
	// slice that the caller drops (the GC does not move heap objects, but the backend keeps
	// only the pointer).
	Bytes []byte
	// File, when set, is a shareable file whose bytes [FileOffset, FileOffset+len(Bytes))
	// are Bytes (a memfd or /dev/shm file, see shm.Segment). Backends whose data path runs
	// in another process — loopback peers, out-of-process plugins — map it; they return
	// ErrNotSupported for host memory without one (Caps.NeedsFile).
	File       SharedFile
	FileOffset uint64
	// Device is GPU memory, for backends with Caps.DeviceMemory.
	Device *DeviceRegion
}

// SharedFile is a file another process of the same user can open and map: Path is what
// it opens ("/proc/<pid>/fd/<n>" for a memfd, "/dev/shm/…"), Size the file's length.
// The zero value means "none".
type SharedFile struct {
	Path string
	Size uint64
}

// DeviceRegion is GPU memory: its device pointer and length and, where the driver can
// export it, a DMA-BUF file descriptor for it (ibverbs registers with
// ibv_reg_dmabuf_mr; without one it falls back to nvidia-peermem on Ptr).
type DeviceRegion struct {
	GPU      int     // CUDA device ordinal
	Ptr      uintptr // device virtual address
	Len      uint64
	DMABufFD int // -1 when none
	// DMABufOffset is Ptr's offset inside the DMA-BUF.
	DMABufOffset uint64
}

// Len returns the region's length in bytes.
func (r Region) Len() uint64 {
	if r.Device != nil {
		return r.Device.Len
	}
	return uint64(len(r.Bytes))
}

// OpKind is what an Op does.
type OpKind uint8

const (
	// OpWrite copies [Local, LocalOff, Len) here to [Remote, RemoteOff, Len) on Peer.
	OpWrite OpKind = iota + 1
	// OpWriteSignal is OpWrite followed by the signal: once the op's data is completely
	// placed in the peer's memory, the backend stores SignalValue into the 8-byte word at
	// [SignalBuf, SignalOff] on the peer (see Transport for the exact contract). Len may be
	// 0 (a pure signal).
	OpWriteSignal
)

func (k OpKind) String() string {
	switch k {
	case OpWrite:
		return "write"
	case OpWriteSignal:
		return "write-signal"
	}
	return "op?"
}

// Op is one one-sided operation. It is a plain value with no pointers, so posting a slice
// of them allocates nothing.
type Op struct {
	Kind OpKind
	// Peer is the destination rank (never the local rank).
	Peer int32
	// Local, LocalOff: the source, in a region registered here.
	Local    BufferID
	LocalOff uint64
	// Remote, RemoteOff: the destination, in the peer's region of that ID.
	Remote    BufferID
	RemoteOff uint64
	// Len is the number of bytes, at most Caps.MaxOpBytes (0 only for OpWriteSignal).
	Len uint64
	// SignalBuf, SignalOff, SignalValue: for OpWriteSignal, the 8-byte aligned flag word on
	// the peer and the value stored into it.
	SignalBuf   BufferID
	SignalOff   uint64
	SignalValue uint64
	// Cookie is returned unchanged in the op's Completion.
	Cookie uint64
}

// Completion reports that an op finished locally. Err is nil on success; a failed op also
// fails the transport (Err and Done), the rest of its peer's ops complete with errors too.
type Completion struct {
	Cookie uint64
	Err    error
}

// Caps describes what a backend does, so the proxy adapts instead of testing names.
type Caps struct {
	// OrderedWrites: ops to one peer are placed at the peer in posting order, signals
	// included (RC, tcp, loopback). When false (EFA SRD), the proxy implements a fence by
	// waiting for the completion of every earlier op to that peer before posting later ones.
	OrderedWrites bool
	// MaxOpBytes is the largest Len of one op; the proxy splits larger commands. 0: no limit.
	MaxOpBytes uint64
	// MaxInflight is the number of ops per peer the backend accepts before Post reports
	// back-pressure; the proxy's per-peer command credits never exceed it. 0: no limit.
	MaxInflight int
	// NeedsFile: host regions must carry a Region.File (the data path is in another process).
	NeedsFile bool
	// DeviceMemory: Region.Device is accepted.
	DeviceMemory bool
}

// Transport is one rank's endpoint of a backend, connected to every other rank of the job.
//
// # Lifecycle
//
//	t, _ := transport.Open(ctx, cfg)     // or a backend's own Open
//	t.Register(id, region)               // every buffer peers will write to, and every source
//	transport.Connect(ctx, t, session)   // Address → bootstrap AllGather → Connect
//	t.Post(ops); t.Poll(done)            // the data path, from one goroutine (the proxy)
//	t.Close()
//
// Register, Address, Connect and Close are control calls; they may block and allocate.
// Post and Poll are the data path: called from one goroutine at a time (the proxy's pinned
// thread), they never block on the network, never allocate in steady state, and return
// immediately.
//
// # The signal contract (every backend honours it)
//
//  1. The signal of an OpWriteSignal becomes visible at the peer only after every byte of
//     that op's data is visible there: a reader that acquire-loads the flag word and sees
//     SignalValue then reads the complete data. On transports that can reorder writes (EFA
//     SRD), the signal must ride on the data itself — RDMA write-with-immediate whose
//     receive completion makes the receiver's backend store the flag — or be stored by the
//     receiver's backend after it has seen the data complete. It must never be a second
//     plain RDMA write posted after the data write: SRD may place it first.
//  2. With Caps.OrderedWrites, the signal also covers every op posted earlier to the same
//     peer. Without it, ops whose Completion was returned before the signalling op was
//     posted are covered (completion implies remote placement on such backends).
//  3. The flag store is an 8-byte atomic release store, and a flag never decreases: a
//     backend that may apply two signals to one word out of order applies max(old, new).
//  4. Writes to the peer's memory are visible to the peer's CPU; to its GPU through the
//     same coherence path as any PCIe/NVLink write (the receiver acquires the flag).
//
// # Completions
//
// A Completion means the op's source memory may be reused, and on backends without
// OrderedWrites that its data (and signal) are placed at the peer. It does not mean the
// peer has looked at it: arrival is only ever learned from signals.
//
// # Progress and failure
//
// Some backends make progress only inside Poll (a receive queue carrying immediates, a
// shared-memory ring to a plugin), so the owner calls Poll in a loop on every rank, also
// when it has nothing to send, until Close. When a peer fails, the backend fails every op
// to that peer with an error matching ErrPeerGone (or ErrTimeout) and naming the rank,
// closes Done, and Err returns the first such error; no later Post succeeds. A transport
// never hangs: every wait is bounded by Config.Timeout or the caller's context.
type Transport interface {
	// Name is the backend's name ("tcp", "loopback", "ibverbs", "efa", "plugin:tcp").
	Name() string
	// Caps reports what the backend does; constant for the transport's life.
	Caps() Caps

	// Register makes r available as buffer id, locally as a source and remotely (after
	// Connect) as a destination. All registration happens before Address. Registering an
	// ID twice returns ErrInvalid.
	Register(id BufferID, r Region) error
	// Address returns this endpoint's connection blob (at most MaxBlobSize bytes): how
	// peers reach it and the remote keys of every registered region. Like an NCCL
	// connection handle, it is opaque to the caller, who exchanges it over the bootstrap.
	Address() ([]byte, error)
	// Connect connects to every peer; blobs[r] is rank r's Address (blobs[Rank] is this
	// rank's own and is ignored). It returns when every peer is connected and
	// authenticated, or fails naming the first rank that could not be reached. Called once.
	Connect(ctx context.Context, blobs [][]byte) error

	// Post starts ops in order and returns how many it took (a prefix of ops). Fewer than
	// len(ops) means back-pressure (a peer's queue is full): post the rest after Poll has
	// returned completions. An error means the transport failed (see Err).
	Post(ops []Op) (int, error)
	// Poll fills done with finished ops, in no particular order, and returns how many it
	// filled; 0 when nothing finished. It never blocks.
	Poll(done []Completion) (int, error)

	// Done is closed when the transport fails or is closed; Err then says why.
	Done() <-chan struct{}
	// Err returns nil while the transport works, else why it stopped (ErrClosed after
	// Close, an ErrPeerGone/ErrTimeout error naming the peer after a failure).
	Err() error
	// Close tears down every connection and unregisters memory; ops still in flight are
	// abandoned. It is bounded in time and safe to call more than once.
	Close() error
}

// MaxBlobSize bounds an Address blob (registered regions included).
const MaxBlobSize = 64 << 10

// Exchanger is the part of a bootstrap session the transports use; *bootstrap.Session
// implements it.
type Exchanger interface {
	Rank() int
	World() int
	// AllGather is a collective: every rank calls it and gets every rank's blob, in rank
	// order.
	AllGather(ctx context.Context, blob []byte) ([][]byte, error)
}

// Config is what Open and every backend's Open need. Zero fields take the defaults noted.
type Config struct {
	// Rank and World: this rank and the number of ranks (the bootstrap session's).
	Rank, World int
	// Node[r] is rank r's node (host) index, nil meaning "every rank on its own node".
	// Backends connect only ranks of different nodes unless AllPeers is set; emulated
	// nodes on one host are simply different indexes.
	Node []int
	// AllPeers connects every pair of ranks, same node or not (tests, the one-box
	// emulation). Default false.
	AllPeers bool
	// Key authenticates connections: a per-job key known to every rank, never sent, e.g.
	// bootstrap.Session.DeriveKey("transport"). Backends that accept connections (tcp)
	// refuse to start without one (16..64 bytes).
	Key []byte
	// Placement is this rank's GPU placement: the NICs to use (best first) and the proxy
	// CPUs. Nil: no RDMA NIC, no CPU preference.
	Placement *topology.Placement
	// BindHost is the IP address (or interface name) socket backends listen on and dial
	// from. Default: the local address of the route to RouteTo, else 127.0.0.1. Nothing
	// is ever bound on every interface.
	BindHost string
	// RouteTo is a "host:port" peers are reached through (usually the bootstrap root's
	// address); it picks BindHost's default.
	RouteTo string
	// Timeout bounds connection setup and how long an op may stay unfinished before the
	// backend declares its peer gone. Default DefaultTimeout.
	Timeout time.Duration
	// Log receives the backend's records. Default: no logging.
	Log *zap.Logger
	// DeviceCopy moves bytes between GPU regions for a backend that emulates a GPUDirect
	// NIC without one (loopback with MKERNEL_NET_GDR=1): the owner of the GPU memory
	// (the torch extension, through the C ABI) implements it with a copy engine. Nil: no
	// GPU-direct emulation (such a backend then refuses GPU regions).
	DeviceCopy DeviceCopier
}

// DeviceCopier is the "NIC DMA" of an emulated GPUDirect link: it copies GPU memory of
// this rank into a peer's GPU memory, asynchronously and in order. The backend calls it
// from its polling thread only, when an op is due at the peer (after the emulated link's
// serialization and latency), and releases the op's signal and completion only once
// Done reports the copy complete — the bytes land when a real GPUDirect RDMA write's
// would, never before.
type DeviceCopier interface {
	// Start begins copying n bytes from this rank's GPU buffer local at localOff to rank
	// peer's GPU buffer remote at remoteOff (ranges already checked against both
	// regions) and returns a token for Done. At most MaxDeviceCopies copies are started
	// and not yet seen done.
	Start(peer int, local BufferID, localOff uint64, remote BufferID, remoteOff, n uint64) (token uint64, err error)
	// Done reports whether the copy of token and every copy started before it completed.
	Done(token uint64) (bool, error)
}

// MaxDeviceCopies bounds a DeviceCopier's copies in flight (started, not yet seen done).
const MaxDeviceCopies = 512

// DefaultTimeout is Config.Timeout's default.
const DefaultTimeout = 60 * time.Second

// Peer reports whether rank r is one this rank connects to under cfg.
func (cfg *Config) Peer(r int) bool {
	if r == cfg.Rank || r < 0 || r >= cfg.World {
		return false
	}
	if cfg.AllPeers || cfg.Node == nil {
		return true
	}
	return cfg.Node[r] != cfg.Node[cfg.Rank]
}

// Connect exchanges t's Address with every rank over ex and connects t to its peers:
// the collective step between Register and the data path.
func Connect(ctx context.Context, t Transport, ex Exchanger) error {
	blob, err := t.Address()
	if err != nil {
		return errorf("%s: connection blob: %w", t.Name(), err)
	}
	blobs, err := ex.AllGather(ctx, blob)
	if err != nil {
		return errorf("%s: exchange connection blobs: %w", t.Name(), err)
	}
	if err := t.Connect(ctx, blobs); err != nil {
		return errorf("%s: connect rank %d: %w", t.Name(), ex.Rank(), err)
	}
	return nil
}

// InRange reports whether [off, off+n) lies inside a region of size bytes, without
// overflow. Backends use it to validate ops.
func InRange(off, n, size uint64) bool { return off <= size && n <= size-off }

// CheckOp validates the parts of op that do not depend on the backend: kind, peer, length
// and flag alignment. It returns an error matching ErrInvalid.
func CheckOp(op *Op, rank, world int) error {
	switch {
	case op.Kind != OpWrite && op.Kind != OpWriteSignal:
		return fmt.Errorf("%w: op kind %d", ErrInvalid, op.Kind)
	case op.Peer < 0 || int(op.Peer) >= world:
		return fmt.Errorf("%w: peer rank %d of %d", ErrInvalid, op.Peer, world)
	case int(op.Peer) == rank:
		return fmt.Errorf("%w: op to the local rank %d", ErrInvalid, rank)
	case op.Kind == OpWrite && op.Len == 0:
		return fmt.Errorf("%w: zero-length write to rank %d", ErrInvalid, op.Peer)
	case op.Kind == OpWriteSignal && op.SignalOff%8 != 0:
		return fmt.Errorf("%w: signal word offset %d on rank %d is not 8-byte aligned", ErrInvalid, op.SignalOff, op.Peer)
	}
	return nil
}
