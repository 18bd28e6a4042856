package proxy

import (
	"time"

	"go.uber.org/zap"

	"github.com/mkernel/mkernel/gocore/topology"
	"github.com/mkernel/mkernel/gocore/transport"
)

// Defaults.
const (
	DefaultPeerCmds  = 512              // commands in flight per peer
	DefaultPeerBytes = 64 << 20         // bytes in flight per peer
	DefaultTable     = 4096             // unfinished commands (consumed, not done)
	DefaultBatch     = 64               // ops per Post
	DefaultOpTimeout = 60 * time.Second // watchdog
	DefaultIdleSpin  = 50 * time.Microsecond
	DefaultIdleSleep = 20 * time.Microsecond
	tickSteps        = 256 // steps between diagnostics/watchdog ticks (at most)
	tickInterval     = 200 * time.Microsecond
	maxSplit         = 1024 // ops one command may be split into
)

// Config is what a proxy needs; the zero values of the optional fields take defaults.
type Config struct {
	// Rank and World: this rank and the job's size (the transport's).
	Rank, World int
	// Peers lists the ranks BARRIER signals (default: every other rank).
	Peers []int
	// FlagBuf is the buffer id of the arrival flag array on every rank.
	FlagBuf transport.BufferID
}

// Option configures Start.
type Option func(*options)

type options struct {
	cpus       []int
	peerCmds   int
	peerBytes  uint64
	table      int
	batch      int
	opTimeout  time.Duration
	idleSpin   time.Duration
	idleSleep  time.Duration
	log        *zap.Logger
	noPin      bool
	onFailHook func(error)

	spinInflight bool
}

// WithSpinInflight keeps the loop from sleeping while any command is in flight (the idle
// spin then counts from the last completion): for data paths whose producers wait on the
// commands' signals (GPU kernels), at the price of a busy core while they do.
func WithSpinInflight() Option { return func(o *options) { o.spinInflight = true } }

// WithCPUs pins the proxy thread to these CPUs (default: none, the thread floats).
func WithCPUs(cpus []int) Option { return func(o *options) { o.cpus = append([]int(nil), cpus...) } }

// WithPlacement pins the proxy thread to the placement's proxy CPUs.
func WithPlacement(p *topology.Placement) Option {
	return func(o *options) {
		if p != nil {
			o.cpus = append([]int(nil), p.ProxyCPUs...)
		}
	}
}

// WithCredits sets the per-peer limits on commands and bytes in flight. A command larger
// than the byte limit still goes, alone.
func WithCredits(cmds int, bytes uint64) Option {
	return func(o *options) { o.peerCmds, o.peerBytes = cmds, bytes }
}

// WithTable sets how many consumed commands may be unfinished at once (a power of two).
func WithTable(n int) Option { return func(o *options) { o.table = n } }

// WithBatch sets the most ops handed to one Post.
func WithBatch(n int) Option { return func(o *options) { o.batch = n } }

// WithOpTimeout sets the watchdog: a command unfinished (or stuck for credit) this long
// fails the proxy, naming its peer and FIFO slot.
func WithOpTimeout(d time.Duration) Option { return func(o *options) { o.opTimeout = d } }

// WithIdle sets how long the loop spins without work before it sleeps idleSleep per
// empty step (giving the CPU away). spin < 0 never sleeps: lowest latency, one core
// burnt — for a proxy on its own CPU.
func WithIdle(spin, sleep time.Duration) Option {
	return func(o *options) { o.idleSpin, o.idleSleep = spin, sleep }
}

// WithLogger sets the logger (default: none).
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.log = l } }
