package ibverbs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
	"unsafe"

	"go.uber.org/zap"

	"github.com/mkernel/mkernel/gocore/topology"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
	"github.com/mkernel/mkernel/gocore/transport/rdma/connblob"
	"github.com/mkernel/mkernel/gocore/transport/rdma/memreg"
	"github.com/mkernel/mkernel/gocore/transport/rdma/session"
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

	gate      session.Gate  // the control and data path locks, Close
	mem       *memreg.Table // under gate.Ctl
	blob      []byte        // Address, once built
	connected bool

	peers []*peer // by rank; nil for self and non-peers
	byQPN map[uint32]*peer
	flags memreg.Scratch // 8-byte flag sources when a QP has no inline data

	// The data path, under gate.DP: Post and Poll (one goroutine).
	wrs   []verbs.SendWR
	wcs   []verbs.WC
	polls uint64
	epoch time.Time

	transport.Failure // the first error (Err) and Done
}

var _ transport.Transport = (*Transport)(nil)

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
	remote map[transport.BufferID]memreg.Remote

	ring       []slot
	head, tail uint64 // oldest unfinished op, next op
	err        error  // why this peer failed

	helloSent, helloRecv bool
}

// Handshake implements session.Handshaker.
func (p *peer) Handshake() (int, bool) { return p.rank, p.helloSent && p.helloRecv }

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
		nic, ok := cfg.Placement.FirstNIC(topology.KindIBVerbs)
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
		cfg:   cfg,
		o:     o,
		log:   log.With(zap.String("transport", Name), zap.Int("rank", cfg.Rank), zap.String("device", dev), zap.Int("port", port)),
		dev:   dev,
		port:  uint8(port),
		peers: make([]*peer, cfg.World),
		byQPN: map[uint32]*peer{},
		wrs:   make([]verbs.SendWR, 0, 2*maxBatch),
		wcs:   make([]verbs.WC, maxPoll),
		epoch: time.Now(),
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
	t.mem = memreg.NewTable(t.pd, connblob.MaxRegions, t.o.relaxed, t.log)
	if t.cq, err = t.ctx.CreateCQ(max(1, npeers*(2*t.queue+2))); err != nil {
		return err
	}
	return nil
}

// release destroys every verbs object in reverse order of creation: QPs,
// MRs, CQ, PD, device. It is called once, by Close or a failed Open.
func (t *Transport) release() error {
	var d session.Teardown
	for _, p := range t.peers {
		if p != nil && p.qp != nil {
			d.Note(fmt.Sprintf("destroy QP %d (rank %d)", p.qp.Num(), p.rank), p.qp.Close())
		}
	}
	d.Add(t.mem.Release())
	d.Note("flag sources", t.flags.Release())
	d.Device(t.cq, t.pd, t.ctx)
	if err := d.Err(); err != nil {
		return fmt.Errorf("ibverbs: release %s port %d: %w", t.dev, t.port, err)
	}
	return nil
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

// Register implements transport.Transport. Host memory is registered with
// ibv_reg_mr. GPU memory with ibv_reg_dmabuf_mr when the caller exported a
// DMA-BUF fd for it (cuMemGetHandleForAddressRange) and the library has the
// call, else (or if that fails) with ibv_reg_mr on the device pointer, which
// works where nvidia-peermem is loaded (see memreg).
func (t *Transport) Register(id transport.BufferID, r transport.Region) error {
	t.gate.Ctl.Lock()
	defer t.gate.Ctl.Unlock()
	var err error
	switch {
	case t.Closed():
		err = t.Err()
	case t.blob != nil:
		err = fmt.Errorf("%w: after Address", transport.ErrInvalid)
	default:
		err = t.mem.Register(id, r)
	}
	if err != nil {
		return fmt.Errorf("ibverbs: register buffer %d on %s port %d: %w", id, t.dev, t.port, err)
	}
	return nil
}

// Address implements transport.Transport. The first call creates one RC QP
// per peer, moves it to INIT and posts the receive for the connect
// handshake, then describes all of it in the blob.
func (t *Transport) Address() ([]byte, error) {
	t.gate.Ctl.Lock()
	defer t.gate.Ctl.Unlock()
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
	for _, r := range t.mem.Sorted() {
		b.Regions = append(b.Regions, blobRegion{ID: r.ID, Addr: r.Addr, Len: r.Len, RKey: r.MR.RKey(), SignalRKey: r.SignalMR.RKey(), Kind: r.Kind})
	}
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
		var err error
		if t.flags, err = memreg.MapScratch(t.pd, t.cfg.World*t.queue*8, verbs.AccessLocalWrite); err != nil {
			return fmt.Errorf("flag sources: %w", err)
		}
	}
	return nil
}

// Connect implements transport.Transport: check every peer's blob, move each
// QP to RTR and RTS, then run a handshake (a zero-byte SEND with the rank as
// immediate, each way) so that every QP is known to reach its peer before
// Connect returns.
func (t *Transport) Connect(ctx context.Context, blobs [][]byte) error {
	t.gate.Ctl.Lock()
	defer t.gate.Ctl.Unlock()
	t.gate.DP.Lock()
	defer t.gate.DP.Unlock()
	if err := session.CheckConnect(&t.Failure, t.connected, t.blob != nil, len(blobs), t.cfg.World); err != nil {
		return fmt.Errorf("ibverbs: connect: %w", err)
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
	if err := connblob.CheckPeer(connblob.Header{Rank: b.Rank, World: b.World}, r, t.cfg.World); err != nil {
		return nil, err
	}
	if b.LinkLayer != t.local.LinkLayer {
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
	p.remote = make(map[transport.BufferID]memreg.Remote, len(b.Regions))
	for _, r := range b.Regions {
		p.remote[r.ID] = memreg.Remote{Addr: r.Addr, Len: r.Len, RKey: r.RKey, SignalKey: r.SignalRKey, Kind: r.Kind}
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
	poll := func() (int, error) {
		n, err := t.cq.Poll(t.wcs)
		if err != nil {
			return 0, fmt.Errorf("handshake: %w", err)
		}
		for i := range t.wcs[:n] {
			if err := t.helloCompletion(&t.wcs[i]); err != nil {
				return 0, err
			}
		}
		return n, nil
	}
	return session.WaitHandshake(ctx, t.cfg.Timeout, poll, func() ([]int, error) {
		return session.Unheard(t.peers), nil
	})
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
	t.gate.DP.Lock()
	defer t.gate.DP.Unlock()
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
		lr := t.mem.Lookup(op.Local)
		rr := p.remote[op.Remote]
		w := verbs.SendWR{
			WRID: id, Opcode: verbs.OpRDMAWrite, LocalAddr: lr.Addr + op.LocalOff, Length: uint32(op.Len), LKey: lr.MR.LKey(),
			RemoteAddr: rr.Addr + op.RemoteOff, RKey: rr.RKey,
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
			RemoteAddr: sr.Addr + op.SignalOff, RKey: sr.SignalKey,
		}
		if p.inline {
			w.Flags |= verbs.SendInline
			w.InlineValue = op.SignalValue
		} else {
			off := (p.rank*t.queue + int(seq%uint64(t.queue))) * 8
			*(*uint64)(unsafe.Pointer(&t.flags.Mem[off])) = op.SignalValue
			w.LocalAddr = t.flags.Addr(off)
			w.LKey = t.flags.MR.LKey()
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
	if op.Peer < 0 || int(op.Peer) >= len(t.peers) || t.peers[op.Peer] == nil {
		return nil, fmt.Errorf("ibverbs: %s op to rank %d: %w: not a peer of rank %d", op.Kind, op.Peer, transport.ErrInvalid, t.cfg.Rank)
	}
	p := t.peers[op.Peer]
	if _, err := memreg.CheckOp(op, t.mem, p.remote, t.maxOp); err != nil {
		return nil, fmt.Errorf("ibverbs: %s op to rank %d: %w", op.Kind, op.Peer, err)
	}
	return p, nil
}

// Poll implements transport.Transport.
func (t *Transport) Poll(done []transport.Completion) (int, error) {
	t.gate.DP.Lock()
	defer t.gate.DP.Unlock()
	if t.gate.Closing {
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
	return t.gate.Close(func() { t.fail(fmt.Errorf("ibverbs: rank %d: %w", t.cfg.Rank, transport.ErrClosed)) }, t.release)
}
