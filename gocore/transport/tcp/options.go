package tcp

import "time"

// Defaults.
const (
	DefaultQueue = 1024             // ops in flight per peer
	maxBatch     = 64               // ops per writev
	hdrSize      = 48               // bytes of a frame header
	readBuffer   = 256 << 10        // bufio size of a reader
	handshakeMax = 10 * time.Second // bound of one connection's handshake
	byeTimeout   = time.Second      // Close waits this long for goodbyes to flush
)

// Option configures Open.
type Option func(*options)

type options struct {
	queue    int
	faults   bool
	seed     uint64
	maxDelay time.Duration
}

// WithQueue sets how many ops may be in flight to one peer before Post pushes back.
func WithQueue(n int) Option { return func(o *options) { o.queue = n } }

// WithFaults (tests only) makes the receiver hold every frame for a random time up to
// maxDelay and apply held frames in random order (seeded), each signal after its own data,
// acknowledging only the contiguous prefix applied. Caps.OrderedWrites becomes false.
func WithFaults(seed uint64, maxDelay time.Duration) Option {
	return func(o *options) { o.faults, o.seed, o.maxDelay = true, seed, maxDelay }
}
