package plugin

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	hplugin "github.com/hashicorp/go-plugin"
	"go.uber.org/zap"

	"github.com/mkernel/mkernel/gocore/topology"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/internal/wire"
	"github.com/mkernel/mkernel/gocore/transport/shm"
)

func init() {
	transport.RegisterPluginLoader(func(path string) transport.Backend { return Backend{Path: path} })
}

const (
	blobMagic   = 0x57504b4d // "MKPW"
	blobVersion = 1
	maxRegions  = 4096
	closeWait   = 5 * time.Second
)

// Backend loads the plugin binary at Path.
type Backend struct{ Path string }

func (b Backend) Name() string                    { return transport.PluginBackendName }
func (b Backend) Priority() int                   { return 0 }
func (b Backend) Usable(*topology.Placement) bool { return true }
func (b Backend) Open(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
	return Open(ctx, b.Path, cfg)
}

// Transport is the host side of a plugin transport.
type Transport struct {
	cfg    transport.Config
	path   string
	log    *zap.Logger
	client *hplugin.Client
	rpc    *rpcClient
	seg    *shm.Segment
	r      rings
	name   string
	caps   transport.Caps

	mu        sync.Mutex
	local     map[transport.BufferID]uint64
	remote    []map[transport.BufferID]uint64
	connected bool

	failed    atomic.Pointer[error]
	done      chan struct{}
	doneOnce  sync.Once
	closeOnce sync.Once
	watchStop chan struct{}
	watchDone chan struct{}
}

var _ transport.Transport = (*Transport)(nil)

// Open starts the plugin binary at path and opens its transport with cfg.
func Open(ctx context.Context, path string, cfg transport.Config) (_ *Transport, err error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = transport.DefaultTimeout
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	t := &Transport{cfg: cfg, path: path, log: log.With(zap.String("plugin", path), zap.Int("rank", cfg.Rank)),
		local: map[transport.BufferID]uint64{}, remote: make([]map[transport.BufferID]uint64, cfg.World), done: make(chan struct{})}
	defer func() {
		if err != nil {
			t.shutdown()
		}
	}()
	if t.seg, err = shm.Create("plugin-rings", segmentBytes()); err != nil {
		return nil, fmt.Errorf("plugin %s: %w", path, err)
	}
	t.r = mapRings(t.seg.Bytes())
	t.client = hplugin.NewClient(&hplugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          hplugin.PluginSet{pluginName: &rpcPlugin{}},
		Cmd:              exec.Command(path),
		AllowedProtocols: []hplugin.Protocol{hplugin.ProtocolNetRPC},
		StartTimeout:     cfg.Timeout,
		Logger:           hclog.NewNullLogger(),
	})
	proto, err := t.client.Client()
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w: start: %w", path, transport.ErrNotSupported, err)
	}
	raw, err := proto.Dispense(pluginName)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w: %w", path, transport.ErrNotSupported, err)
	}
	t.rpc = raw.(*rpcClient)
	var reply InitReply
	args := InitArgs{Rank: cfg.Rank, World: cfg.World, Node: cfg.Node, AllPeers: cfg.AllPeers, Key: cfg.Key, Placement: cfg.Placement,
		BindHost: cfg.BindHost, RouteTo: cfg.RouteTo, TimeoutNS: int64(cfg.Timeout), RingPath: t.seg.Path(), RingBytes: segmentBytes()}
	if err := t.rpc.call("Init", args, &reply); err != nil {
		return nil, fmt.Errorf("plugin %s: %w", path, err)
	}
	if err := reply.err(); err != nil {
		return nil, fmt.Errorf("plugin %s: open: %w", path, err)
	}
	t.name, t.caps = "plugin:"+reply.Name, reply.Caps
	t.caps.NeedsFile, t.caps.DeviceMemory = true, false
	if t.caps.MaxInflight == 0 || t.caps.MaxInflight > ringSlots {
		t.caps.MaxInflight = ringSlots
	}
	return t, nil
}

// Name implements transport.Transport ("plugin:" and the served backend's name).
func (t *Transport) Name() string { return t.name }

// Caps implements transport.Transport.
func (t *Transport) Caps() transport.Caps { return t.caps }

// Register implements transport.Transport: the plugin maps the region's file.
func (t *Transport) Register(id transport.BufferID, r transport.Region) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.connected:
		return fmt.Errorf("%s: register buffer %d: %w: after Connect", t.name, id, transport.ErrInvalid)
	case r.Device != nil:
		return fmt.Errorf("%s: register buffer %d: %w: device memory", t.name, id, transport.ErrNotSupported)
	case len(r.Bytes) == 0:
		return fmt.Errorf("%s: register buffer %d: %w: empty region", t.name, id, transport.ErrInvalid)
	case r.File.Path == "":
		return fmt.Errorf("%s: register buffer %d: %w: the plugin needs file-backed memory (shm.Create)", t.name, id, transport.ErrNotSupported)
	case len(t.local) >= maxRegions:
		return fmt.Errorf("%s: register buffer %d: %w: too many regions", t.name, id, transport.ErrInvalid)
	}
	if _, dup := t.local[id]; dup {
		return fmt.Errorf("%s: register buffer %d: %w: already registered", t.name, id, transport.ErrInvalid)
	}
	var st Status
	if err := t.rpc.call("Register", RegisterArgs{ID: id, Path: r.File.Path, Offset: r.FileOffset, Len: uint64(len(r.Bytes))}, &st); err != nil {
		return err
	}
	if err := st.err(); err != nil {
		return fmt.Errorf("%s: register buffer %d: %w", t.name, id, err)
	}
	t.local[id] = uint64(len(r.Bytes))
	return nil
}

// Address implements transport.Transport: the plugin's blob, wrapped with this rank's
// region sizes so that peers validate ops without asking their plugin.
func (t *Transport) Address() ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var reply BlobReply
	if err := t.rpc.call("Address", Empty{}, &reply); err != nil {
		return nil, err
	}
	if err := reply.err(); err != nil {
		return nil, fmt.Errorf("%s: %w", t.name, err)
	}
	var w wire.Writer
	w.U32(blobMagic)
	w.U32(blobVersion)
	w.U32(uint32(t.cfg.Rank))
	w.U32(uint32(len(t.local)))
	for id, n := range t.local {
		w.U32(uint32(id))
		w.U64(n)
	}
	w.Bytes(reply.Blob)
	return w.B, nil
}

func (t *Transport) unwrap(r int, blob []byte) (map[transport.BufferID]uint64, []byte, error) {
	if len(blob) > transport.MaxBlobSize {
		return nil, nil, fmt.Errorf("%w: blob of %d bytes", transport.ErrProtocol, len(blob))
	}
	rd := wire.NewReader(blob)
	if rd.U32() != blobMagic || rd.U32() != blobVersion {
		return nil, nil, fmt.Errorf("%w: not a plugin v%d blob", transport.ErrProtocol, blobVersion)
	}
	if rank := rd.U32(); rd.Err() == nil && int(rank) != r {
		return nil, nil, fmt.Errorf("%w: blob of rank %d in rank %d's place", transport.ErrProtocol, rank, r)
	}
	n := rd.U32()
	if n > maxRegions {
		return nil, nil, fmt.Errorf("%w: %d regions", transport.ErrProtocol, n)
	}
	sizes := map[transport.BufferID]uint64{}
	for range n {
		sizes[transport.BufferID(rd.U32())] = rd.U64()
	}
	inner := rd.Bytes(transport.MaxBlobSize)
	if err := rd.Done(); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", transport.ErrProtocol, err)
	}
	return sizes, inner, nil
}

// Connect implements transport.Transport.
func (t *Transport) Connect(ctx context.Context, blobs [][]byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.connected {
		return fmt.Errorf("%s: %w: Connect called twice", t.name, transport.ErrInvalid)
	}
	if len(blobs) != t.cfg.World {
		return fmt.Errorf("%s: %w: %d blobs for a world of %d", t.name, transport.ErrInvalid, len(blobs), t.cfg.World)
	}
	inner := make([][]byte, len(blobs))
	for r, b := range blobs {
		if r != t.cfg.Rank && !t.cfg.Peer(r) {
			continue
		}
		sizes, in, err := t.unwrap(r, b)
		if err != nil {
			return fmt.Errorf("%s: blob of rank %d: %w", t.name, r, err)
		}
		inner[r] = in
		if r != t.cfg.Rank {
			t.remote[r] = sizes
		}
	}
	timeout := t.cfg.Timeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = time.Until(d)
	}
	res := make(chan error, 1)
	go func() {
		var st Status
		err := t.rpc.call("Connect", ConnectArgs{Blobs: inner, TimeoutNS: int64(timeout)}, &st)
		if err == nil {
			err = st.err()
		}
		res <- err
	}()
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	case <-ctx.Done():
		t.client.Kill() // the call is stuck in the plugin: end it
		return fmt.Errorf("%s: connect: %w", t.name, ctx.Err())
	}
	t.connected = true
	t.watchStop, t.watchDone = make(chan struct{}), make(chan struct{})
	go t.watch()
	return nil
}

// watch notices the plugin failing or dying while nobody polls.
func (t *Transport) watch() {
	defer close(t.watchDone)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-t.watchStop:
			return
		case <-tick.C:
		}
		if atomic.LoadUint32(&t.r.ctrl.failed) != 0 {
			t.fetchFailure()
			return
		}
		if t.client.Exited() {
			t.fail(fmt.Errorf("%s: rank %d: %w: the plugin process exited", t.name, t.cfg.Rank, transport.ErrPeerGone))
			return
		}
	}
}

func (t *Transport) fetchFailure() {
	var st Status
	err := t.rpc.call("Failure", Empty{}, &st)
	if err == nil {
		err = st.err()
	}
	if err == nil {
		err = errors.New("failed without a message")
	}
	t.fail(fmt.Errorf("%s: %w", t.name, err))
}

func (t *Transport) fail(err error) {
	if t.failed.CompareAndSwap(nil, &err) && !errors.Is(err, transport.ErrClosed) {
		t.log.Error("transport failed", zap.Error(err))
	}
	t.doneOnce.Do(func() { close(t.done) })
}

// Err implements transport.Transport.
func (t *Transport) Err() error {
	if p := t.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Done implements transport.Transport.
func (t *Transport) Done() <-chan struct{} { return t.done }

func (t *Transport) check(op *transport.Op) error {
	if err := transport.CheckOp(op, t.cfg.Rank, t.cfg.World); err != nil {
		return fmt.Errorf("%s: rank %d: %w", t.name, t.cfg.Rank, err)
	}
	rem := t.remote[op.Peer]
	if rem == nil {
		return fmt.Errorf("%s: rank %d: %w: rank %d is not a connected peer", t.name, t.cfg.Rank, transport.ErrInvalid, op.Peer)
	}
	if op.Len > 0 {
		if n, ok := t.local[op.Local]; !ok || !transport.InRange(op.LocalOff, op.Len, n) {
			return fmt.Errorf("%s: rank %d: %w: local buffer %d [%d, +%d)", t.name, t.cfg.Rank, transport.ErrInvalid, op.Local, op.LocalOff, op.Len)
		}
		if n, ok := rem[op.Remote]; !ok || !transport.InRange(op.RemoteOff, op.Len, n) {
			return fmt.Errorf("%s: rank %d: %w: buffer %d [%d, +%d) of rank %d", t.name, t.cfg.Rank, transport.ErrInvalid, op.Remote, op.RemoteOff, op.Len, op.Peer)
		}
	}
	if op.Kind == transport.OpWriteSignal {
		if n, ok := rem[op.SignalBuf]; !ok || !transport.InRange(op.SignalOff, 8, n) {
			return fmt.Errorf("%s: rank %d: %w: signal word %d:%d of rank %d", t.name, t.cfg.Rank, transport.ErrInvalid, op.SignalBuf, op.SignalOff, op.Peer)
		}
	}
	return nil
}

// Post implements transport.Transport: ops go into the shared submission ring.
func (t *Transport) Post(ops []transport.Op) (int, error) {
	if err := t.Err(); err != nil {
		return 0, err
	}
	if !t.connected {
		return 0, fmt.Errorf("%s: %w: Post before Connect", t.name, transport.ErrInvalid)
	}
	c := t.r.ctrl
	head := load(&c.subHead)
	room := ringSlots - int(head-load(&c.subTail))
	i := 0
	var err error
	for ; i < len(ops) && i < room; i++ {
		if err = t.check(&ops[i]); err != nil {
			break
		}
		t.r.sub[(head+uint64(i))%ringSlots] = toWire(&ops[i])
	}
	if i > 0 {
		store(&c.subHead, head+uint64(i))
	}
	return i, err
}

// Poll implements transport.Transport: completions come from the shared ring.
func (t *Transport) Poll(done []transport.Completion) (int, error) {
	if err := t.Err(); err != nil {
		return 0, err
	}
	c := t.r.ctrl
	if atomic.LoadUint32(&c.failed) != 0 {
		t.fetchFailure()
		return 0, t.Err()
	}
	tail, head := load(&c.compTail), load(&c.compHead)
	n := 0
	for ; tail < head && n < len(done); tail++ {
		w := &t.r.comp[tail%ringSlots]
		done[n] = transport.Completion{Cookie: w.Cookie}
		n++
	}
	store(&c.compTail, tail)
	return n, nil
}

// Close implements transport.Transport: stop the plugin's transport (bounded), end the
// process, unmap the rings.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.fail(fmt.Errorf("%s: rank %d: %w", t.name, t.cfg.Rank, transport.ErrClosed))
		t.shutdown()
	})
	return nil
}

func (t *Transport) shutdown() {
	if t.watchStop != nil {
		close(t.watchStop)
		<-t.watchDone
	}
	if t.seg != nil {
		atomic.StoreUint32(&t.r.ctrl.closing, 1)
	}
	if t.rpc != nil && !t.client.Exited() {
		res := make(chan struct{})
		go func() {
			var st Status
			_ = t.rpc.call("Close", Empty{}, &st)
			close(res)
		}()
		select {
		case <-res:
		case <-time.After(closeWait):
		}
	}
	if t.client != nil {
		t.client.Kill()
	}
	if t.seg != nil {
		t.seg.Close()
	}
}
