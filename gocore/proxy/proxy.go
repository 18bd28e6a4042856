package proxy

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/mkernel/mkernel/gocore/fifo"
	"github.com/mkernel/mkernel/gocore/transport"
)

// Sentinel errors (the transport's ErrPeerGone and ErrTimeout pass through wrapped).
var (
	// ErrClosed: the proxy was closed by its owner.
	ErrClosed = errors.New("proxy: closed")
	// ErrBadCommand: a producer published a malformed command.
	ErrBadCommand = errors.New("proxy: malformed command")
	// ErrProducer: a producer gave up on a ticket (mk_fifo_fail).
	ErrProducer = errors.New("proxy: producer failed")
)

// entry is one consumed, unfinished command.
type entry struct {
	ticket      uint64
	bytes       uint64
	arrivalSeq  uint64
	enqNS       uint64
	pickNS      uint64
	arrivalSlot uint32
	pending     int32 // transport ops not complete
	peer        uint16
	kind        fifo.Kind
	live        bool
	finished    bool
	deferSig    bool // post the signal once the data ops completed (reordering transports)
}

// Proxy is one proxy loop; see the package documentation.
type Proxy struct {
	cfg     Config
	o       options
	log     *zap.Logger
	ring    *fifo.Ring
	t       transport.Transport
	caps    transport.Caps
	peers   []int
	ordered bool
	maxOp   uint64

	// loop state: touched only by the loop goroutine
	tail, done    uint64
	table         []entry
	mask          uint64
	peerCmds      []int32
	peerBytes     []uint64
	inflight      int // sum of peerCmds
	pend          []transport.Op
	comps         []transport.Completion
	hist          [NumBuckets]uint64
	latFromEnq    bool
	blockedTicket uint64 // ticket+1 of the command waiting for credit; 0: none
	blockedSince  uint64
	blockedWhy    waitReason
	steps         uint64
	now           uint64 // pick-up time of the batch being consumed

	pub published

	stop      atomic.Bool
	failed    atomic.Pointer[error]
	done_     chan struct{}
	closeOnce sync.Once
	stopCtx   func() bool
}

// Start validates the configuration, preallocates the loop's state and starts the loop on
// its own pinned OS thread. The proxy stops when ctx is cancelled, on Close, or when it
// fails. It does not own ring's memory or the transport: close them after the proxy.
func Start(ctx context.Context, ring *fifo.Ring, t transport.Transport, cfg Config, opts ...Option) (*Proxy, error) {
	p, err := newProxy(ring, t, cfg, opts...)
	if err != nil {
		return nil, err
	}
	started := make(chan struct{})
	go p.run(started)
	<-started
	p.stopCtx = context.AfterFunc(ctx, func() { p.stop.Store(true) })
	return p, nil
}

func newProxy(ring *fifo.Ring, t transport.Transport, cfg Config, opts ...Option) (*Proxy, error) {
	o := options{
		peerCmds:  DefaultPeerCmds,
		peerBytes: DefaultPeerBytes,
		table:     DefaultTable,
		batch:     DefaultBatch,
		opTimeout: DefaultOpTimeout,
		idleSpin:  DefaultIdleSpin,
		idleSleep: DefaultIdleSleep,
	}
	for _, f := range opts {
		f(&o)
	}
	caps := t.Caps()
	if caps.MaxInflight > 0 && o.peerCmds > caps.MaxInflight {
		o.peerCmds = caps.MaxInflight
	}
	switch {
	case ring == nil || t == nil:
		return nil, fmt.Errorf("proxy: %w: nil FIFO or transport", transport.ErrInvalid)
	case cfg.World < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.World || cfg.World > fifo.PeerAll:
		return nil, fmt.Errorf("proxy: %w: rank %d of %d", transport.ErrInvalid, cfg.Rank, cfg.World)
	case o.table < 1 || o.table&(o.table-1) != 0:
		return nil, fmt.Errorf("proxy: %w: table of %d entries is not a power of two", transport.ErrInvalid, o.table)
	case o.peerCmds < 1 || o.peerBytes < 1 || o.batch < 1 || o.opTimeout <= 0:
		return nil, fmt.Errorf("proxy: %w: credits %d/%d, batch %d, op timeout %v", transport.ErrInvalid, o.peerCmds, o.peerBytes, o.batch, o.opTimeout)
	}
	log := o.log
	if log == nil {
		log = zap.NewNop()
	}
	peers := cfg.Peers
	if peers == nil {
		for r := range cfg.World {
			if r != cfg.Rank {
				peers = append(peers, r)
			}
		}
	}
	for _, r := range peers {
		if r < 0 || r >= cfg.World || r == cfg.Rank {
			return nil, fmt.Errorf("proxy: %w: peer rank %d", transport.ErrInvalid, r)
		}
	}
	p := &Proxy{
		cfg:        cfg,
		o:          o,
		log:        log.With(zap.Int("rank", cfg.Rank)),
		ring:       ring,
		t:          t,
		caps:       caps,
		peers:      append([]int(nil), peers...),
		ordered:    caps.OrderedWrites,
		maxOp:      caps.MaxOpBytes,
		tail:       ring.Tail(),
		table:      make([]entry, o.table),
		mask:       uint64(o.table - 1),
		peerCmds:   make([]int32, cfg.World),
		peerBytes:  make([]uint64, cfg.World),
		pend:       make([]transport.Op, 0, o.table+maxSplit+cfg.World+o.batch),
		comps:      make([]transport.Completion, o.batch*2),
		latFromEnq: ring.Clock() == fifo.ClockMonotonic,
		done_:      make(chan struct{}),
	}
	p.done = p.tail
	p.pub.peerCmds = make([]atomic.Int64, cfg.World)
	p.pub.peerBytes = make([]atomic.Uint64, cfg.World)
	p.pub.consumed.Store(p.tail)
	p.pub.finished.Store(p.done)
	return p, nil
}

// Done is closed when the loop has stopped.
func (p *Proxy) Done() <-chan struct{} { return p.done_ }

// Err returns nil while the proxy runs, then why it stopped (ErrClosed after Close).
func (p *Proxy) Err() error {
	if e := p.failed.Load(); e != nil {
		return *e
	}
	return nil
}

// Close stops the loop (bounded: the loop checks every step) and returns the failure
// that stopped it before, if any. The FIFO's error word is set to closed, so producers
// stop.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		if p.stopCtx != nil {
			p.stopCtx()
		}
		p.stop.Store(true)
		<-p.done_
	})
	if err := p.Err(); err != nil && !errors.Is(err, ErrClosed) {
		return err
	}
	return nil
}

// fail records the first failure and stops the loop; the FIFO learns it too.
func (p *Proxy) fail(code uint32, peer int, ticket uint64, err error) {
	if !p.failed.CompareAndSwap(nil, &err) {
		return
	}
	p.ring.Fail(code, uint32(peer), ticket)
	p.stop.Store(true)
	if code != fifo.ErrClosed {
		p.log.Error("proxy failed", zap.Error(err))
	}
}

func (p *Proxy) run(started chan<- struct{}) {
	// Never unlocked: when the loop ends, the goroutine exits locked and Go retires the
	// thread, so its affinity never leaks to other goroutines.
	runtime.LockOSThread()
	p.pin()
	close(started)
	defer close(p.done_)
	var idleSince uint64
	for !p.stop.Load() {
		p.steps++
		// With WithSpinInflight, commands in flight keep the loop spinning: their completions
		// (and, on transports that progress only inside Poll, their very placement) wait for
		// the next step.
		if p.step() || (p.o.spinInflight && p.inflight > 0) {
			idleSince = 0
		} else if p.o.idleSpin >= 0 && p.steps&63 == 0 {
			now := fifo.MonotonicNanos()
			if idleSince == 0 {
				idleSince = now
			} else if now-idleSince > uint64(p.o.idleSpin) {
				p.tick(now)
				time.Sleep(p.o.idleSleep)
				continue
			}
		}
		if p.steps%tickSteps == 0 {
			p.tick(fifo.MonotonicNanos())
		}
	}
	p.tick(fifo.MonotonicNanos())
	p.fail(fifo.ErrClosed, -1, p.tail, fmt.Errorf("proxy: rank %d: %w", p.cfg.Rank, ErrClosed))
}

// pin sets the loop thread's affinity to the configured CPUs (best effort: a CPU outside
// the process's allowed set is logged, not fatal).
func (p *Proxy) pin() {
	if len(p.o.cpus) == 0 {
		return
	}
	var set unix.CPUSet
	for _, c := range p.o.cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		p.log.Warn("cannot pin the proxy thread", zap.Ints("cpus", p.o.cpus), zap.Error(err))
		return
	}
	var got unix.CPUSet
	if err := unix.SchedGetaffinity(0, &got); err == nil {
		var cpus []int
		for c := range 1024 {
			if got.IsSet(c) {
				cpus = append(cpus, c)
			}
		}
		p.pub.cpus.Store(&cpus)
	}
}
