package ibverbs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
)

const (
	maxBatch = 64  // ops per ibv_post_send call
	maxPoll  = 256 // completions per ibv_poll_cq call

	// Work request IDs: bit 63 marks the connect handshake; otherwise
	// rank << 40 | seq << 1 | part, where part 1 is an op's last (signaled)
	// WR and part 0 its unsignaled data WR, which completes only in error.
	wrHello     = uint64(1) << 63
	wrHelloRecv = uint64(1) << 62
	wrSeqMask   = uint64(1)<<39 - 1
	partLast    = 1

	// watchdogEvery is how many Polls pass between checks of the oldest
	// unfinished op against Config.Timeout.
	watchdogEvery = 1024
)

// Transport is one rank's RC endpoint: one QP per peer on one port of one
// device, one CQ and one PD for all of them.
type Transport struct {
	cfg  transport.Config
	o    options
	log  *zap.Logger
	lib  *verbs.Library
	dev  string
	port uint8

	ctx   *verbs.Context
	pd    *verbs.PD
	cq    *verbs.CQ
	local endpoint
	path  pathOptions
	queue int    // ops in flight per peer
	maxOp uint64 // bytes per op (port max_msg_sz)

	ctl       sync.Mutex // control calls
	regions   map[transport.BufferID]*region
	blob      []byte // Address, once built
	connected bool

	peers   []*peer // by rank; nil for self and non-peers
	byQPN   map[uint32]*peer
	flagMem []byte // 8-byte flag sources when a QP has no inline data
	flagMR  *verbs.MR

	// The data path, held by Post and Poll (one goroutine) and by Close.
	dp      sync.Mutex
	wrs     []verbs.SendWR
	wcs     []verbs.WC
	polls   uint64
	epoch   time.Time
	closing bool

	transport.Failure // the first error (Err) and Done
	closeOnce         sync.Once
	closeErr          error
}

var _ transport.Transport = (*Transport)(nil)

type region struct {
	id    transport.BufferID
	mem   []byte // host memory, kept reachable
	addr  uint64
	len   uint64
	kind  uint8
	mr    *verbs.MR // data writes
	sigMR *verbs.MR // flag writes: no relaxed ordering; == mr unless WithRelaxedOrdering
}

type remoteRegion struct {
	addr, len       uint64
	rkey, signalKey uint32
}

type slot struct {
	cookie uint64
	posted int64 // ns since epoch
	err    error // the first error completion of the op's WRs
}

type peer struct {
	rank   int
	qp     *verbs.QP
	psn    uint32
	inline bool // the QP sends 8-byte flags inline
	remote map[transport.BufferID]remoteRegion

	ring       []slot
	head, tail uint64 // oldest unfinished op, next op
	err        error  // why this peer failed

	helloSent, helloRecv bool
}

// Open creates rank cfg.Rank's endpoint on the placement's first ibverbs NIC
// (or WithDevice's). It fails with ErrNotSupported when libibverbs, the
// device or a usable port/GID is missing.
func Open(_ context.Context, cfg transport.Config, opts ...Option) (*Transport, error) {
	o := defaultOptions()
	for _, f := range opts {
		f(&o)
	}
	if cfg.World < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.World || (cfg.Node != nil && len(cfg.Node) != cfg.World) {
		return nil, fmt.Errorf("ibverbs: open: %w: rank %d of %d", transport.ErrInvalid, cfg.Rank, cfg.World)
	}
	if o.queue < 1 {
		return nil, fmt.Errorf("ibverbs: open: %w: queue %d", transport.ErrInvalid, o.queue)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = transport.DefaultTimeout
	}
	dev, port := o.device, o.port
	if dev == "" {
		nic, ok := placementNIC(cfg.Placement)
		if !ok {
			return nil, fmt.Errorf("ibverbs: open rank %d: %w: the placement chose no ibverbs NIC", cfg.Rank, transport.ErrNotSupported)
		}
		dev, port = nic.Name, nic.Port
	}
	if port < 1 || port > 255 {
		return nil, fmt.Errorf("ibverbs: open rank %d: %w: port %d of %s", cfg.Rank, transport.ErrInvalid, port, dev)
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	t := &Transport{
		cfg:     cfg,
		o:       o,
		log:     log.With(zap.String("transport", Name), zap.Int("rank", cfg.Rank), zap.String("device", dev), zap.Int("port", port)),
		dev:     dev,
		port:    uint8(port),
		regions: map[transport.BufferID]*region{},
		peers:   make([]*peer, cfg.World),
		byQPN:   map[uint32]*peer{},
		wrs:     make([]verbs.SendWR, 0, 2*maxBatch),
		wcs:     make([]verbs.WC, maxPoll),
		epoch:   time.Now(),
	}
	if err := t.open(); err != nil {
		cerr := t.release()
		return nil, errors.Join(fmt.Errorf("ibverbs: open rank %d on %s port %d: %w", cfg.Rank, dev, port, err), cerr)
	}
	t.log.Info("ibverbs endpoint open", zap.Stringer("link_layer", t.local.LinkLayer), zap.Stringer("gid", t.local.GID),
		zap.Int("gid_index", int(t.local.GIDIndex)), zap.Stringer("gid_type", t.local.GIDType), zap.Int("mtu", t.local.MTU.Bytes()),
		zap.Int("queue", t.queue))
	return t, nil
}

// open acquires the device, PD and CQ; release undoes whatever it got.
func (t *Transport) open() error {
	var err error
	if t.lib, err = verbs.Load(t.o.library); err != nil {
		return err
	}
	if t.ctx, err = t.lib.Open(t.dev); err != nil {
		return err
	}
	da, err := t.ctx.QueryDevice()
	if err != nil {
		return err
	}
	pa, err := t.ctx.QueryPort(int(t.port))
	if err != nil {
		return err
	}
	if pa.State != verbs.PortActive {
		return fmt.Errorf("port is %v, not ACTIVE: %w", pa.State, transport.ErrNotSupported)
	}
	if pa.LinkLayer != verbs.LinkLayerInfiniBand && pa.LinkLayer != verbs.LinkLayerEthernet {
		return fmt.Errorf("link layer %v is neither InfiniBand nor Ethernet (an EFA device? use the efa backend): %w", pa.LinkLayer, transport.ErrNotSupported)
	}
	table, err := t.ctx.GIDTable(int(t.port), t.o.sysfsRoot)
	if err != nil {
		return err
	}
	netdev := ""
	if pa.LinkLayer == verbs.LinkLayerEthernet {
		if netdev = PortNetDev(t.o.sysfsRoot, t.dev, int(t.port)); netdev == "" {
			netdev = defaultGIDNetDev(table)
		}
	}
	gid, err := PickGID(table, pa.LinkLayer, netdev, t.o.gidIndex)
	if err != nil {
		return fmt.Errorf("%w: %w", err, transport.ErrNotSupported)
	}
	t.local = endpoint{
		LinkLayer: pa.LinkLayer, Port: t.port, LID: pa.LID, GID: gid.GID, GIDIndex: uint8(gid.Index),
		GIDType: gid.Type, MTU: pa.ActiveMTU,
	}
	t.path = pathOptions{TrafficClass: t.o.trafficClass, SL: t.o.sl, Timeout: ackTimeout(t.cfg.Timeout)}
	t.maxOp = uint64(pa.MaxMsgSize)
	if t.maxOp == 0 {
		t.maxOp = 1 << 30
	}

	npeers := 0
	for r := range t.cfg.World {
		if t.cfg.Peer(r) {
			npeers++
		}
	}
	// Every op takes at most two send queue entries and, in error, two
	// completions; the handshake one more of each per peer.
	t.queue = t.o.queue
	if da.MaxQPWR > 0 {
		t.queue = min(t.queue, (da.MaxQPWR-1)/2)
	}
	if npeers > 0 && da.MaxCQE > 0 {
		t.queue = min(t.queue, (da.MaxCQE/npeers-2)/2)
	}
	if t.queue < 1 {
		return fmt.Errorf("%d peers do not fit the device's queues (max_qp_wr %d, max_cqe %d): %w", npeers, da.MaxQPWR, da.MaxCQE, transport.ErrNotSupported)
	}
	if t.pd, err = t.ctx.AllocPD(); err != nil {
		return err
	}
	if t.cq, err = t.ctx.CreateCQ(max(1, npeers*(2*t.queue+2))); err != nil {
		return err
	}
	return nil
}

// release destroys every verbs object in reverse order of creation: QPs,
// MRs, CQ, PD, device. It is called once, by Close or a failed Open.
func (t *Transport) release() error {
	var errs []error
	note := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	for _, p := range t.peers {
		if p != nil && p.qp != nil {
			note(fmt.Sprintf("destroy QP %d (rank %d)", p.qp.Num(), p.rank), p.qp.Close())
		}
	}
	ids := make([]int, 0, len(t.regions))
	for id := range t.regions {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	for _, id := range ids {
		r := t.regions[transport.BufferID(id)]
		if r.sigMR != nil && r.sigMR != r.mr {
			note(fmt.Sprintf("deregister buffer %d (flag MR)", id), r.sigMR.Close())
		}
		if r.mr != nil {
			note(fmt.Sprintf("deregister buffer %d", id), r.mr.Close())
		}
	}
	if t.flagMR != nil {
		note("deregister flag sources", t.flagMR.Close())
	}
	if t.flagMem != nil {
		note("unmap flag sources", unix.Munmap(t.flagMem))
		t.flagMem = nil
	}
	if t.cq != nil {
		note("destroy CQ", t.cq.Close())
	}
	if t.pd != nil {
		note("deallocate PD", t.pd.Close())
	}
	if t.ctx != nil {
		note("close device", t.ctx.Close())
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("ibverbs: release %s port %d: %w", t.dev, t.port, errors.Join(errs...))
}

// Name implements transport.Transport.
func (t *Transport) Name() string { return Name }

// Caps implements transport.Transport: RC places writes in order, so a flag
// write covers every earlier op to that peer.
func (t *Transport) Caps() transport.Caps {
	return transport.Caps{OrderedWrites: true, MaxOpBytes: t.maxOp, MaxInflight: t.queue, DeviceMemory: true}
}

// Device returns the device name and port the endpoint uses.
func (t *Transport) Device() (string, int) { return t.dev, int(t.port) }

// GID returns the local GID, its table index and type.
func (t *Transport) GID() (verbs.GID, int, verbs.GIDType) {
	return t.local.GID, int(t.local.GIDIndex), t.local.GIDType
}

func (t *Transport) access(relaxed bool) verbs.Access {
	a := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if relaxed {
		a |= verbs.AccessRelaxedOrdering
	}
	return a
}

// Register implements transport.Transport. Host memory is registered with
// ibv_reg_mr. GPU memory with ibv_reg_dmabuf_mr when the caller exported a
// DMA-BUF fd for it (cuMemGetHandleForAddressRange) and the library has the
// call, else (or if that fails) with ibv_reg_mr on the device pointer, which
// works where nvidia-peermem is loaded.
func (t *Transport) Register(id transport.BufferID, r transport.Region) error {
	t.ctl.Lock()
	defer t.ctl.Unlock()
	fail := func(err error) error {
		return fmt.Errorf("ibverbs: register buffer %d on %s port %d: %w", id, t.dev, t.port, err)
	}
	switch {
	case t.Closed():
		return fail(t.Err())
	case t.blob != nil:
		return fail(fmt.Errorf("%w: after Address", transport.ErrInvalid))
	case t.regions[id] != nil:
		return fail(fmt.Errorf("%w: already registered", transport.ErrInvalid))
	case len(t.regions) >= maxRegions:
		return fail(fmt.Errorf("%w: more than %d regions", transport.ErrInvalid, maxRegions))
	case r.Device == nil && len(r.Bytes) == 0:
		return fail(fmt.Errorf("%w: empty region", transport.ErrInvalid))
	case r.Device != nil && (r.Device.Len == 0 || r.Device.Ptr == 0):
		return fail(fmt.Errorf("%w: empty device region", transport.ErrInvalid))
	}
	reg := &region{id: id}
	var err error
	if r.Device != nil {
		err = t.registerDevice(reg, r.Device)
	} else {
		reg.mem, reg.kind = r.Bytes, kindHost
		reg.addr, reg.len = uint64(uintptr(unsafe.Pointer(&r.Bytes[0]))), uint64(len(r.Bytes))
		err = t.registerHost(reg)
	}
	if err != nil {
		return fail(err)
	}
	t.regions[id] = reg
	return nil
}

// registerHost registers reg (addr, len set) once, or twice with relaxed
// ordering (a relaxed MR for data, a strict one for flags).
func (t *Transport) registerHost(reg *region) error {
	mr, err := t.pd.RegMR(uintptr(reg.addr), reg.len, t.access(t.o.relaxed))
	if err != nil {
		return err
	}
	reg.mr, reg.sigMR = mr, mr
	if t.o.relaxed {
		if reg.sigMR, err = t.pd.RegMR(uintptr(reg.addr), reg.len, t.access(false)); err != nil {
			_ = mr.Close()
			return fmt.Errorf("strict MR for flags: %w", err)
		}
	}
	return nil
}

func (t *Transport) registerDevice(reg *region, d *transport.DeviceRegion) error {
	reg.kind, reg.addr, reg.len = kindDevice, uint64(d.Ptr), d.Len
	var dmaErr error
	if d.DMABufFD >= 0 {
		reg.mr, dmaErr = t.pd.RegDMABufMR(d.DMABufOffset, d.Len, uint64(d.Ptr), d.DMABufFD, t.access(t.o.relaxed))
		if dmaErr == nil {
			reg.sigMR = reg.mr
			if !t.o.relaxed {
				return nil
			}
			var err error
			if reg.sigMR, err = t.pd.RegDMABufMR(d.DMABufOffset, d.Len, uint64(d.Ptr), d.DMABufFD, t.access(false)); err == nil {
				return nil
			}
			_ = reg.mr.Close()
			reg.mr, reg.sigMR = nil, nil
			return fmt.Errorf("GPU %d memory: strict DMA-BUF MR for flags: %w", d.GPU, err)
		}
	} else {
		dmaErr = errors.New("no DMA-BUF fd")
	}
	// nvidia-peermem: the HCA driver pins the GPU pages through the
	// peer-memory client given the device virtual address.
	if err := t.registerHost(reg); err != nil {
		reg.mr, reg.sigMR = nil, nil
		return fmt.Errorf("GPU %d memory at %#x (+%d): DMA-BUF: %v; ibv_reg_mr (nvidia-peermem): %w: %w",
			d.GPU, d.Ptr, d.Len, dmaErr, err, transport.ErrNotSupported)
	}
	t.log.Info("GPU memory registered through nvidia-peermem", zap.Int("gpu", d.GPU), zap.Uint32("buffer", uint32(reg.id)), zap.NamedError("dmabuf", dmaErr))
	return nil
}

// Address implements transport.Transport. The first call creates one RC QP
// per peer, moves it to INIT and posts the receive for the connect
// handshake, then describes all of it in the blob.
func (t *Transport) Address() ([]byte, error) {
	t.ctl.Lock()
	defer t.ctl.Unlock()
	if t.Closed() {
		return nil, fmt.Errorf("ibverbs: address: %w", t.Err())
	}
	if t.blob != nil {
		return t.blob, nil
	}
	if err := t.createQPs(); err != nil {
		return nil, fmt.Errorf("ibverbs: address of rank %d on %s port %d: %w", t.cfg.Rank, t.dev, t.port, err)
	}
	b := blob{
		Rank: t.cfg.Rank, World: t.cfg.World, LinkLayer: t.local.LinkLayer, Port: t.port, LID: t.local.LID,
		GID: t.local.GID, GIDType: t.local.GIDType, MTU: t.local.MTU,
	}
	for _, r := range t.regions {
		b.Regions = append(b.Regions, blobRegion{ID: r.id, Addr: r.addr, Len: r.len, RKey: r.mr.RKey(), SignalRKey: r.sigMR.RKey(), Kind: r.kind})
	}
	sort.Slice(b.Regions, func(i, j int) bool { return b.Regions[i].ID < b.Regions[j].ID })
	for _, p := range t.peers {
		if p != nil {
			b.QPs = append(b.QPs, blobQP{Peer: p.rank, QPN: p.qp.Num(), PSN: p.psn})
		}
	}
	data, err := b.encode(t.cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("ibverbs: address of rank %d: %w", t.cfg.Rank, err)
	}
	t.blob = data
	return data, nil
}

func (t *Transport) createQPs() error {
	needFlagMem := false
	for r := range t.cfg.World {
		if !t.cfg.Peer(r) {
			continue
		}
		qp, err := t.pd.CreateQP(verbs.QPInit{
			Kind: verbs.QPKindRC, MaxSendWR: uint32(2*t.queue + 1), MaxRecvWR: 1,
			MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 8,
		}, t.cq, t.cq)
		if err != nil {
			// Some providers refuse inline data; retry without it and send
			// flags from registered memory instead.
			qp, err = t.pd.CreateQP(verbs.QPInit{
				Kind: verbs.QPKindRC, MaxSendWR: uint32(2*t.queue + 1), MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1,
			}, t.cq, t.cq)
			if err != nil {
				return fmt.Errorf("create RC QP for rank %d: %w", r, err)
			}
		}
		p := &peer{rank: r, qp: qp, psn: rand.Uint32() & 0xffffff, ring: make([]slot, t.queue), inline: qp.Caps().MaxInlineData >= 8}
		t.peers[r] = p
		t.byQPN[qp.Num()] = p
		needFlagMem = needFlagMem || !p.inline
		attr, mask := rcInit(t.port)
		if err := qp.Modify(attr, mask); err != nil {
			return fmt.Errorf("QP for rank %d: %w", r, err)
		}
		if _, err := qp.PostRecv([]verbs.RecvWR{{WRID: wrHello | wrHelloRecv | uint64(r)}}); err != nil {
			return fmt.Errorf("QP for rank %d: post the handshake receive: %w", r, err)
		}
	}
	if needFlagMem {
		return t.createFlagMem()
	}
	return nil
}

// createFlagMem maps and registers one 8-byte flag source per op slot of
// every peer, for QPs that cannot send the flag inline.
func (t *Transport) createFlagMem() error {
	size := (t.cfg.World*t.queue*8 + unix.Getpagesize() - 1) &^ (unix.Getpagesize() - 1)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("map flag sources: %w", err)
	}
	t.flagMem = mem
	if t.flagMR, err = t.pd.RegMR(uintptr(unsafe.Pointer(&mem[0])), uint64(size), verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("register flag sources: %w", err)
	}
	return nil
}

// Connect implements transport.Transport: check every peer's blob, move each
// QP to RTR and RTS, then run a handshake (a zero-byte SEND with the rank as
// immediate, each way) so that every QP is known to reach its peer before
// Connect returns.
func (t *Transport) Connect(ctx context.Context, blobs [][]byte) error {
	t.ctl.Lock()
	defer t.ctl.Unlock()
	t.dp.Lock()
	defer t.dp.Unlock()
	switch {
	case t.Closed():
		return fmt.Errorf("ibverbs: connect: %w", t.Err())
	case t.connected:
		return fmt.Errorf("ibverbs: connect: %w: called twice", transport.ErrInvalid)
	case t.blob == nil:
		return fmt.Errorf("ibverbs: connect: %w: Address was not called", transport.ErrInvalid)
	case len(blobs) != t.cfg.World:
		return fmt.Errorf("ibverbs: connect: %w: %d blobs for %d ranks", transport.ErrInvalid, len(blobs), t.cfg.World)
	}
	peers := make([]*blob, t.cfg.World)
	for _, p := range t.peers {
		if p == nil {
			continue
		}
		b, err := t.checkBlob(p.rank, blobs[p.rank])
		if err != nil {
			return fmt.Errorf("ibverbs: connect rank %d to rank %d via %s port %d: %w", t.cfg.Rank, p.rank, t.dev, t.port, err)
		}
		peers[p.rank] = b
	}
	for _, p := range t.peers {
		if p == nil {
			continue
		}
		if err := t.connectPeer(p, peers[p.rank]); err != nil {
			return fmt.Errorf("ibverbs: connect rank %d to rank %d via %s port %d: %w", t.cfg.Rank, p.rank, t.dev, t.port, err)
		}
	}
	if err := t.handshake(ctx); err != nil {
		return fmt.Errorf("ibverbs: connect rank %d via %s port %d: %w", t.cfg.Rank, t.dev, t.port, err)
	}
	t.connected = true
	return nil
}

// checkBlob decodes rank r's blob and checks that it can talk to us.
func (t *Transport) checkBlob(r int, data []byte) (*blob, error) {
	b, err := decodeBlob(data, t.cfg.Key)
	if err != nil {
		return nil, err
	}
	switch {
	case b.Rank != r || b.World != t.cfg.World:
		return nil, fmt.Errorf("%w: blob is rank %d of %d, want rank %d of %d", transport.ErrProtocol, b.Rank, b.World, r, t.cfg.World)
	case b.LinkLayer != t.local.LinkLayer:
		return nil, fmt.Errorf("%w: link layers differ: local %v, remote %v", transport.ErrNotSupported, t.local.LinkLayer, b.LinkLayer)
	}
	if _, ok := b.qpFor(t.cfg.Rank); !ok {
		return nil, fmt.Errorf("%w: the peer made no queue pair for rank %d", transport.ErrProtocol, t.cfg.Rank)
	}
	if t.local.LinkLayer == verbs.LinkLayerEthernet {
		if err := compatibleGIDs(t.local.GID, b.GID, t.local.GIDType, b.GIDType); err != nil {
			return nil, fmt.Errorf("%w (set the GID index on one side): %w", err, transport.ErrNotSupported)
		}
	}
	return b, nil
}

func (t *Transport) connectPeer(p *peer, b *blob) error {
	q, _ := b.qpFor(t.cfg.Rank)
	remote := endpoint{LinkLayer: b.LinkLayer, Port: b.Port, LID: b.LID, GID: b.GID, GIDType: b.GIDType, MTU: b.MTU}
	p.remote = make(map[transport.BufferID]remoteRegion, len(b.Regions))
	for _, r := range b.Regions {
		p.remote[r.ID] = remoteRegion{addr: r.Addr, len: r.Len, rkey: r.RKey, signalKey: r.SignalRKey}
	}
	attr, mask := rcRTR(t.local, remote, q.QPN, q.PSN, t.path)
	if err := p.qp.Modify(attr, mask); err != nil {
		return fmt.Errorf("remote QP %d (GID %s, LID %d): %w", q.QPN, b.GID, b.LID, err)
	}
	attr, mask = rcRTS(p.psn, t.path)
	if err := p.qp.Modify(attr, mask); err != nil {
		return err
	}
	return nil
}

func (t *Transport) handshake(ctx context.Context) error {
	for _, p := range t.peers {
		if p == nil {
			continue
		}
		wr := []verbs.SendWR{{WRID: wrHello | uint64(p.rank), Opcode: verbs.OpSendWithImm, Flags: verbs.SendSignaled, Imm: uint32(t.cfg.Rank)}}
		if _, err := p.qp.PostSend(wr); err != nil {
			return fmt.Errorf("handshake with rank %d: %w", p.rank, err)
		}
	}
	deadline := time.Now().Add(t.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for {
		n, err := t.cq.Poll(t.wcs)
		if err != nil {
			return fmt.Errorf("handshake: %w", err)
		}
		for i := range t.wcs[:n] {
			if err := t.helloCompletion(&t.wcs[i]); err != nil {
				return err
			}
		}
		var missing []string
		for _, p := range t.peers {
			if p != nil && !(p.helloSent && p.helloRecv) {
				missing = append(missing, fmt.Sprint(p.rank))
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if n > 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("handshake with rank %s: %w", strings.Join(missing, ", "), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: no handshake from rank %s within %v", transport.ErrTimeout, strings.Join(missing, ", "), t.cfg.Timeout)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func (t *Transport) helloCompletion(wc *verbs.WC) error {
	if wc.WRID&wrHello == 0 {
		return fmt.Errorf("%w: completion %#x during the handshake", transport.ErrProtocol, wc.WRID)
	}
	r := int(wc.WRID & 0xffffff)
	if r >= len(t.peers) || t.peers[r] == nil {
		return fmt.Errorf("%w: handshake completion for rank %d", transport.ErrProtocol, r)
	}
	p := t.peers[r]
	if wc.Status != verbs.WCSuccess {
		return t.wcError(p, wc, "handshake with")
	}
	if wc.WRID&wrHelloRecv == 0 {
		p.helloSent = true
		return nil
	}
	if !wc.HasImm() || int(wc.Imm) != r || wc.QPNum != p.qp.Num() {
		return fmt.Errorf("%w: handshake from rank %d carried rank %d on QP %d (want QP %d)", transport.ErrProtocol, r, wc.Imm, wc.QPNum, p.qp.Num())
	}
	p.helloRecv = true
	return nil
}

// wcError turns a failed work completion into an error naming the peer, the
// device and port, and matching the transport sentinel for its cause.
func (t *Transport) wcError(p *peer, wc *verbs.WC, what string) error {
	var cause error
	switch wc.Status {
	case verbs.WCRetryExcErr, verbs.WCRNRRetryExcErr, verbs.WCRespTimeoutErr, verbs.WCRemAbortErr:
		cause = transport.ErrPeerGone
	case verbs.WCWRFlushErr:
		if p.err != nil {
			return p.err
		}
		cause = transport.ErrPeerGone
	default:
		cause = transport.ErrProtocol
	}
	return fmt.Errorf("ibverbs: %s rank %d via %s port %d: %v (vendor error %#x): %w",
		what, p.rank, t.dev, t.port, wc.Status, wc.VendorErr, cause)
}

// Post implements transport.Transport. Ops to one peer go in order on its QP:
// a write is one RDMA WRITE; a write-and-signal is an RDMA WRITE of the data
// (unsignaled) followed by an 8-byte RDMA WRITE of the flag value (inline
// where the QP allows), which RC places after the data.
func (t *Transport) Post(ops []transport.Op) (int, error) {
	t.dp.Lock()
	defer t.dp.Unlock()
	if err := t.Err(); err != nil {
		return 0, err
	}
	if !t.connected {
		return 0, fmt.Errorf("ibverbs: post: %w: not connected", transport.ErrInvalid)
	}
	wrs := t.wrs[:0]
	var cur *peer
	first := 0 // index in ops of the first op in wrs
	for i := range ops {
		op := &ops[i]
		p, err := t.check(op)
		if err != nil {
			n, ferr := t.flush(cur, wrs, first, i)
			if ferr != nil {
				return n, ferr
			}
			return i, err
		}
		if p != cur || len(wrs)+2 > cap(wrs) {
			n, err := t.flush(cur, wrs, first, i)
			if err != nil {
				return n, err
			}
			wrs, cur, first = wrs[:0], p, i
		}
		if p.tail-p.head >= uint64(t.queue) {
			n, err := t.flush(cur, wrs, first, i)
			if err != nil {
				return n, err
			}
			return i, nil // back-pressure
		}
		wrs = t.appendWRs(wrs, p, op)
	}
	n, err := t.flush(cur, wrs, first, len(ops))
	if err != nil {
		return n, err
	}
	return len(ops), nil
}

// appendWRs adds op's work requests and takes a ring slot.
func (t *Transport) appendWRs(wrs []verbs.SendWR, p *peer, op *transport.Op) []verbs.SendWR {
	seq := p.tail
	p.tail++
	s := &p.ring[seq%uint64(t.queue)]
	*s = slot{cookie: op.Cookie, posted: int64(time.Since(t.epoch))}
	id := uint64(p.rank)<<40 | (seq&wrSeqMask)<<1
	if op.Len > 0 {
		lr := t.regions[op.Local]
		rr := p.remote[op.Remote]
		w := verbs.SendWR{
			WRID: id, Opcode: verbs.OpRDMAWrite, LocalAddr: lr.addr + op.LocalOff, Length: uint32(op.Len), LKey: lr.mr.LKey(),
			RemoteAddr: rr.addr + op.RemoteOff, RKey: rr.rkey,
		}
		if op.Kind == transport.OpWrite {
			w.WRID |= partLast
			w.Flags = verbs.SendSignaled
		}
		wrs = append(wrs, w)
	}
	if op.Kind == transport.OpWriteSignal {
		sr := p.remote[op.SignalBuf]
		w := verbs.SendWR{
			WRID: id | partLast, Opcode: verbs.OpRDMAWrite, Length: 8, Flags: verbs.SendSignaled,
			RemoteAddr: sr.addr + op.SignalOff, RKey: sr.signalKey,
		}
		if p.inline {
			w.Flags |= verbs.SendInline
			w.InlineValue = op.SignalValue
		} else {
			off := (p.rank*t.queue + int(seq%uint64(t.queue))) * 8
			*(*uint64)(unsafe.Pointer(&t.flagMem[off])) = op.SignalValue
			w.LocalAddr = uint64(uintptr(unsafe.Pointer(&t.flagMem[off])))
			w.LKey = t.flagMR.LKey()
		}
		wrs = append(wrs, w)
	}
	return wrs
}

// flush posts wrs (the ops [first, end) to p) in one ibv_post_send. If the
// provider refuses part of them, the ops not wholly posted are taken back and
// the transport fails; the count returned is then the ops wholly posted.
func (t *Transport) flush(p *peer, wrs []verbs.SendWR, first, end int) (int, error) {
	if len(wrs) == 0 {
		return end, nil
	}
	posted, err := p.qp.PostSend(wrs)
	if err == nil {
		return end, nil
	}
	// Ops whose last WR was posted stay in flight; the rest are undone.
	done := 0
	for _, w := range wrs[:posted] {
		if w.WRID&partLast != 0 {
			done++
		}
	}
	p.tail -= uint64((end - first) - done)
	err = fmt.Errorf("ibverbs: post to rank %d via %s port %d: %w: %w", p.rank, t.dev, t.port, err, transport.ErrPeerGone)
	t.failPeer(p, err)
	return first + done, err
}

// check validates op and returns its peer; errors match ErrInvalid and leave
// the transport working.
func (t *Transport) check(op *transport.Op) (*peer, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("ibverbs: %s op to rank %d: %w: %s", op.Kind, op.Peer, transport.ErrInvalid, fmt.Sprintf(format, args...))
	}
	if op.Kind != transport.OpWrite && op.Kind != transport.OpWriteSignal {
		return nil, bad("unknown kind %d", op.Kind)
	}
	if op.Peer < 0 || int(op.Peer) >= len(t.peers) || t.peers[op.Peer] == nil {
		return nil, bad("not a peer of rank %d", t.cfg.Rank)
	}
	p := t.peers[op.Peer]
	if op.Len == 0 && op.Kind == transport.OpWrite {
		return nil, bad("zero-length write")
	}
	if op.Len > t.maxOp {
		return nil, bad("%d bytes exceed the %d-byte limit", op.Len, t.maxOp)
	}
	if op.Len > 0 {
		lr := t.regions[op.Local]
		if lr == nil {
			return nil, bad("unknown local buffer %d", op.Local)
		}
		if !transport.InRange(op.LocalOff, op.Len, lr.len) {
			return nil, bad("local [%d, +%d) outside buffer %d of %d bytes", op.LocalOff, op.Len, op.Local, lr.len)
		}
		rr, ok := p.remote[op.Remote]
		if !ok {
			return nil, bad("unknown remote buffer %d", op.Remote)
		}
		if !transport.InRange(op.RemoteOff, op.Len, rr.len) {
			return nil, bad("remote [%d, +%d) outside buffer %d of %d bytes", op.RemoteOff, op.Len, op.Remote, rr.len)
		}
	}
	if op.Kind == transport.OpWriteSignal {
		sr, ok := p.remote[op.SignalBuf]
		if !ok {
			return nil, bad("unknown flag buffer %d", op.SignalBuf)
		}
		if op.SignalOff%8 != 0 || !transport.InRange(op.SignalOff, 8, sr.len) || (sr.addr+op.SignalOff)%8 != 0 {
			return nil, bad("flag at %d of buffer %d (%d bytes) is not an aligned 8-byte word in it", op.SignalOff, op.SignalBuf, sr.len)
		}
	}
	return p, nil
}

// Poll implements transport.Transport.
func (t *Transport) Poll(done []transport.Completion) (int, error) {
	t.dp.Lock()
	defer t.dp.Unlock()
	if t.closing {
		return 0, t.Err()
	}
	if len(done) == 0 || !t.connected {
		return 0, t.Err()
	}
	n, err := t.cq.Poll(t.wcs[:min(len(done), len(t.wcs))])
	if err != nil {
		err = fmt.Errorf("ibverbs: poll CQ of %s port %d: %w", t.dev, t.port, err)
		t.fail(err)
		return 0, err
	}
	k := 0
	for i := range t.wcs[:n] {
		if c, ok := t.complete(&t.wcs[i]); ok {
			done[k] = c
			k++
		}
	}
	t.polls++
	if t.polls%watchdogEvery == 0 {
		t.watchdog()
	}
	if k == 0 {
		return 0, t.Err()
	}
	return k, nil
}

// complete handles one work completion and returns the op completion it
// finishes, if any.
func (t *Transport) complete(wc *verbs.WC) (transport.Completion, bool) {
	if wc.WRID&wrHello != 0 {
		// A handshake completion after Connect: nothing to do unless it
		// failed (then the peer is gone).
		r := int(wc.WRID & 0xffffff)
		if wc.Status != verbs.WCSuccess && r < len(t.peers) && t.peers[r] != nil {
			t.failPeer(t.peers[r], t.wcError(t.peers[r], wc, "handshake with"))
		}
		return transport.Completion{}, false
	}
	r := int(wc.WRID >> 40)
	if r >= len(t.peers) || t.peers[r] == nil {
		t.fail(fmt.Errorf("ibverbs: %w: completion %#x names no peer", transport.ErrProtocol, wc.WRID))
		return transport.Completion{}, false
	}
	p := t.peers[r]
	seq := wc.WRID >> 1 & wrSeqMask
	if seq < p.head || seq >= p.tail {
		return transport.Completion{}, false // an op taken back by flush
	}
	s := &p.ring[seq%uint64(t.queue)]
	if wc.Status != verbs.WCSuccess {
		err := t.wcError(p, wc, "write to")
		t.failPeer(p, err)
		if s.err == nil {
			s.err = err
		}
	}
	if wc.WRID&partLast == 0 {
		return transport.Completion{}, false // the data WR failed; its flag WR completes the op
	}
	if seq != p.head {
		// RC completes one QP's work requests in order.
		t.fail(fmt.Errorf("ibverbs: %w: completion of op %d to rank %d while op %d is the oldest", transport.ErrProtocol, seq, r, p.head))
		return transport.Completion{}, false
	}
	p.head++
	c := transport.Completion{Cookie: s.cookie, Err: s.err}
	*s = slot{}
	return c, true
}

// watchdog fails a peer whose oldest op has been unfinished for longer than
// Config.Timeout and moves its QP to the error state, which flushes its ops
// back as failed completions.
func (t *Transport) watchdog() {
	now := int64(time.Since(t.epoch))
	for _, p := range t.peers {
		if p == nil || p.head == p.tail || p.err != nil {
			continue
		}
		s := &p.ring[p.head%uint64(t.queue)]
		if age := time.Duration(now - s.posted); age > t.cfg.Timeout {
			t.failPeer(p, fmt.Errorf("ibverbs: write to rank %d via %s port %d unfinished after %v: %w",
				p.rank, t.dev, t.port, age.Round(time.Millisecond), transport.ErrTimeout))
		}
	}
}

// failPeer records why p failed, fails the transport, and moves p's QP to
// the error state so its remaining ops complete (with errors).
func (t *Transport) failPeer(p *peer, err error) {
	if p.err != nil {
		return
	}
	p.err = err
	t.fail(err)
	attr, mask := rcError()
	if merr := p.qp.Modify(attr, mask); merr != nil {
		t.log.Warn("cannot move a failed QP to the error state", zap.Int("peer", p.rank), zap.Error(merr))
	}
}

// fail records the transport's first failure and closes Done.
func (t *Transport) fail(err error) {
	if t.Fail(err) {
		t.log.Error("ibverbs transport failed", zap.Error(err))
	}
}

// Close implements transport.Transport: it fails the transport with
// ErrClosed (unless it already failed), waits for a running Post or Poll to
// return, and destroys QPs, MRs, the CQ, the PD and the device context, in
// that order. Ops in flight are abandoned. Later calls return nil.
func (t *Transport) Close() error {
	first := false
	t.closeOnce.Do(func() {
		first = true
		t.fail(fmt.Errorf("ibverbs: rank %d: %w", t.cfg.Rank, transport.ErrClosed))
		t.dp.Lock()
		t.closing = true
		t.dp.Unlock()
		t.ctl.Lock()
		defer t.ctl.Unlock()
		t.closeErr = t.release()
	})
	if !first {
		return nil
	}
	return t.closeErr
}
