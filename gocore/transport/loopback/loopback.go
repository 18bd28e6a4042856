package loopback

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/mkernel/mkernel/gocore/topology"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/internal/wire"
	"github.com/mkernel/mkernel/gocore/transport/shm"
)

// Name is the backend's registry name.
const Name = "loopback"

const (
	blobMagic   = 0x424c4b4d // "MKLB"
	blobVersion = 2
	maxRegions  = 1024
	maxPath     = 4096
	ctrlSize    = 4096

	stateOpen   = 1
	stateClosed = 2

	// DefaultQueue is the number of finished ops Post buffers for Poll.
	DefaultQueue = 4096
)

func init() { transport.Register(Backend{}) }

// Backend registers loopback with the transport registry.
type Backend struct{}

func (Backend) Name() string                    { return Name }
func (Backend) Priority() int                   { return 0 }
func (Backend) Usable(*topology.Placement) bool { return true }
func (Backend) Open(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
	f, ok, err := transport.FaultsFromEnv()
	if err != nil {
		return nil, fmt.Errorf("loopback: open rank %d: %w", cfg.Rank, err)
	}
	var opts []Option
	if ok { // tests only (MKERNEL_NET_FAULTS)
		opts = append(opts, WithReorder(f.Seed+uint64(cfg.Rank), f.MaxDelay))
	}
	shape, ok, err := transport.LinkShapeFromEnv()
	if err != nil {
		return nil, fmt.Errorf("loopback: open rank %d: %w", cfg.Rank, err)
	}
	if ok {
		opts = append(opts, WithShape(shape))
	}
	workers, err := copyWorkersFromEnv()
	if err != nil {
		return nil, fmt.Errorf("loopback: open rank %d: %w", cfg.Rank, err)
	}
	opts = append(opts, WithCopyWorkers(workers))
	gdr, err := gpuDirectFromEnv()
	if err != nil {
		return nil, fmt.Errorf("loopback: open rank %d: %w", cfg.Rank, err)
	}
	if gdr || cfg.DeviceCopy != nil { // a caller that passes a device copier asks for it
		opts = append(opts, WithGPUDirect())
	}
	return Open(ctx, cfg, opts...)
}

// Option configures Open.
type Option func(*options)

type options struct {
	queue      int
	reorder    bool
	seed       uint64
	maxDelay   time.Duration
	maxPending int
	shape      transport.LinkShape
	workers    int
	pieceBytes int
	gdr        bool
}

// WithQueue sets how many finished ops wait for Poll before Post pushes back.
func WithQueue(n int) Option { return func(o *options) { o.queue = n } }

// WithReorder (tests only) delays each op by a random time up to maxDelay and applies due
// ops in random order (seeded), each signal still after its own data. Caps.OrderedWrites
// becomes false.
func WithReorder(seed uint64, maxDelay time.Duration) Option {
	return func(o *options) { o.reorder, o.seed, o.maxDelay = true, seed, maxDelay }
}

// WithShape emulates a network link (transport.EnvNetEmulate): this endpoint sends at most
// shape.BytesPerSecond bytes per second over all its peers, and each op's data and signal
// are placed shape.Latency after its last byte left. Ops stay in order (OrderedWrites).
func WithShape(shape transport.LinkShape) Option { return func(o *options) { o.shape = shape } }

// WithCopyWorkers sets how many goroutines help the proxy thread copy large ops (at least
// ParallelCopyMin bytes, in pieces of CopyPiece bytes); 0 copies everything on the
// calling thread. Default DefaultCopyWorkers().
func WithCopyWorkers(n int) Option { return func(o *options) { o.workers = n } }

type region struct {
	b    []byte
	file transport.SharedFile
	off  uint64
	// placed > 0: a GPU region of that many bytes (WithGPUDirect); b is nil.
	placed uint64
}

type peer struct {
	rank    int
	pid     int
	ctrl    []byte // the peer's control words
	regions map[transport.BufferID][]byte
	placed  map[transport.BufferID]uint64 // the peer's GPU regions (WithGPUDirect): their sizes
	segs    []*shm.Segment
	pidfd   int
	live    int // our connection to the peer's liveness socket, or -1
}

type pending struct {
	op  transport.Op
	due int64
}

// shaped is an op of the in-order queue (shaping, a parallel copy, a GPU-direct op): copied
// (its data is in the peer's memory) once left reaches 0, placed (signal, completion) once
// copied and due. A GPU-direct op (dev) is copied by the DeviceCopier, started once due.
type shaped struct {
	op       transport.Op
	due      int64
	src, dst []byte
	flag     *uint64
	left     atomic.Int32 // pieces not yet copied
	dev      bool         // GPU-direct: the DeviceCopier copies it once due
	token    uint64       // its copy (dev, once started)
}

// Transport is one rank's loopback endpoint.
type Transport struct {
	cfg  transport.Config
	o    options
	log  *zap.Logger
	ctrl *shm.Segment

	mu      sync.Mutex // control calls
	regions map[transport.BufferID]region
	// listen is this endpoint's liveness socket (an abstract Unix socket nobody accepts on):
	// peers connect to it and the kernel resets their connections the moment this process's
	// files are released — as a tcp peer notices a dead process — which can be well before its
	// pidfd reports the exit (a process whose GPU context is torn down exits slowly).
	listen     int
	listenName string
	connected  bool

	peers []*peer // by rank; nil for self and non-peers

	// data path, owned by the Post/Poll goroutine
	comp       []transport.Completion // ring
	compHead   uint64
	compTail   uint64
	pend       []pending
	rng        *rand.Rand
	epoch      time.Time
	checkedErr bool

	// In-order queue (shaping, parallel copies): a ring of preallocated entries; entries
	// [qHead, qCopy) have their copies started (done once left is 0), [qCopy, qTail) not yet.
	// linkFree is when the emulated link finishes sending what was posted.
	q                   []shaped
	qHead, qCopy, qTail uint64
	// qDev: entries [qHead, qDev) are due with their device copies (dev) started; only they
	// may be placed.
	qDev     uint64
	linkFree int64
	work     chan piece // pieces of the op being copied, for the workers and Poll
	stopWork chan struct{}

	transport.Failure // the first error (Err) and Done
	closeOnce         sync.Once
	workers           sync.WaitGroup
	stopWatch         *os.File // write end; closing it stops the watcher
	watchDone         chan struct{}
}

var _ transport.Transport = (*Transport)(nil)

// Open creates rank cfg.Rank's endpoint.
func Open(_ context.Context, cfg transport.Config, opts ...Option) (*Transport, error) {
	o := options{queue: DefaultQueue, maxPending: 1024, workers: DefaultCopyWorkers(), pieceBytes: CopyPiece}
	for _, f := range opts {
		f(&o)
	}
	if cfg.World < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.World {
		return nil, fmt.Errorf("loopback: open: %w: rank %d of %d", transport.ErrInvalid, cfg.Rank, cfg.World)
	}
	if o.queue < 1 || o.workers < 0 || o.pieceBytes < 1 {
		return nil, fmt.Errorf("loopback: open: %w: queue %d, %d copy workers, %d-byte pieces", transport.ErrInvalid, o.queue, o.workers, o.pieceBytes)
	}
	if o.shape.BytesPerSecond < 0 || o.shape.Latency < 0 {
		return nil, fmt.Errorf("loopback: open: %w: link shape %v", transport.ErrInvalid, o.shape)
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	ctrl, err := shm.Create(fmt.Sprintf("loopback-ctrl-%d", cfg.Rank), ctrlSize)
	if err != nil {
		return nil, fmt.Errorf("loopback: open rank %d: %w", cfg.Rank, err)
	}
	t := &Transport{
		cfg:     cfg,
		o:       o,
		log:     log.With(zap.String("transport", Name), zap.Int("rank", cfg.Rank)),
		ctrl:    ctrl,
		regions: map[transport.BufferID]region{},
		peers:   make([]*peer, cfg.World),
		comp:    make([]transport.Completion, o.queue),
		rng:     rand.New(rand.NewPCG(o.seed, uint64(cfg.Rank))),
		epoch:   time.Now(),
	}
	if t.listen, t.listenName, err = listenLiveness(cfg.Rank); err != nil {
		_ = ctrl.Close()
		return nil, fmt.Errorf("loopback: open rank %d: liveness socket: %w", cfg.Rank, err)
	}
	if o.reorder {
		t.pend = make([]pending, 0, o.maxPending)
	}
	if o.shape.Active() || o.workers > 0 || o.gdr {
		t.q = make([]shaped, o.queue)
	}
	if o.workers > 0 {
		t.work = make(chan piece, maxPieces)
		t.stopWork = make(chan struct{})
		t.workers.Add(o.workers)
		for range o.workers {
			go t.copyWorker()
		}
	}
	atomic.StoreUint64(t.word(ctrl.Bytes(), 1), uint64(os.Getpid()))
	atomic.StoreUint64(t.word(ctrl.Bytes(), 0), stateOpen)
	return t, nil
}

func (t *Transport) word(b []byte, i int) *uint64 { return (*uint64)(unsafe.Pointer(&b[8*i])) }

// Name implements transport.Transport.
func (t *Transport) Name() string { return Name }

// Caps implements transport.Transport.
func (t *Transport) Caps() transport.Caps {
	return transport.Caps{OrderedWrites: !t.o.reorder, NeedsFile: true, MaxInflight: t.o.queue, DeviceMemory: t.o.gdr}
}

// Register implements transport.Transport.
func (t *Transport) Register(id transport.BufferID, r transport.Region) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.Device != nil && t.o.gdr && !t.connected {
		return t.registerPlaced(id, r.Device)
	}
	switch {
	case t.connected:
		return fmt.Errorf("loopback: register buffer %d: %w: after Connect", id, transport.ErrInvalid)
	case r.Device != nil:
		return fmt.Errorf("loopback: register buffer %d: %w: device memory (%s=1 accepts it)", id, transport.ErrNotSupported, EnvGPUDirect)
	case len(r.Bytes) == 0:
		return fmt.Errorf("loopback: register buffer %d: %w: empty region", id, transport.ErrInvalid)
	case r.File.Path == "":
		return fmt.Errorf("loopback: register buffer %d: %w: host memory without a shared file (allocate it with shm.Create)", id, transport.ErrNotSupported)
	case !transport.InRange(r.FileOffset, uint64(len(r.Bytes)), r.File.Size):
		return fmt.Errorf("loopback: register buffer %d: %w: [%d, +%d) outside its %d-byte file", id, transport.ErrInvalid, r.FileOffset, len(r.Bytes), r.File.Size)
	case len(t.regions) >= maxRegions:
		return fmt.Errorf("loopback: register buffer %d: %w: more than %d regions", id, transport.ErrInvalid, maxRegions)
	}
	if _, dup := t.regions[id]; dup {
		return fmt.Errorf("loopback: register buffer %d: %w: already registered", id, transport.ErrInvalid)
	}
	t.regions[id] = region{b: r.Bytes, file: r.File, off: r.FileOffset}
	return nil
}

// Address implements transport.Transport: rank, pid, the control segment and every
// region's file, sealed with an HMAC of the job key.
func (t *Transport) Address() ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var w wire.Writer
	w.U32(blobMagic)
	w.U32(blobVersion)
	w.U32(uint32(t.cfg.Rank))
	w.U32(uint32(t.cfg.World))
	w.U64(uint64(os.Getpid()))
	w.String(t.ctrl.Path())
	w.String(t.listenName)
	w.U32(uint32(len(t.regions)))
	for id, r := range t.regions {
		w.U32(uint32(id))
		if r.placed > 0 { // a GPU region: no file; peers only check offsets against its size
			w.String("")
			w.U64(0)
			w.U64(r.placed)
			continue
		}
		w.String(r.file.Path)
		w.U64(r.off)
		w.U64(uint64(len(r.b)))
	}
	w.B = append(w.B, t.mac(w.B)...)
	return w.B, nil
}

func (t *Transport) mac(body []byte) []byte {
	m := hmac.New(sha256.New, t.cfg.Key)
	m.Write(body)
	return m.Sum(nil)
}

type remoteRegion struct {
	id        transport.BufferID
	path      string
	off, size uint64
}

func (t *Transport) parse(r int, blob []byte) (pid int, ctrl, live string, regs []remoteRegion, err error) {
	if len(blob) < sha256.Size || len(blob) > transport.MaxBlobSize {
		return 0, "", "", nil, fmt.Errorf("%w: blob of %d bytes", transport.ErrProtocol, len(blob))
	}
	body, sum := blob[:len(blob)-sha256.Size], blob[len(blob)-sha256.Size:]
	if !hmac.Equal(sum, t.mac(body)) {
		return 0, "", "", nil, fmt.Errorf("%w: blob not sealed with this job's key", transport.ErrAuth)
	}
	rd := wire.NewReader(body)
	if rd.U32() != blobMagic || rd.U32() != blobVersion {
		return 0, "", "", nil, fmt.Errorf("%w: not a loopback v%d blob", transport.ErrProtocol, blobVersion)
	}
	if rank, world := rd.U32(), rd.U32(); rd.Err() == nil && (int(rank) != r || int(world) != t.cfg.World) {
		return 0, "", "", nil, fmt.Errorf("%w: blob of rank %d of %d in rank %d's place", transport.ErrProtocol, rank, world, r)
	}
	pid = int(rd.U64())
	ctrl = rd.String(maxPath)
	live = rd.String(maxPath)
	n := rd.U32()
	if n > maxRegions {
		return 0, "", "", nil, fmt.Errorf("%w: %d regions", transport.ErrProtocol, n)
	}
	for range n {
		regs = append(regs, remoteRegion{id: transport.BufferID(rd.U32()), path: rd.String(maxPath), off: rd.U64(), size: rd.U64()})
	}
	if err := rd.Done(); err != nil {
		return 0, "", "", nil, fmt.Errorf("%w: %w", transport.ErrProtocol, err)
	}
	return pid, ctrl, live, regs, nil
}

// Connect implements transport.Transport: map every peer's control segment and regions.
func (t *Transport) Connect(ctx context.Context, blobs [][]byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.connected {
		return fmt.Errorf("loopback: rank %d: %w: Connect called twice", t.cfg.Rank, transport.ErrInvalid)
	}
	if len(blobs) != t.cfg.World {
		return fmt.Errorf("loopback: rank %d: %w: %d blobs for a world of %d", t.cfg.Rank, transport.ErrInvalid, len(blobs), t.cfg.World)
	}
	for r := range t.cfg.World {
		if !t.cfg.Peer(r) {
			continue
		}
		if err := ctx.Err(); err != nil {
			t.unmapPeers()
			return fmt.Errorf("loopback: connect rank %d: %w", r, err)
		}
		p, err := t.mapPeer(r, blobs[r])
		if err != nil {
			t.unmapPeers()
			return fmt.Errorf("loopback: connect rank %d: %w", r, err)
		}
		t.peers[r] = p
	}
	if err := t.startWatch(); err != nil {
		t.unmapPeers()
		return fmt.Errorf("loopback: rank %d: watch peers: %w", t.cfg.Rank, err)
	}
	t.connected = true
	return nil
}

func (t *Transport) mapPeer(r int, blob []byte) (*peer, error) {
	pid, ctrlPath, liveName, regs, err := t.parse(r, blob)
	if err != nil {
		return nil, err
	}
	p := &peer{rank: r, pid: pid, regions: map[transport.BufferID][]byte{}, placed: map[transport.BufferID]uint64{}, pidfd: -1, live: -1}
	fail := func(err error) (*peer, error) {
		p.unmap()
		return nil, err
	}
	ctrl, err := shm.Open(ctrlPath, ctrlSize)
	if err != nil {
		return fail(fmt.Errorf("%w: control segment: %w", transport.ErrPeerGone, err))
	}
	p.segs = append(p.segs, ctrl)
	p.ctrl = ctrl.Bytes()
	for _, rr := range regs {
		if _, dup := p.regions[rr.id]; dup || rr.size == 0 || rr.off+rr.size < rr.off || rr.off+rr.size > 1<<46 {
			return fail(fmt.Errorf("%w: bad region %d", transport.ErrProtocol, rr.id))
		}
		if _, dup := p.placed[rr.id]; dup {
			return fail(fmt.Errorf("%w: bad region %d", transport.ErrProtocol, rr.id))
		}
		if rr.path == "" {
			if !t.o.gdr {
				return fail(fmt.Errorf("%w: rank %d registered GPU buffer %d, this rank runs without %s=1", transport.ErrProtocol, r, rr.id, EnvGPUDirect))
			}
			p.placed[rr.id] = rr.size
			continue
		}
		seg, err := shm.Open(rr.path, int(rr.off+rr.size))
		if err != nil {
			return fail(fmt.Errorf("map buffer %d: %w", rr.id, err))
		}
		p.segs = append(p.segs, seg)
		p.regions[rr.id] = seg.Bytes()[rr.off : rr.off+rr.size]
	}
	if pid != os.Getpid() {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			return fail(fmt.Errorf("%w: pidfd of pid %d: %w", transport.ErrPeerGone, pid, err))
		}
		p.pidfd = fd
	}
	if p.live, err = dialLiveness(liveName); err != nil {
		// Another network namespace (abstract sockets are per namespace): the pidfd still
		// reports the peer's exit, only later.
		t.log.Warn("no liveness socket to a peer; its death is noticed at its exit only",
			zap.Int("peer", r), zap.Error(err))
		p.live = -1
	}
	return p, nil
}

func (p *peer) unmap() {
	for _, s := range p.segs {
		_ = s.Close()
	}
	p.segs, p.ctrl, p.regions, p.placed = nil, nil, nil, nil
	if p.pidfd >= 0 {
		_ = unix.Close(p.pidfd)
		p.pidfd = -1
	}
	if p.live >= 0 {
		_ = unix.Close(p.live)
		p.live = -1
	}
}

func (t *Transport) unmapPeers() {
	for i, p := range t.peers {
		if p != nil {
			p.unmap()
			t.peers[i] = nil
		}
	}
}

// startWatch starts the goroutine that notices peers dying: it polls their pidfds and a
// pipe Close uses to stop it.
func (t *Transport) startWatch() error {
	var fds []unix.PollFd
	var ranks []int
	for _, p := range t.peers {
		if p != nil && p.pidfd >= 0 {
			fds = append(fds, unix.PollFd{Fd: int32(p.pidfd), Events: unix.POLLIN})
			ranks = append(ranks, p.rank)
		}
		if p != nil && p.live >= 0 { // readable (EOF) or hung up: the peer's files are gone
			fds = append(fds, unix.PollFd{Fd: int32(p.live), Events: unix.POLLIN | unix.POLLRDHUP})
			ranks = append(ranks, p.rank)
		}
	}
	t.watchDone = make(chan struct{})
	if len(fds) == 0 {
		close(t.watchDone)
		return nil
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		return err
	}
	t.stopWatch = wr
	fds = append(fds, unix.PollFd{Fd: int32(rd.Fd()), Events: unix.POLLIN})
	go func() {
		defer close(t.watchDone)
		defer rd.Close()
		for {
			_, err := unix.Poll(fds, -1)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				t.fail(fmt.Errorf("loopback: rank %d: watch peers: %w", t.cfg.Rank, err))
				return
			}
			if fds[len(fds)-1].Revents != 0 {
				return
			}
			for i := range ranks {
				if fds[i].Revents == 0 {
					continue
				}
				p := t.peers[ranks[i]]
				if atomic.LoadUint64(t.word(p.ctrl, 0)) != stateClosed {
					t.fail(&transport.RankLostError{Rank: p.rank, Seen: fmt.Sprintf(
						"loopback, seen by rank %d: its process (pid %d) is gone without closing its transport", t.cfg.Rank, p.pid)})
					return
				}
				fds[i].Fd = -1 // exited after a clean Close: ignore from now on
			}
		}
	}()
	return nil
}

func (t *Transport) fail(err error) {
	if t.Fail(err) {
		if !errors.Is(err, transport.ErrClosed) {
			t.log.Error("transport failed", zap.Error(err))
		}
	}
}

func (t *Transport) nanotime() int64 { return int64(time.Since(t.epoch)) }

// check validates op against the local and the peer's regions.
func (t *Transport) check(op *transport.Op) (p *peer, src, dst []byte, flag *uint64, err error) {
	if err := transport.CheckOp(op, t.cfg.Rank, t.cfg.World); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("loopback: rank %d: %w", t.cfg.Rank, err)
	}
	p = t.peers[op.Peer]
	if p == nil {
		return nil, nil, nil, nil, fmt.Errorf("loopback: rank %d: %w: rank %d is not a connected peer", t.cfg.Rank, transport.ErrInvalid, op.Peer)
	}
	if l, ok := t.regions[op.Local]; op.Len > 0 && ok && l.placed > 0 {
		if err := t.checkPlaced(op, p, l.placed); err != nil {
			return nil, nil, nil, nil, err
		}
		// src and dst stay nil: the producer stored the bytes at the peer itself.
	} else if op.Len > 0 {
		l, ok := t.regions[op.Local]
		if !ok || !transport.InRange(op.LocalOff, op.Len, uint64(len(l.b))) {
			return nil, nil, nil, nil, fmt.Errorf("loopback: rank %d: %w: local buffer %d [%d, +%d)", t.cfg.Rank, transport.ErrInvalid, op.Local, op.LocalOff, op.Len)
		}
		r, ok := p.regions[op.Remote]
		if !ok || !transport.InRange(op.RemoteOff, op.Len, uint64(len(r))) {
			return nil, nil, nil, nil, fmt.Errorf("loopback: rank %d: %w: buffer %d [%d, +%d) of rank %d", t.cfg.Rank, transport.ErrInvalid, op.Remote, op.RemoteOff, op.Len, op.Peer)
		}
		src, dst = l.b[op.LocalOff:op.LocalOff+op.Len], r[op.RemoteOff:op.RemoteOff+op.Len]
	}
	if op.Kind == transport.OpWriteSignal {
		f, ok := p.regions[op.SignalBuf]
		if !ok || !transport.InRange(op.SignalOff, 8, uint64(len(f))) {
			return nil, nil, nil, nil, fmt.Errorf("loopback: rank %d: %w: signal word %d:%d of rank %d", t.cfg.Rank, transport.ErrInvalid, op.SignalBuf, op.SignalOff, op.Peer)
		}
		flag = (*uint64)(unsafe.Pointer(&f[op.SignalOff]))
	}
	return p, src, dst, flag, nil
}

func (t *Transport) peerClosed(p *peer) error {
	if atomic.LoadUint64(t.word(p.ctrl, 0)) == stateOpen {
		return nil
	}
	err := &transport.RankLostError{Rank: p.rank, Closed: true,
		Seen: fmt.Sprintf("loopback, seen by rank %d: it closed its transport", t.cfg.Rank)}
	t.fail(err)
	return err
}

// storeMax stores v into *flag unless it already holds more (release semantics: Go's
// atomics are sequentially consistent).
func storeMax(flag *uint64, v uint64) {
	for {
		old := atomic.LoadUint64(flag)
		if old >= v || atomic.CompareAndSwapUint64(flag, old, v) {
			return
		}
	}
}

func (t *Transport) apply(op *transport.Op, src, dst []byte, flag *uint64) {
	if t.deviceOp(op) {
		if err := t.copyNow(op); err != nil {
			t.fail(err)
			return
		}
	}
	copy(dst, src)
	if flag != nil {
		storeMax(flag, op.SignalValue)
	}
	t.comp[t.compHead%uint64(len(t.comp))] = transport.Completion{Cookie: op.Cookie}
	t.compHead++
}

// Post implements transport.Transport. Without shaping, reordering or a parallel copy an
// op is placed before Post returns.
func (t *Transport) Post(ops []transport.Op) (int, error) {
	if err := t.Err(); err != nil {
		return 0, err
	}
	if !t.connected {
		return 0, fmt.Errorf("loopback: rank %d: %w: Post before Connect", t.cfg.Rank, transport.ErrInvalid)
	}
	for i := range ops {
		op := &ops[i]
		if t.compHead-t.compTail+uint64(len(t.pend))+(t.qTail-t.qHead) >= uint64(len(t.comp)) {
			return i, nil
		}
		p, src, dst, flag, err := t.check(op)
		if err != nil {
			return i, err
		}
		if err := t.peerClosed(p); err != nil {
			return i, err
		}
		if t.pend != nil {
			if len(t.pend) == cap(t.pend) {
				return i, nil
			}
			d := t.shapeDelay(op.Len)
			if t.o.maxDelay > 0 {
				d += t.rng.Int64N(int64(t.o.maxDelay))
			}
			t.pend = append(t.pend, pending{op: *op, due: t.nanotime() + d})
			continue
		}
		dev := t.deviceOp(op)
		if t.q == nil || (!t.o.shape.Active() && t.qTail == t.qHead && !t.parallel(uint64(len(src))) && !dev) {
			t.apply(op, src, dst, flag) // the plain path: placed now
			continue
		}
		e := &t.q[t.qTail%uint64(len(t.q))]
		e.op, e.src, e.dst, e.flag, e.dev = *op, src, dst, flag, dev
		e.left.Store(1) // not copied yet
		e.due = t.nanotime() + t.shapeDelay(op.Len)
		t.qTail++
	}
	if t.qTail != t.qHead {
		t.progress()
	}
	return len(ops), nil
}

// shapeDelay books n bytes on the emulated link and returns how long from now until they
// are placed at the peer: queued behind what the link still sends, serialized at its rate,
// then its latency.
func (t *Transport) shapeDelay(n uint64) int64 {
	s := t.o.shape
	if !s.Active() {
		return 0
	}
	now := t.nanotime()
	start := max(now, t.linkFree)
	t.linkFree = start + s.SerializeNanos(n)
	return t.linkFree + int64(s.Latency) - now
}

// parallel reports whether an op of n bytes is copied in pieces by the workers.
func (t *Transport) parallel(n uint64) bool {
	return t.o.workers > 0 && n >= ParallelCopyMin && n > uint64(t.o.pieceBytes)
}

// maxCopyWindow bounds the queued ops whose copies may run at once (and the overlap scan).
const maxCopyWindow = 64

// progress advances the in-order queue. Copies start in order, several at once: a large op is
// cut into pieces for the workers (this thread runs one piece per call, so Poll stays short), a
// small one is copied here — unless its destination overlaps an op still being copied, which
// must land first (non-overlapping writes commute, so the bytes end up as if copied in order).
// Ops are then placed (signal, completion) strictly in order, each once copied and due: a
// signal still covers every earlier op.
func (t *Transport) progress() {
	if t.work != nil {
		select {
		case pc := <-t.work:
			pc.run()
		default:
		}
	}
	for t.qCopy < t.qTail && t.qCopy-t.qHead < maxCopyWindow {
		e := &t.q[t.qCopy%uint64(len(t.q))]
		if len(e.dst) > 0 && t.overlapsCopying(e.dst) {
			break
		}
		if t.parallel(uint64(len(e.src))) {
			if len(t.work) > maxPieces/2 {
				break // the workers have plenty queued
			}
			t.split(e)
		} else {
			copy(e.dst, e.src)
			e.left.Store(0)
		}
		t.qCopy++
	}
	now := t.nanotime()
	// Due ops start their device copies in order (GPU-direct: the bytes move only now), a
	// bounded number in flight; the copier finishes them in order.
	for t.qDev < t.qCopy && t.qDev-t.qHead < transport.MaxDeviceCopies && t.Err() == nil {
		e := &t.q[t.qDev%uint64(len(t.q))]
		if e.due > now {
			break
		}
		if e.dev {
			tok, err := t.startCopy(&e.op)
			if err != nil {
				t.fail(err)
				return
			}
			e.token = tok
		}
		t.qDev++
	}
	for t.qHead < t.qDev {
		e := &t.q[t.qHead%uint64(len(t.q))]
		if e.left.Load() > 0 {
			break
		}
		if e.dev {
			done, err := t.copyDone(&e.op, e.token)
			if err != nil {
				t.fail(err)
				return
			}
			if !done {
				break
			}
		}
		if e.flag != nil {
			storeMax(e.flag, e.op.SignalValue)
		}
		t.comp[t.compHead%uint64(len(t.comp))] = transport.Completion{Cookie: e.op.Cookie}
		t.compHead++
		e.src, e.dst, e.flag, e.dev = nil, nil, nil, false
		t.qHead++
	}
}

// overlapsCopying reports whether dst overlaps the destination of a started, unfinished copy.
func (t *Transport) overlapsCopying(dst []byte) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(dst)))
	hi := lo + uintptr(len(dst))
	for i := t.qHead; i < t.qCopy; i++ {
		f := &t.q[i%uint64(len(t.q))]
		if len(f.dst) == 0 || f.left.Load() == 0 {
			continue
		}
		flo := uintptr(unsafe.Pointer(unsafe.SliceData(f.dst)))
		if lo < flo+uintptr(len(f.dst)) && flo < hi {
			return true
		}
	}
	return false
}

// Poll implements transport.Transport.
func (t *Transport) Poll(done []transport.Completion) (int, error) {
	if err := t.Err(); err != nil {
		return 0, err
	}
	if len(t.pend) > 0 {
		t.applyDue()
	}
	if t.qTail != t.qHead {
		t.progress()
	}
	n := 0
	for n < len(done) && t.compTail < t.compHead {
		done[n] = t.comp[t.compTail%uint64(len(t.comp))]
		t.compTail++
		n++
	}
	return n, nil
}

// applyDue applies the due pending ops in random order.
func (t *Transport) applyDue() {
	now := t.nanotime()
	for {
		due := 0
		for i := range t.pend {
			if t.pend[i].due <= now {
				due++
			}
		}
		if due == 0 {
			return
		}
		k := t.rng.IntN(due)
		for i := range t.pend {
			if t.pend[i].due > now {
				continue
			}
			if k > 0 {
				k--
				continue
			}
			op := t.pend[i].op
			last := len(t.pend) - 1
			t.pend[i] = t.pend[last]
			t.pend = t.pend[:last]
			_, src, dst, flag, err := t.check(&op)
			if err != nil { // regions cannot vanish while connected; defensive
				t.fail(err)
				return
			}
			t.apply(&op, src, dst, flag)
			break
		}
	}
}

// Close implements transport.Transport.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		atomic.StoreUint64(t.word(t.ctrl.Bytes(), 0), stateClosed)
		if t.listen >= 0 { // after the state word: peers that see the reset see a clean close
			_ = unix.Close(t.listen)
			t.listen = -1
		}
		t.fail(fmt.Errorf("loopback: rank %d: %w", t.cfg.Rank, transport.ErrClosed))
		if t.stopWatch != nil {
			_ = t.stopWatch.Close()
		}
		if t.watchDone != nil {
			<-t.watchDone
		}
		if t.stopWork != nil {
			close(t.stopWork) // workers finish the piece they hold first
			t.workers.Wait()
		}
		t.mu.Lock()
		t.unmapPeers()
		t.mu.Unlock()
		_ = t.ctrl.Close()
	})
	return nil
}

// Shape returns the emulated link's shape (the zero value: none).
func (t *Transport) Shape() transport.LinkShape { return t.o.shape }
