package datapath

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mkernel/mkernel/gocore/bootstrap"
	"github.com/mkernel/mkernel/gocore/fifo"
	"github.com/mkernel/mkernel/gocore/proxy"
	"github.com/mkernel/mkernel/gocore/topology"
	"github.com/mkernel/mkernel/gocore/transport"
	_ "github.com/mkernel/mkernel/gocore/transport/backends" // every backend of the build
	"github.com/mkernel/mkernel/gocore/transport/shm"
)

// FlagBuffer is the buffer id of the arrival flag array on every rank.
const FlagBuffer transport.BufferID = 0

// Defaults.
const (
	DefaultFlagSlots = 4096
	DefaultFIFOSlots = 1024
	// KeyLabel is the label of the transport key derived from the job secret.
	KeyLabel = "mkernel/transport"
)

// Session is what Open needs of a bootstrap session; *bootstrap.Session implements it.
type Session interface {
	transport.Exchanger
	DeriveKey(label string) []byte
	RootAddr() string
}

// Buffer is one symmetric buffer: the same ID on every rank.
type Buffer struct {
	ID    transport.BufferID
	Bytes int
}

// DeviceBuffer offers GPU memory for symmetric buffer ID. Where the chosen transport
// registers GPU memory with the NIC (Caps.DeviceMemory: ibverbs, efa — DMA-BUF, else
// nvidia-peermem), the buffer IS that memory and the NIC reads and writes it directly;
// elsewhere (tcp, loopback, plugins) the data path allocates host shared memory of the
// same size for ID instead, which the caller maps into the GPU (cudaHostRegister) as a
// staging area. BufferInfo tells the caller which one it got.
type DeviceBuffer struct {
	ID     transport.BufferID
	Region transport.DeviceRegion
}

// BufferKind says where a buffer's memory is.
type BufferKind int

// Buffer kinds.
const (
	BufferHost   BufferKind = 1 // host shared memory (Buffer returns it)
	BufferDevice BufferKind = 2 // GPU memory registered with the transport (Buffer returns nil)
)

// Config describes a rank's data path. Zero fields take the defaults noted.
type Config struct {
	// Buffers are the symmetric buffers (IDs other than FlagBuffer, unique).
	Buffers []Buffer
	// Device are buffers offered as GPU memory (IDs unique among Buffers and Device).
	Device []DeviceBuffer
	// Clock is the domain of the producers' enqueue timestamps (default ClockMonotonic:
	// host producers; GPU producers write ClockGlobaltimer).
	Clock fifo.Clock
	// FlagSlots is the number of 8-byte arrival flags (default DefaultFlagSlots).
	FlagSlots int
	// FIFOSlots is the FIFO's capacity, a power of two (default DefaultFIFOSlots).
	FIFOSlots int
	// FIFOFormat is the FIFO's slot format; the zero value (fifo.FormatSeq) reads
	// EnvFIFOLL, whose default is fifo.FormatLL (fence-free GPU publication; "0": FormatSeq).
	FIFOFormat fifo.Format
	// Node[r] is rank r's (possibly emulated) node; nil: every rank on its own node.
	// Only ranks of different nodes are connected unless AllPeers.
	Node     []int
	AllPeers bool
	// Placement picks NICs and proxy CPUs (nil: none).
	Placement *topology.Placement
	// Net forces a backend or plugin; the zero value reads MKERNEL_NET / MKERNEL_NET_PLUGIN.
	Net transport.Selection
	// Timeout bounds setup and stuck ops (transport and proxy watchdog); default
	// transport.DefaultTimeout.
	Timeout time.Duration
	// BindHost is the transport's bind address (default: the route to the bootstrap root).
	BindHost string
	Log      *zap.Logger
	// ProxyOptions are passed to proxy.Start after the defaults derived from this config.
	ProxyOptions []proxy.Option
	// DeviceCopy is the transport's device copier (transport.Config.DeviceCopy): the
	// loopback GPU-direct emulation moves the Device buffers' bytes with it.
	DeviceCopy transport.DeviceCopier
}

// EnvProxySpin is how long the proxy keeps spinning after its last command finished
// before it starts sleeping between polls (a Go duration; "-1ns": never sleep). Default
// GPUIdleSpin for a data path fed by GPU kernels (FIFO clock ClockGlobaltimer), whose
// commands come in bursts a collective or fused op apart, else proxy.DefaultIdleSpin.
// A GPU-fed path's proxy also never sleeps while a command is in flight.
const EnvProxySpin = "MKERNEL_PROXY_SPIN"

// GPUIdleSpin is EnvProxySpin's default for GPU producers: long enough to span the gaps
// between the calls of a training or inference step, so that a kernel's first command does
// not wait for the proxy to wake up (tens of microseconds).
const GPUIdleSpin = 20 * time.Millisecond

// EnvFIFOLL selects the FIFO's slot format: "" or "1" (the default) fifo.FormatLL, "0"
// fifo.FormatSeq (the seq-word format: one release store per command after a fence). LL is
// the default because a GPU producer publishes a pure signal with no system fence: on the
// H200 it took the GPU enqueue -> remote flag latency from 3.84 to 2.34 us p50 and the
// GPU-driven bulk rate from 25.5 to 36.9 GB/s (device run s8run1, bench_netpath). Every
// producer reads the format from the FIFO's header: host producers (fifo.h mk_fifo_push,
// fifo.Ring.Push) and GPU kernels (csrc/comm/net_path.cpp passes it to
// kernels/comm/net_ops.cuh) follow it.
const EnvFIFOLL = "MKERNEL_FIFO_LL"

func fifoFormat(f fifo.Format) (fifo.Format, error) {
	if f != fifo.FormatSeq {
		return f, nil
	}
	switch v := strings.TrimSpace(os.Getenv(EnvFIFOLL)); v {
	case "0":
		return fifo.FormatSeq, nil
	case "", "1":
		return fifo.FormatLL, nil
	default:
		return 0, fmt.Errorf("datapath: %w: %s=%q (want 0 or 1)", transport.ErrInvalid, EnvFIFOLL, v)
	}
}

func idleSpin(clock fifo.Clock) (time.Duration, error) {
	if v := strings.TrimSpace(os.Getenv(EnvProxySpin)); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("%w: %s=%q: want a Go duration (e.g. 20ms, -1ns to never sleep)", transport.ErrInvalid, EnvProxySpin, v)
		}
		return d, nil
	}
	if clock == fifo.ClockGlobaltimer {
		return GPUIdleSpin, nil
	}
	return proxy.DefaultIdleSpin, nil
}

// Datapath is one rank's open data path.
type Datapath struct {
	rank, world int
	tr          transport.Transport
	ring        *fifo.Ring
	px          *proxy.Proxy
	fifoSeg     *shm.Segment
	flags       *shm.Segment
	bufs        map[transport.BufferID]*shm.Segment
	devBufs     map[transport.BufferID]transport.DeviceRegion
	// job is the bootstrap session when it can say why the job broke (the real
	// *bootstrap.Session can): a rank that dies is seen first by its neighbours,
	// and their closing is what the others' transports see; the session's root
	// names the rank that actually went away.
	job     jobHealth
	errOnce sync.Once
	err     error
}

// jobHealth is the part of *bootstrap.Session that reports the job's failure.
type jobHealth interface {
	Done() <-chan struct{}
	Err() error
}

// causeGrace bounds how long Err waits for the session's verdict on a failure.
const causeGrace = 500 * time.Millisecond

// Open builds and connects the data path (a collective over sess).
func Open(ctx context.Context, sess Session, cfg Config) (_ *Datapath, err error) {
	if cfg.FlagSlots == 0 {
		cfg.FlagSlots = DefaultFlagSlots
	}
	if cfg.FIFOSlots == 0 {
		cfg.FIFOSlots = DefaultFIFOSlots
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = transport.DefaultTimeout
	}
	if cfg.Net == (transport.Selection{}) { // as documented: the zero value reads the environment
		cfg.Net = transport.SelectionFromEnv()
	}
	if cfg.FlagSlots < 1 {
		return nil, fmt.Errorf("datapath: %w: %d flag slots", transport.ErrInvalid, cfg.FlagSlots)
	}
	rank, world := sess.Rank(), sess.World()
	dp := &Datapath{rank: rank, world: world, bufs: map[transport.BufferID]*shm.Segment{},
		devBufs: map[transport.BufferID]transport.DeviceRegion{}}
	if cfg.Clock == fifo.ClockNone {
		cfg.Clock = fifo.ClockMonotonic
	}
	if j, ok := sess.(jobHealth); ok {
		dp.job = j
	}
	defer func() {
		if err != nil {
			dp.Close()
		}
	}()
	for _, b := range cfg.Buffers {
		if b.ID == FlagBuffer || b.Bytes <= 0 || dp.bufs[b.ID] != nil {
			return nil, fmt.Errorf("datapath: rank %d: %w: buffer %d of %d bytes (ids must be unique and not %d)", rank, transport.ErrInvalid, b.ID, b.Bytes, FlagBuffer)
		}
		seg, err := shm.Create(fmt.Sprintf("buf%d", b.ID), b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("datapath: rank %d: buffer %d: %w", rank, b.ID, err)
		}
		dp.bufs[b.ID] = seg
	}
	offered := map[transport.BufferID]bool{}
	for _, d := range cfg.Device {
		if d.ID == FlagBuffer || dp.bufs[d.ID] != nil || offered[d.ID] || d.Region.Len == 0 || d.Region.Len > 1<<40 || d.Region.Ptr == 0 {
			return nil, fmt.Errorf("datapath: rank %d: %w: device buffer %d of %d bytes at %#x (ids must be unique and not %d)",
				rank, transport.ErrInvalid, d.ID, d.Region.Len, d.Region.Ptr, FlagBuffer)
		}
		offered[d.ID] = true
	}
	if dp.flags, err = shm.Create("flags", cfg.FlagSlots*fifo.FlagBytes); err != nil {
		return nil, fmt.Errorf("datapath: rank %d: flags: %w", rank, err)
	}
	if cfg.FIFOFormat, err = fifoFormat(cfg.FIFOFormat); err != nil {
		return nil, err
	}
	if dp.fifoSeg, err = shm.Create("fifo", fifo.BytesFormat(cfg.FIFOSlots, cfg.FIFOFormat)); err != nil {
		return nil, fmt.Errorf("datapath: rank %d: FIFO: %w", rank, err)
	}
	if dp.ring, err = fifo.InitFormat(dp.fifoSeg.Bytes(), cfg.FIFOSlots, cfg.Clock, cfg.FIFOFormat); err != nil {
		return nil, fmt.Errorf("datapath: rank %d: %w", rank, err)
	}
	tcfg := transport.Config{
		Rank: rank, World: world, Node: cfg.Node, AllPeers: cfg.AllPeers,
		Key: sess.DeriveKey(KeyLabel), Placement: cfg.Placement,
		BindHost: cfg.BindHost, RouteTo: sess.RootAddr(), Timeout: cfg.Timeout, Log: cfg.Log,
		DeviceCopy: cfg.DeviceCopy,
	}
	if dp.tr, err = transport.OpenSelected(ctx, sess, tcfg, cfg.Net); err != nil {
		return nil, fmt.Errorf("datapath: rank %d: %w", rank, err)
	}
	if err = dp.tr.Register(FlagBuffer, dp.flags.Region()); err != nil {
		return nil, fmt.Errorf("datapath: rank %d: register flags: %w", rank, err)
	}
	// Every rank opened the same backend (transport.Open agrees on one), so every rank
	// takes the same device-or-staging decision.
	for _, d := range cfg.Device {
		if dp.tr.Caps().DeviceMemory {
			r := d.Region
			if err = dp.tr.Register(d.ID, transport.Region{Device: &r}); err != nil {
				return nil, fmt.Errorf("datapath: rank %d: register GPU buffer %d: %w", rank, d.ID, err)
			}
			dp.devBufs[d.ID] = r
			continue
		}
		seg, err := shm.Create(fmt.Sprintf("buf%d", d.ID), int(d.Region.Len))
		if err != nil {
			return nil, fmt.Errorf("datapath: rank %d: staging for GPU buffer %d: %w", rank, d.ID, err)
		}
		dp.bufs[d.ID] = seg
	}
	for id, seg := range dp.bufs {
		if err = dp.tr.Register(id, seg.Region()); err != nil {
			return nil, fmt.Errorf("datapath: rank %d: register buffer %d: %w", rank, id, err)
		}
	}
	if err = transport.Connect(ctx, dp.tr, sess); err != nil {
		return nil, fmt.Errorf("datapath: rank %d: %w", rank, err)
	}
	var peers []int
	for r := range world {
		if (&tcfg).Peer(r) {
			peers = append(peers, r)
		}
	}
	spin, err := idleSpin(cfg.Clock)
	if err != nil {
		return nil, fmt.Errorf("datapath: rank %d: %w", rank, err)
	}
	popts := []proxy.Option{proxy.WithPlacement(cfg.Placement), proxy.WithOpTimeout(cfg.Timeout),
		proxy.WithIdle(spin, proxy.DefaultIdleSleep)}
	if cfg.Clock == fifo.ClockGlobaltimer { // GPU kernels wait on these commands' signals
		popts = append(popts, proxy.WithSpinInflight())
	}
	if cfg.Log != nil {
		popts = append(popts, proxy.WithLogger(cfg.Log.Named("proxy")))
	}
	popts = append(popts, cfg.ProxyOptions...)
	if peers == nil {
		peers = []int{}
	}
	dp.px, err = proxy.Start(context.Background(), dp.ring, dp.tr, proxy.Config{Rank: rank, World: world, Peers: peers, FlagBuf: FlagBuffer}, popts...)
	if err != nil {
		return nil, fmt.Errorf("datapath: rank %d: %w", rank, err)
	}
	return dp, nil
}

// Rank and World of this data path.
func (dp *Datapath) Rank() int  { return dp.rank }
func (dp *Datapath) World() int { return dp.world }

// Buffer returns symmetric buffer id's memory (nil if unknown).
func (dp *Datapath) Buffer(id transport.BufferID) []byte {
	if id == FlagBuffer {
		return dp.flags.Bytes()
	}
	if s := dp.bufs[id]; s != nil {
		return s.Bytes()
	}
	return nil
}

// BufferInfo says where buffer id lives: BufferHost with its mapping, or BufferDevice
// with the GPU region the transport registered; ok is false for an unknown id.
func (dp *Datapath) BufferInfo(id transport.BufferID) (kind BufferKind, host []byte, dev transport.DeviceRegion, ok bool) {
	if r, isDev := dp.devBufs[id]; isDev {
		return BufferDevice, nil, r, true
	}
	if b := dp.Buffer(id); b != nil {
		return BufferHost, b, transport.DeviceRegion{}, true
	}
	return 0, nil, transport.DeviceRegion{}, false
}

// Flags returns the arrival flag array.
func (dp *Datapath) Flags() []byte { return dp.flags.Bytes() }

// Flag returns arrival flag slot.
func (dp *Datapath) Flag(slot int) *uint64 { return fifo.Flag(dp.flags.Bytes(), slot) }

// Ring returns the command FIFO.
func (dp *Datapath) Ring() *fifo.Ring { return dp.ring }

// FIFOMemory returns the FIFO's memory (for C producers: an mk_fifo_ctrl*).
func (dp *Datapath) FIFOMemory() []byte { return dp.fifoSeg.Bytes() }

// Transport returns the connected transport.
func (dp *Datapath) Transport() transport.Transport { return dp.tr }

// Proxy returns the proxy.
func (dp *Datapath) Proxy() *proxy.Proxy { return dp.px }

// Stats returns the proxy's diagnostics.
func (dp *Datapath) Stats() proxy.Stats { return dp.px.Stats() }

// Done is closed when the proxy stops (it stops when the transport fails).
func (dp *Datapath) Done() <-chan struct{} { return dp.px.Done() }

// Err is why the data path stopped, nil while it works. A failure caused by a
// lost rank leads with that rank ("rank 4 is gone (...)"), then says what this
// rank was doing. It is annotated, once, with the bootstrap session's account of
// which rank left the job (waiting at most causeGrace for it): the transport
// itself may only have seen a neighbour closing in a cascade, and then the
// session's account leads.
func (dp *Datapath) Err() error {
	err := dp.px.Err()
	if err == nil || !errors.Is(err, transport.ErrPeerGone) {
		return err
	}
	dp.errOnce.Do(func() {
		var session error
		if dp.job != nil {
			select {
			case <-dp.job.Done():
				if cause := dp.job.Err(); cause != nil && !errors.Is(cause, bootstrap.ErrClosed) {
					session = cause
				}
			case <-time.After(causeGrace):
			}
		}
		dp.err = causeFirst(err, session)
	})
	return dp.err
}

// causeFirst rewrites a lost-rank failure so that its cause leads: the lost rank
// (when the transport knows it was lost, not merely closed), else the session's
// account; then the rest of the chain, with the session's account at the end.
// errors.Is/As still see err.
func causeFirst(err, session error) error {
	rl, ok := transport.LostRank(err)
	var lead, rest string
	switch {
	case ok && !rl.Closed:
		lead, rest = rl.Error(), strings.TrimSuffix(err.Error(), ": "+rl.Error())
	case session != nil:
		lead, rest, session = "the job's session reports: "+session.Error(), err.Error(), nil
	default:
		return err
	}
	if r, ok := strings.CutPrefix(rest, "proxy: rank "); ok && !strings.Contains(r, ":") {
		rest = "" // only the proxy's "proxy: rank N" prefix: nothing to add
	}
	msg := lead
	if rest != "" && rest != lead {
		msg += "; " + rest
	}
	if session != nil {
		msg += " (the job's session reports: " + session.Error() + ")"
	}
	return &leadingCause{msg: msg, err: err}
}

// leadingCause is err with a message that puts the cause first.
type leadingCause struct {
	msg string
	err error
}

func (e *leadingCause) Error() string { return e.msg }
func (e *leadingCause) Unwrap() error { return e.err }

// Close stops the proxy, closes the transport and unmaps the memory; it returns an earlier
// failure of the proxy, if any. Producers must have stopped using the FIFO and the
// buffers (the memory goes away); a producer still waiting for credit sees fifo.ErrFailed
// once the proxy stops.
func (dp *Datapath) Close() error {
	var errs []error
	if dp.px != nil {
		errs = append(errs, dp.px.Close())
	}
	if dp.tr != nil {
		errs = append(errs, dp.tr.Close())
	}
	for _, s := range dp.bufs {
		s.Close()
	}
	if dp.flags != nil {
		dp.flags.Close()
	}
	if dp.fifoSeg != nil {
		dp.fifoSeg.Close()
	}
	return errors.Join(errs...)
}
