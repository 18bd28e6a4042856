package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mkernel/mkernel/gocore/topology"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/internal/wire"
)

// Name is the backend's registry name.
const Name = "tcp"

const (
	blobMagic   = 0x42544b4d // "MKTB"
	blobVersion = 1
	maxRegions  = 4096
)

func init() { transport.Register(Backend{}) }

// Backend registers tcp with the transport registry: usable everywhere, chosen when no
// RDMA backend opens on every rank.
type Backend struct{}

func (Backend) Name() string                    { return Name }
func (Backend) Priority() int                   { return 10 }
func (Backend) Usable(*topology.Placement) bool { return true }
func (Backend) Open(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
	f, ok, err := transport.FaultsFromEnv()
	if err != nil {
		return nil, fmt.Errorf("tcp: open rank %d: %w", cfg.Rank, err)
	}
	if ok { // tests only (MKERNEL_NET_FAULTS)
		return Open(ctx, cfg, WithFaults(f.Seed+uint64(cfg.Rank), f.MaxDelay))
	}
	return Open(ctx, cfg)
}

// Transport is one rank's tcp endpoint.
type Transport struct {
	cfg transport.Config
	o   options
	log *zap.Logger
	ip  net.IP
	ln  *net.TCPListener

	mu        sync.Mutex // control calls
	regions   map[transport.BufferID][]byte
	connected bool

	peers    []*peer // by rank; nil for self and non-peers
	peerList []*peer
	touched  []*peer // Post's scratch: peers to wake

	rejected atomic.Int64 // connections refused by the handshake

	transport.Failure              // the first error (Err) and Done
	lost              atomic.Int32 // 1 + the first peer rank lost (0: none), told to peers in goodbyes
	stopping          chan struct{}
	closeOnce         sync.Once
	wg                sync.WaitGroup
}

var _ transport.Transport = (*Transport)(nil)

// Open creates rank cfg.Rank's endpoint and starts listening on the chosen address.
func Open(_ context.Context, cfg transport.Config, opts ...Option) (*Transport, error) {
	o := options{queue: DefaultQueue}
	for _, f := range opts {
		f(&o)
	}
	switch {
	case cfg.World < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.World:
		return nil, fmt.Errorf("tcp: open: %w: rank %d of %d", transport.ErrInvalid, cfg.Rank, cfg.World)
	case len(cfg.Key) < 16 || len(cfg.Key) > 64:
		return nil, fmt.Errorf("tcp: open rank %d: %w: job key of %d bytes, need 16..64", cfg.Rank, transport.ErrInvalid, len(cfg.Key))
	case o.queue < 1:
		return nil, fmt.Errorf("tcp: open rank %d: %w: queue %d", cfg.Rank, transport.ErrInvalid, o.queue)
	case cfg.Node != nil && len(cfg.Node) != cfg.World:
		return nil, fmt.Errorf("tcp: open rank %d: %w: %d node entries for %d ranks", cfg.Rank, transport.ErrInvalid, len(cfg.Node), cfg.World)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = transport.DefaultTimeout
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	ip, err := bindIP(cfg.BindHost, cfg.RouteTo)
	if err != nil {
		return nil, fmt.Errorf("tcp: open rank %d: %w", cfg.Rank, err)
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip})
	if err != nil {
		return nil, fmt.Errorf("tcp: open rank %d: listen on %s: %w", cfg.Rank, ip, err)
	}
	t := &Transport{
		cfg:      cfg,
		o:        o,
		log:      log.With(zap.String("transport", Name), zap.Int("rank", cfg.Rank)),
		ip:       ip,
		ln:       ln,
		regions:  map[transport.BufferID][]byte{},
		peers:    make([]*peer, cfg.World),
		stopping: make(chan struct{}),
	}
	return t, nil
}

// ListenAddr returns the address the transport listens on until it is connected.
func (t *Transport) ListenAddr() net.Addr { return t.ln.Addr() }

// Rejected returns how many incoming connections the handshake refused.
func (t *Transport) Rejected() int64 { return t.rejected.Load() }

// Name implements transport.Transport.
func (t *Transport) Name() string { return Name }

// Caps implements transport.Transport.
func (t *Transport) Caps() transport.Caps {
	return transport.Caps{OrderedWrites: !t.o.faults, MaxInflight: t.o.queue}
}

// Register implements transport.Transport.
func (t *Transport) Register(id transport.BufferID, r transport.Region) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.connected:
		return fmt.Errorf("tcp: register buffer %d: %w: after Connect", id, transport.ErrInvalid)
	case r.Device != nil:
		return fmt.Errorf("tcp: register buffer %d: %w: device memory", id, transport.ErrNotSupported)
	case len(r.Bytes) == 0:
		return fmt.Errorf("tcp: register buffer %d: %w: empty region", id, transport.ErrInvalid)
	case len(t.regions) >= maxRegions:
		return fmt.Errorf("tcp: register buffer %d: %w: more than %d regions", id, transport.ErrInvalid, maxRegions)
	}
	if _, dup := t.regions[id]; dup {
		return fmt.Errorf("tcp: register buffer %d: %w: already registered", id, transport.ErrInvalid)
	}
	t.regions[id] = r.Bytes
	return nil
}

// Address implements transport.Transport: the listening address and every region's size.
func (t *Transport) Address() ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var w wire.Writer
	w.U32(blobMagic)
	w.U32(blobVersion)
	w.U32(uint32(t.cfg.Rank))
	w.U32(uint32(t.cfg.World))
	w.String(t.ln.Addr().String())
	ids := make([]transport.BufferID, 0, len(t.regions))
	for id := range t.regions {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	w.U32(uint32(len(ids)))
	for _, id := range ids {
		w.U32(uint32(id))
		w.U64(uint64(len(t.regions[id])))
	}
	return w.B, nil
}

type peerAddr struct {
	addr    string
	regions map[transport.BufferID]uint64
}

func (t *Transport) parse(r int, blob []byte) (peerAddr, error) {
	if len(blob) > transport.MaxBlobSize {
		return peerAddr{}, fmt.Errorf("%w: blob of %d bytes", transport.ErrProtocol, len(blob))
	}
	rd := wire.NewReader(blob)
	if rd.U32() != blobMagic || rd.U32() != blobVersion {
		return peerAddr{}, fmt.Errorf("%w: not a tcp v%d blob", transport.ErrProtocol, blobVersion)
	}
	if rank, world := rd.U32(), rd.U32(); rd.Err() == nil && (int(rank) != r || int(world) != t.cfg.World) {
		return peerAddr{}, fmt.Errorf("%w: blob of rank %d of %d in rank %d's place", transport.ErrProtocol, rank, world, r)
	}
	pa := peerAddr{addr: rd.String(256), regions: map[transport.BufferID]uint64{}}
	n := rd.U32()
	if n > maxRegions {
		return peerAddr{}, fmt.Errorf("%w: %d regions", transport.ErrProtocol, n)
	}
	for range n {
		pa.regions[transport.BufferID(rd.U32())] = rd.U64()
	}
	if err := rd.Done(); err != nil {
		return peerAddr{}, fmt.Errorf("%w: %w", transport.ErrProtocol, err)
	}
	if _, _, err := net.SplitHostPort(pa.addr); err != nil {
		return peerAddr{}, fmt.Errorf("%w: address %q: %w", transport.ErrProtocol, pa.addr, err)
	}
	return pa, nil
}

type accepted struct {
	rank int
	conn *net.TCPConn
}

// Connect implements transport.Transport: dial the higher peers, accept the lower ones,
// authenticate both ways, then start each peer's reader and writer.
func (t *Transport) Connect(ctx context.Context, blobs [][]byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.connected {
		return fmt.Errorf("tcp: rank %d: %w: Connect called twice", t.cfg.Rank, transport.ErrInvalid)
	}
	if len(blobs) != t.cfg.World {
		return fmt.Errorf("tcp: rank %d: %w: %d blobs for a world of %d", t.cfg.Rank, transport.ErrInvalid, len(blobs), t.cfg.World)
	}
	addrs := make([]peerAddr, t.cfg.World)
	for r := range t.cfg.World {
		if !t.cfg.Peer(r) {
			continue
		}
		pa, err := t.parse(r, blobs[r])
		if err != nil {
			return fmt.Errorf("tcp: rank %d: blob of rank %d: %w", t.cfg.Rank, r, err)
		}
		addrs[r] = pa
	}
	deadline := time.Now().Add(t.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	conns := make([]*net.TCPConn, t.cfg.World)
	fail := func(err error) error {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return err
	}
	// Accept the lower ranks in the background while dialing the higher ones.
	want := 0
	for r := 0; r < t.cfg.Rank; r++ {
		if t.cfg.Peer(r) {
			want++
		}
	}
	acc := make(chan accepted)
	acceptDone := make(chan struct{})
	go t.acceptLoop(ctx, want, acc, acceptDone)
	dialErr := make(chan error, 1)
	go func() {
		for r := t.cfg.Rank + 1; r < t.cfg.World; r++ {
			if !t.cfg.Peer(r) {
				continue
			}
			c, err := t.dial(ctx, r, addrs[r].addr, deadline)
			if err != nil {
				dialErr <- fmt.Errorf("tcp: rank %d: connect rank %d at %s: %w", t.cfg.Rank, r, addrs[r].addr, err)
				return
			}
			acc <- accepted{rank: r, conn: c}
		}
		dialErr <- nil
	}()
	need := 0
	for r := range t.cfg.World {
		if t.cfg.Peer(r) {
			need++
		}
	}
	var err error
	dialing := true
	for got := 0; got < need && err == nil; {
		select {
		case a := <-acc:
			conns[a.rank] = a.conn
			got++
		case e := <-dialErr:
			dialing = false
			err = e
		case <-ctx.Done():
			err = t.missing(conns, ctx.Err())
		}
	}
	cancel()
	<-acceptDone
	if dialing {
		// Drain the dialer: it returns promptly once ctx is cancelled.
		for {
			select {
			case a := <-acc:
				conns[a.rank] = a.conn
				continue
			case e := <-dialErr:
				if err == nil {
					err = e
				}
			}
			break
		}
	}
	_ = t.ln.Close() // nothing more to accept: the port is released
	if err != nil {
		return fail(err)
	}
	for r, c := range conns {
		if c == nil {
			continue
		}
		p := t.newPeer(r, c, addrs[r].regions)
		t.peers[r] = p
		t.peerList = append(t.peerList, p)
	}
	t.touched = make([]*peer, 0, len(t.peerList))
	for _, p := range t.peerList {
		p.start()
	}
	t.connected = true
	t.log.Debug("connected", zap.Int("peers", len(t.peerList)))
	return nil
}

func (t *Transport) missing(conns []*net.TCPConn, cause error) error {
	var miss []string
	for r := range t.cfg.World {
		if t.cfg.Peer(r) && conns[r] == nil {
			miss = append(miss, fmt.Sprint(r))
		}
	}
	kind := transport.ErrTimeout
	if errors.Is(cause, context.Canceled) {
		kind = cause
	}
	return fmt.Errorf("tcp: rank %d: %w: ranks [%s] did not connect within %v (%d rejected connections)",
		t.cfg.Rank, kind, strings.Join(miss, " "), t.cfg.Timeout, t.rejected.Load())
}

func (t *Transport) dial(ctx context.Context, r int, addr string, deadline time.Time) (*net.TCPConn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: t.ip}, Deadline: deadline, KeepAliveConfig: t.keepAlive()}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	err = t.dialHandshake(c, r, minTime(deadline, time.Now().Add(handshakeMax)))
	if !stop() {
		err = errors.Join(err, ctx.Err())
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

func (t *Transport) keepAlive() net.KeepAliveConfig {
	ka := max(t.cfg.Timeout/4, time.Second)
	return net.KeepAliveConfig{Enable: true, Idle: ka, Interval: ka, Count: 3}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// acceptLoop accepts until want authenticated lower ranks arrived or ctx ends; it
// handshakes each connection in its own goroutine and drops the impostors.
func (t *Transport) acceptLoop(ctx context.Context, want int, out chan<- accepted, done chan<- struct{}) {
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		close(done)
	}()
	if want == 0 {
		return
	}
	stop := context.AfterFunc(ctx, func() { t.ln.SetDeadline(time.Now()) })
	defer stop()
	var mu sync.Mutex
	seen := map[int]bool{}
	got := 0
	for {
		c, err := t.ln.AcceptTCP()
		if err != nil {
			return // deadline (ctx) or closed
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(handshakeMax)
			if d, ok := ctx.Deadline(); ok {
				deadline = minTime(deadline, d)
			}
			unblock := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
			r, err := t.acceptHandshake(c, deadline)
			unblock()
			mu.Lock()
			if err == nil && seen[r] {
				err = fmt.Errorf("%w: rank %d is already connected", errReject, r)
			}
			if err == nil {
				seen[r] = true
			}
			mu.Unlock()
			if err == nil {
				_ = c.SetWriteDeadline(deadline)
				_, err = c.Write([]byte{statusAccepted})
				_ = c.SetWriteDeadline(time.Time{})
			}
			if err != nil {
				t.rejected.Add(1)
				t.log.Warn("rejected connection", zap.String("remote", c.RemoteAddr().String()), zap.Error(err))
				c.Close()
				return
			}
			_ = c.SetKeepAliveConfig(t.keepAlive())
			select {
			case out <- accepted{rank: r, conn: c}:
			case <-ctx.Done():
				c.Close()
			}
			mu.Lock()
			got++
			mu.Unlock()
		}()
		mu.Lock()
		full := got >= want
		mu.Unlock()
		if full {
			return
		}
	}
}

func (t *Transport) fail(err error) {
	if t.Fail(err) && !errors.Is(err, transport.ErrClosed) {
		t.log.Error("transport failed", zap.Error(err))
	}
}

// Close implements transport.Transport: say goodbye to every peer (bounded), then close.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.fail(fmt.Errorf("tcp: rank %d: %w", t.cfg.Rank, transport.ErrClosed))
		close(t.stopping)
		_ = t.ln.Close()
		t.mu.Lock()
		peers := t.peerList
		t.mu.Unlock()
		for _, p := range peers {
			p.wakeWriter()
		}
		t.wg.Wait()
	})
	return nil
}
