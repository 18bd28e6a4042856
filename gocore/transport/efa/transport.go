package efa

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
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
	maxBatch  = 64  // ops per ibv_wr_start/ibv_wr_complete batch
	maxPoll   = 256 // completions per ibv_poll_cq call
	recvSlot  = 64  // bytes per receive buffer (a descriptor is descSize)
	rnrRetry  = 7   // retry receiver-not-ready forever, where the device can
	efaPort   = 1   // EFA devices have one port
	sendOpsEx = verbs.QPExWithRDMAWrite | verbs.QPExWithRDMAWriteWithImm | verbs.QPExWithSend

	// Work request IDs: bit 63 a handshake SEND, bit 62 a receive (its
	// buffer index below), else rank << 40 | seq << 2 | part, part 0 the
	// data WR and 1 the descriptor SEND.
	wrHello   = uint64(1) << 63
	wrRecv    = uint64(1) << 62
	wrSeqMask = uint64(1)<<38 - 1
	partDesc  = 1

	watchdogEvery = 1024
)

// Transport is one rank's SRD endpoint: one QP for all peers, an address
// handle per peer.
type Transport struct {
	cfg  transport.Config
	o    options
	log  *zap.Logger
	lib  *verbs.Library
	dev  string
	port uint8

	ctx       *verbs.Context
	pd        *verbs.PD
	cq        *verbs.CQ
	qp        *verbs.QP
	gid       verbs.GID
	qkey      uint32
	caps      verbs.EFAAttr
	queue     int    // ops in flight per peer
	maxOp     uint64 // bytes per op
	maxSendWR int    // send queue entries
	winSize   int

	gate      session.Gate  // the control and data path locks, Close
	mem       *memreg.Table // under gate.Ctl
	blob      []byte
	connected bool

	peers []*peer
	recv  memreg.Scratch // recvN buffers of recvSlot bytes
	recvN int
	desc  memreg.Scratch // send descriptors: World*queue op slots, then World hello slots

	// The data path, under gate.DP.
	wrs         []verbs.SendWR
	batch       []batchRef
	wcs         []verbs.WC
	reposts     []verbs.RecvWR
	outstanding int                    // send WRs posted and not completed
	synth       []transport.Completion // ops failed without a completion
	polls       uint64
	epoch       time.Time

	// Arrivals of signals with data, by which half came first; SRD
	// reorders, so on a busy fabric both grow (diagnostics, and the tests'
	// proof that both paths ran).
	dataFirst, descFirst atomic.Uint64

	transport.Failure // the first error (Err) and Done
}

var _ transport.Transport = (*Transport)(nil)

type slot struct {
	busy   bool
	left   uint8 // work requests not yet completed
	seq    uint64
	cookie uint64
	posted int64
}

type batchRef struct {
	p   *peer
	seq uint64
}

type peer struct {
	rank      int
	ah        *verbs.AH
	qpn, qkey uint32
	remote    map[transport.BufferID]memreg.Remote
	ring      []slot
	seq       uint64 // next op
	win       window
	err       error

	helloSent, helloRecv bool
}

// Handshake implements session.Handshaker.
func (p *peer) Handshake() (int, bool) { return p.rank, p.helloSent && p.helloRecv }

// Open creates rank cfg.Rank's endpoint on the placement's first EFA device
// (or WithDevice's). It fails with ErrNotSupported when libibverbs or libefa
// is missing, the device is absent, or it cannot do RDMA write.
func Open(_ context.Context, cfg transport.Config, opts ...Option) (*Transport, error) {
	o := defaultOptions()
	for _, f := range opts {
		f(&o)
	}
	if cfg.World < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.World || cfg.World > 1<<16 || (cfg.Node != nil && len(cfg.Node) != cfg.World) {
		return nil, fmt.Errorf("efa: open: %w: rank %d of %d (at most 65536 ranks)", transport.ErrInvalid, cfg.Rank, cfg.World)
	}
	if o.queue < 1 || o.queue > 1<<14 || o.recvPool < 1 {
		return nil, fmt.Errorf("efa: open: %w: queue %d, receive pool %d", transport.ErrInvalid, o.queue, o.recvPool)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = transport.DefaultTimeout
	}
	dev, port := o.device, o.port
	if dev == "" {
		nic, ok := cfg.Placement.FirstNIC(topology.KindEFA)
		if !ok {
			return nil, fmt.Errorf("efa: open rank %d: %w: the placement chose no EFA NIC", cfg.Rank, transport.ErrNotSupported)
		}
		dev, port = nic.Name, nic.Port
	}
	if port != efaPort {
		return nil, fmt.Errorf("efa: open rank %d: %w: port %d of %s (EFA has port 1 only)", cfg.Rank, transport.ErrInvalid, port, dev)
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	t := &Transport{
		cfg:     cfg,
		o:       o,
		log:     log.With(zap.String("transport", Name), zap.Int("rank", cfg.Rank), zap.String("device", dev)),
		dev:     dev,
		port:    uint8(port),
		peers:   make([]*peer, cfg.World),
		wrs:     make([]verbs.SendWR, 0, 2*maxBatch),
		batch:   make([]batchRef, 0, maxBatch),
		wcs:     make([]verbs.WC, maxPoll),
		reposts: make([]verbs.RecvWR, 0, maxPoll),
		epoch:   time.Now(),
	}
	if err := t.open(); err != nil {
		cerr := t.release()
		return nil, errors.Join(fmt.Errorf("efa: open rank %d on %s: %w", cfg.Rank, dev, err), cerr)
	}
	t.log.Info("efa endpoint open", zap.Stringer("gid", t.gid), zap.Uint32("qpn", t.qp.Num()),
		zap.Uint32("device_caps", t.caps.DeviceCaps), zap.Int("queue", t.queue), zap.Int("recv_pool", t.recvN))
	return t, nil
}

func (t *Transport) open() error {
	var err error
	if t.lib, err = verbs.Load(t.o.library); err != nil {
		return err
	}
	if err = t.lib.LoadEFA(t.o.efaLibrary); err != nil {
		return err
	}
	if !t.lib.Features().QPEx {
		return fmt.Errorf("libibverbs has no ibv_qp_to_qp_ex (rdma-core too old): %w", transport.ErrNotSupported)
	}
	if t.ctx, err = t.lib.Open(t.dev); err != nil {
		return err
	}
	da, err := t.ctx.QueryDevice()
	if err != nil {
		return err
	}
	pa, err := t.ctx.QueryPort(efaPort)
	if err != nil {
		return err
	}
	if pa.State != verbs.PortActive {
		return fmt.Errorf("port is %v, not ACTIVE: %w", pa.State, transport.ErrNotSupported)
	}
	if t.caps, err = t.ctx.EFAQueryDevice(); err != nil {
		return fmt.Errorf("not an EFA device? %w", err)
	}
	if t.caps.DeviceCaps&verbs.EFACapRDMAWrite == 0 {
		return fmt.Errorf("device cannot RDMA write (efadv device_caps %#x; needs an EFA generation with RDMA write and rdma-core >= 46): %w",
			t.caps.DeviceCaps, transport.ErrNotSupported)
	}
	if t.gid, err = t.ctx.QueryGID(efaPort, 0); err != nil {
		return err
	}
	t.maxOp = uint64(t.caps.MaxRDMASize)
	if pa.MaxMsgSize > 0 {
		t.maxOp = min(t.maxOp, uint64(pa.MaxMsgSize))
	}
	if t.maxOp == 0 {
		return fmt.Errorf("device reports a maximum RDMA size of 0: %w", transport.ErrNotSupported)
	}

	npeers := 0
	for r := range t.cfg.World {
		if t.cfg.Peer(r) {
			npeers++
		}
	}
	sq := int(t.caps.MaxSQWR)
	if da.MaxQPWR > 0 {
		sq = min(sq, da.MaxQPWR)
	}
	t.maxSendWR = min(sq, max(1, npeers)*(2*t.o.queue+1))
	t.queue = min(t.o.queue, max(1, t.maxSendWR/2))
	t.winSize = 1 << bits.Len(uint(4*t.queue-1))
	t.recvN = min(t.o.recvPool, int(t.caps.MaxRQWR))
	if da.MaxQPWR > 0 {
		t.recvN = min(t.recvN, da.MaxQPWR)
	}
	if t.maxSendWR < 2 || t.recvN < 1 {
		return fmt.Errorf("device queues too small (max_sq_wr %d, max_rq_wr %d): %w", t.caps.MaxSQWR, t.caps.MaxRQWR, transport.ErrNotSupported)
	}
	var q [4]byte
	if _, err := rand.Read(q[:]); err != nil {
		return fmt.Errorf("qkey: %w", err)
	}
	t.qkey = binary.LittleEndian.Uint32(q[:])&0x7fffffff | 1 // no controlled qkeys (bit 31), never 0

	if t.pd, err = t.ctx.AllocPD(); err != nil {
		return err
	}
	t.mem = memreg.NewTable(t.pd, connblob.MaxRegions, false, t.log)
	if t.cq, err = t.ctx.CreateCQ(t.maxSendWR + t.recvN); err != nil {
		return err
	}
	if t.qp, err = t.pd.CreateQP(verbs.QPInit{
		Kind: verbs.QPKindSRD, MaxSendWR: uint32(t.maxSendWR), MaxRecvWR: uint32(t.recvN), MaxSendSGE: 1, MaxRecvSGE: 1,
		SendOps: sendOpsEx, EFASL: t.o.sl,
	}, t.cq, t.cq); err != nil {
		return err
	}
	t.maxSendWR = min(t.maxSendWR, int(t.qp.Caps().MaxSendWR))
	for _, s := range srdStates(t.qkey, t.caps.DeviceCaps&verbs.EFACapRNRRetry != 0) {
		if err := t.qp.Modify(s.attr, s.mask); err != nil {
			return err
		}
	}
	if t.recv, err = memreg.MapScratch(t.pd, t.recvN*recvSlot, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("receive buffers: %w", err)
	}
	if t.desc, err = memreg.MapScratch(t.pd, (t.cfg.World*t.queue+t.cfg.World)*descSize, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("descriptor buffers: %w", err)
	}
	wrs := make([]verbs.RecvWR, t.recvN)
	for i := range wrs {
		wrs[i] = t.recvWR(i)
	}
	if _, err := t.qp.PostRecv(wrs); err != nil {
		return fmt.Errorf("post %d receives: %w", t.recvN, err)
	}
	return nil
}

type srdState struct {
	attr verbs.QPAttr
	mask verbs.QPAttrMask
}

// srdStates is the SRD QP's RESET → INIT → RTR → RTS sequence: the UD-like
// attribute set (port, pkey index and qkey at INIT; nothing at RTR; the
// send PSN at RTS), plus infinite RNR retry where the device supports it.
func srdStates(qkey uint32, rnr bool) []srdState {
	rts := srdState{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0}, verbs.QPAttrState | verbs.QPAttrSQPSN}
	if rnr {
		rts.attr.RNRRetry = rnrRetry
		rts.mask |= verbs.QPAttrRNRRetry
	}
	return []srdState{
		{verbs.QPAttr{State: verbs.QPStateInit, PKeyIndex: 0, Port: efaPort, QKey: qkey},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState},
		rts,
	}
}

func (t *Transport) recvWR(i int) verbs.RecvWR {
	return verbs.RecvWR{WRID: wrRecv | uint64(i), Addr: t.recv.Addr(i * recvSlot), Length: recvSlot, LKey: t.recv.MR.LKey()}
}

// release destroys every verbs object in reverse order of creation: address
// handles, the QP, MRs, the CQ, the PD and the device.
func (t *Transport) release() error {
	var d session.Teardown
	for _, p := range t.peers {
		if p != nil && p.ah != nil {
			d.Note(fmt.Sprintf("destroy address handle of rank %d", p.rank), p.ah.Close())
		}
	}
	if t.qp != nil {
		d.Note("destroy QP", t.qp.Close())
	}
	d.Add(t.mem.Release())
	d.Note("receive buffers", t.recv.Release())
	d.Note("descriptor buffers", t.desc.Release())
	d.Device(t.cq, t.pd, t.ctx)
	if err := d.Err(); err != nil {
		return fmt.Errorf("efa: release %s: %w", t.dev, err)
	}
	return nil
}

// Name implements transport.Transport.
func (t *Transport) Name() string { return Name }

// Caps implements transport.Transport: SRD does not keep writes in order.
func (t *Transport) Caps() transport.Caps {
	return transport.Caps{OrderedWrites: false, MaxOpBytes: t.maxOp, MaxInflight: t.queue, DeviceMemory: true}
}

// Device returns the EFA device the endpoint uses.
func (t *Transport) Device() string { return t.dev }

// Arrivals returns how many signals with data this endpoint applied when
// their data arrived after their descriptor, and when before.
func (t *Transport) Arrivals() (descriptorFirst, dataFirst uint64) {
	return t.descFirst.Load(), t.dataFirst.Load()
}

// DeviceCaps returns efadv_query_device's device_caps.
func (t *Transport) DeviceCaps() uint32 { return t.caps.DeviceCaps }

// Register implements transport.Transport; see memreg for the DMA-BUF and
// nvidia-peermem paths of GPU memory. Only host regions can hold flag
// words: the receiver stores flags with the CPU.
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
		return fmt.Errorf("efa: register buffer %d on %s: %w", id, t.dev, err)
	}
	return nil
}

// Address implements transport.Transport.
func (t *Transport) Address() ([]byte, error) {
	t.gate.Ctl.Lock()
	defer t.gate.Ctl.Unlock()
	if t.Closed() {
		return nil, fmt.Errorf("efa: address: %w", t.Err())
	}
	if t.blob != nil {
		return t.blob, nil
	}
	b := blob{Rank: t.cfg.Rank, World: t.cfg.World, GID: t.gid, QPN: t.qp.Num(), QKey: t.qkey}
	for _, r := range t.mem.Sorted() {
		b.Regions = append(b.Regions, blobRegion{ID: r.ID, Addr: r.Addr, Len: r.Len, RKey: r.MR.RKey(), Kind: r.Kind})
	}
	data, err := b.encode(t.cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("efa: address of rank %d: %w", t.cfg.Rank, err)
	}
	t.blob = data
	return data, nil
}

// Connect implements transport.Transport: check every peer's blob, create
// an address handle per peer, then exchange a handshake descriptor with
// every peer so that each is known reachable before Connect returns.
func (t *Transport) Connect(ctx context.Context, blobs [][]byte) error {
	t.gate.Ctl.Lock()
	defer t.gate.Ctl.Unlock()
	t.gate.DP.Lock()
	defer t.gate.DP.Unlock()
	if err := session.CheckConnect(&t.Failure, t.connected, t.blob != nil, len(blobs), t.cfg.World); err != nil {
		return fmt.Errorf("efa: connect: %w", err)
	}
	decoded := make([]*blob, t.cfg.World)
	for r := range t.cfg.World {
		if !t.cfg.Peer(r) {
			continue
		}
		b, err := decodeBlob(blobs[r], t.cfg.Key)
		if err == nil {
			err = connblob.CheckPeer(connblob.Header{Rank: b.Rank, World: b.World}, r, t.cfg.World)
		}
		if err != nil {
			return fmt.Errorf("efa: connect rank %d to rank %d via %s: %w", t.cfg.Rank, r, t.dev, err)
		}
		decoded[r] = b
	}
	for r, b := range decoded {
		if b == nil {
			continue
		}
		ah, err := t.pd.CreateAH(verbs.AHAttr{IsGlobal: true, DGID: b.GID, Port: efaPort})
		if err != nil {
			return fmt.Errorf("efa: connect rank %d to rank %d via %s: address handle for GID %s: %w", t.cfg.Rank, r, t.dev, b.GID, err)
		}
		p := &peer{rank: r, ah: ah, qpn: b.QPN, qkey: b.QKey, ring: make([]slot, t.queue), win: newWindow(t.winSize),
			remote: make(map[transport.BufferID]memreg.Remote, len(b.Regions))}
		for _, rr := range b.Regions {
			p.remote[rr.ID] = memreg.Remote{Addr: rr.Addr, Len: rr.Len, RKey: rr.RKey, SignalKey: rr.RKey, Kind: rr.Kind}
		}
		t.peers[r] = p
	}
	if err := t.handshake(ctx); err != nil {
		return fmt.Errorf("efa: connect rank %d via %s: %w", t.cfg.Rank, t.dev, err)
	}
	t.connected = true
	return nil
}

func (t *Transport) handshake(ctx context.Context) error {
	wrs := t.wrs[:0]
	for _, p := range t.peers {
		if p == nil {
			continue
		}
		off := (t.cfg.World*t.queue + p.rank) * descSize
		d := descriptor{kind: descHello, rank: uint32(t.cfg.Rank)}
		d.put(t.desc.Mem[off:])
		wrs = append(wrs, verbs.SendWR{
			WRID: wrHello | uint64(p.rank), Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
			LocalAddr: t.desc.Addr(off), Length: descSize, LKey: t.desc.MR.LKey(),
			AH: p.ah.Handle(), RemoteQPN: p.qpn, RemoteQKey: p.qkey,
		})
		if len(wrs) == cap(wrs) {
			if err := t.qp.PostSendEx(wrs); err != nil {
				return fmt.Errorf("handshake: %w", err)
			}
			t.outstanding += len(wrs)
			wrs = wrs[:0]
		}
	}
	if err := t.qp.PostSendEx(wrs); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	t.outstanding += len(wrs)
	return session.WaitHandshake(ctx, t.cfg.Timeout, func() (int, error) { return t.poll(nil) }, func() ([]int, error) {
		return session.Unheard(t.peers), t.Err()
	})
}

// Post implements transport.Transport. A write is one RDMA WRITE; a
// write-and-signal is an RDMA WRITE WITH IMMEDIATE of the data plus a
// descriptor SEND (or the SEND alone without data), see signal.go. All WRs
// of a call go to the device in ibv_wr_start/ibv_wr_complete batches.
func (t *Transport) Post(ops []transport.Op) (int, error) {
	t.gate.DP.Lock()
	defer t.gate.DP.Unlock()
	if err := t.Err(); err != nil {
		return 0, err
	}
	if !t.connected {
		return 0, fmt.Errorf("efa: post: %w: not connected", transport.ErrInvalid)
	}
	t.wrs, t.batch = t.wrs[:0], t.batch[:0]
	start := 0 // index in ops of the batch's first op
	for i := range ops {
		op := &ops[i]
		p, err := t.check(op)
		if err != nil {
			if ferr := t.flush(); ferr != nil {
				return start, ferr
			}
			return i, err
		}
		need := 1
		if op.Kind == transport.OpWriteSignal && op.Len > 0 {
			need = 2
		}
		if len(t.wrs)+need > cap(t.wrs) || len(t.batch) == cap(t.batch) {
			if err := t.flush(); err != nil {
				return start, err
			}
			start = i
		}
		if p.ring[p.seq%uint64(t.queue)].busy || t.outstanding+len(t.wrs)+need > t.maxSendWR {
			if err := t.flush(); err != nil {
				return start, err
			}
			return i, nil // back-pressure
		}
		t.appendWRs(p, op, need)
	}
	if err := t.flush(); err != nil {
		return start, err
	}
	return len(ops), nil
}

func (t *Transport) appendWRs(p *peer, op *transport.Op, need int) {
	seq := p.seq
	p.seq++
	s := &p.ring[seq%uint64(t.queue)]
	*s = slot{busy: true, left: uint8(need), seq: seq, cookie: op.Cookie, posted: int64(time.Since(t.epoch))}
	t.batch = append(t.batch, batchRef{p: p, seq: seq})
	id := uint64(p.rank)<<40 | (seq&wrSeqMask)<<2
	if op.Len > 0 {
		lr := t.mem.Lookup(op.Local)
		rr := p.remote[op.Remote]
		w := verbs.SendWR{
			WRID: id, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
			LocalAddr: lr.Addr + op.LocalOff, Length: uint32(op.Len), LKey: lr.MR.LKey(),
			RemoteAddr: rr.Addr + op.RemoteOff, RKey: rr.RKey, AH: p.ah.Handle(), RemoteQPN: p.qpn, RemoteQKey: p.qkey,
		}
		if op.Kind == transport.OpWriteSignal {
			w.Opcode = verbs.OpRDMAWriteWithImm
			w.Imm = token(t.cfg.Rank, uint16(seq))
		}
		t.wrs = append(t.wrs, w)
	}
	if op.Kind == transport.OpWriteSignal {
		off := (p.rank*t.queue + int(seq%uint64(t.queue))) * descSize
		d := descriptor{kind: descSignal, hasData: op.Len > 0, seq: uint16(seq), rank: uint32(t.cfg.Rank),
			buf: uint32(op.SignalBuf), off: op.SignalOff, value: op.SignalValue}
		d.put(t.desc.Mem[off:])
		t.wrs = append(t.wrs, verbs.SendWR{
			WRID: id | partDesc, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
			LocalAddr: t.desc.Addr(off), Length: descSize, LKey: t.desc.MR.LKey(),
			AH: p.ah.Handle(), RemoteQPN: p.qpn, RemoteQKey: p.qkey,
		})
	}
}

// flush posts the batch. ibv_wr_complete takes all of it or none; on failure
// the batch's ops are taken back and the transport fails.
func (t *Transport) flush() error {
	if len(t.wrs) == 0 {
		return nil
	}
	err := t.qp.PostSendEx(t.wrs)
	if err == nil {
		t.outstanding += len(t.wrs)
		t.wrs, t.batch = t.wrs[:0], t.batch[:0]
		return nil
	}
	for i := len(t.batch) - 1; i >= 0; i-- {
		b := t.batch[i]
		b.p.ring[b.seq%uint64(t.queue)] = slot{}
		b.p.seq = b.seq
	}
	t.wrs, t.batch = t.wrs[:0], t.batch[:0]
	err = fmt.Errorf("efa: post on %s: %w", t.dev, err)
	t.fail(err)
	return err
}

// check validates op; errors match ErrInvalid (ErrNotSupported for a flag
// in a peer's GPU memory) and leave the transport working.
func (t *Transport) check(op *transport.Op) (*peer, error) {
	bad := func(err error) error {
		return fmt.Errorf("efa: %s op to rank %d: %w", op.Kind, op.Peer, err)
	}
	if op.Peer < 0 || int(op.Peer) >= len(t.peers) || t.peers[op.Peer] == nil {
		return nil, bad(fmt.Errorf("%w: not a peer of rank %d", transport.ErrInvalid, t.cfg.Rank))
	}
	p := t.peers[op.Peer]
	sr, err := memreg.CheckOp(op, t.mem, p.remote, t.maxOp)
	if err != nil {
		return nil, bad(err)
	}
	if op.Kind == transport.OpWriteSignal && sr.Kind != memreg.Host {
		return nil, bad(fmt.Errorf("%w: flag buffer %d is GPU memory; on EFA the receiver stores flags with the CPU, so flags must be in host memory", transport.ErrNotSupported, op.SignalBuf))
	}
	return p, nil
}

// Poll implements transport.Transport.
func (t *Transport) Poll(done []transport.Completion) (int, error) {
	t.gate.DP.Lock()
	defer t.gate.DP.Unlock()
	if t.gate.Closing || len(done) == 0 || !t.connected {
		return 0, t.Err()
	}
	k := 0
	for k < len(done) && len(t.synth) > 0 {
		done[k] = t.synth[0]
		t.synth = t.synth[1:]
		k++
	}
	if k < len(done) {
		n, err := t.poll(done[k:])
		if err != nil {
			return k, err
		}
		k += n
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

// poll reads completions, applies arrivals, reposts receive buffers, and
// writes finished ops to done (nil during the handshake, when no op is in
// flight). It returns how many ops it finished; dp is held.
func (t *Transport) poll(done []transport.Completion) (int, error) {
	want := len(t.wcs)
	if done != nil {
		want = min(want, len(done))
	}
	n, err := t.cq.Poll(t.wcs[:want])
	if err != nil {
		err = fmt.Errorf("efa: poll CQ of %s: %w", t.dev, err)
		t.fail(err)
		return 0, err
	}
	k := 0
	t.reposts = t.reposts[:0]
	for i := range t.wcs[:n] {
		wc := &t.wcs[i]
		switch {
		case wc.WRID&wrRecv != 0:
			t.onRecv(wc)
		case wc.WRID&wrHello != 0:
			t.outstanding--
			r := int(wc.WRID & 0xffff)
			if p := t.peerOf(r); p != nil {
				if wc.Status != verbs.WCSuccess {
					t.failPeer(p, t.wcError(p, wc, "handshake with"))
				} else {
					p.helloSent = true
				}
			}
		default:
			t.outstanding--
			if c, ok := t.onSend(wc); ok && done != nil {
				done[k] = c
				k++
			}
		}
	}
	if len(t.reposts) > 0 {
		if _, err := t.qp.PostRecv(t.reposts); err != nil {
			err = fmt.Errorf("efa: repost %d receives on %s: %w", len(t.reposts), t.dev, err)
			t.fail(err)
			return k, err
		}
	}
	return k, nil
}

func (t *Transport) peerOf(r int) *peer {
	if r < 0 || r >= len(t.peers) {
		return nil
	}
	return t.peers[r]
}

// onSend accounts one send completion and returns the op it finishes.
func (t *Transport) onSend(wc *verbs.WC) (transport.Completion, bool) {
	p := t.peerOf(int(wc.WRID >> 40))
	if p == nil {
		t.fail(fmt.Errorf("efa: %w: completion %#x names no peer", transport.ErrProtocol, wc.WRID))
		return transport.Completion{}, false
	}
	seq := wc.WRID >> 2 & wrSeqMask
	s := &p.ring[seq%uint64(t.queue)]
	if !s.busy || s.seq&wrSeqMask != seq {
		return transport.Completion{}, false // an op already failed by the watchdog
	}
	if wc.Status != verbs.WCSuccess {
		// failPeer completes this op and every other of p's, with the error.
		t.failPeer(p, t.wcError(p, wc, "write to"))
		return transport.Completion{}, false
	}
	s.left--
	if s.left > 0 {
		return transport.Completion{}, false
	}
	c := transport.Completion{Cookie: s.cookie}
	*s = slot{}
	return c, true
}

// onRecv handles an arrival and queues its buffer for reposting.
func (t *Transport) onRecv(wc *verbs.WC) {
	i := int(wc.WRID &^ wrRecv)
	if i >= t.recvN {
		t.fail(fmt.Errorf("efa: %w: receive completion %#x", transport.ErrProtocol, wc.WRID))
		return
	}
	if wc.Status != verbs.WCSuccess {
		t.fail(fmt.Errorf("efa: receive on %s: %v (vendor error %#x): %w", t.dev, wc.Status, wc.VendorErr, transport.ErrProtocol))
		return
	}
	t.reposts = append(t.reposts, t.recvWR(i))
	if wc.Opcode == verbs.WCRecvRDMAWithImm {
		r, seq := splitToken(wc.Imm)
		p := t.peerOf(r)
		if p == nil {
			t.fail(fmt.Errorf("efa: %w: data with signal token %#x from no peer", transport.ErrProtocol, wc.Imm))
			return
		}
		d, ready, err := p.win.data(seq)
		if err != nil {
			t.failPeer(p, fmt.Errorf("efa: signal from rank %d via %s: %w: %w", r, t.dev, err, transport.ErrProtocol))
			return
		}
		if ready {
			t.descFirst.Add(1)
			t.apply(p, &d)
		}
		return
	}
	d, ok := parseDescriptor(t.recv.Mem[i*recvSlot:(i+1)*recvSlot], wc.ByteLen)
	p := t.peerOf(int(d.rank))
	if !ok || p == nil {
		t.fail(fmt.Errorf("efa: %w: malformed message of %d bytes from QP %d on %s", transport.ErrProtocol, wc.ByteLen, wc.SrcQP, t.dev))
		return
	}
	switch {
	case d.kind == descHello:
		p.helloRecv = true
	case !d.hasData:
		t.apply(p, &d)
	default:
		ready, err := p.win.descriptor(d)
		if err != nil {
			t.failPeer(p, fmt.Errorf("efa: signal from rank %d via %s: %w: %w", p.rank, t.dev, err, transport.ErrProtocol))
			return
		}
		if ready {
			t.dataFirst.Add(1)
			t.apply(p, &d)
		}
	}
}

// apply stores a signal's value into the local flag word.
func (t *Transport) apply(p *peer, d *descriptor) {
	r := t.mem.Lookup(transport.BufferID(d.buf))
	if r == nil || r.Mem == nil || d.off%8 != 0 || !transport.InRange(d.off, 8, r.Len) {
		t.failPeer(p, fmt.Errorf("efa: signal from rank %d via %s names flag %d of buffer %d, not a host flag word here: %w",
			p.rank, t.dev, d.off, d.buf, transport.ErrProtocol))
		return
	}
	storeMax((*uint64)(unsafe.Pointer(&r.Mem[d.off])), d.value)
}

// wcError turns a failed completion into an error naming the peer and the
// device, matching the sentinel of its cause.
func (t *Transport) wcError(p *peer, wc *verbs.WC, what string) error {
	cause := transport.ErrProtocol
	switch wc.Status {
	case verbs.WCRetryExcErr, verbs.WCRNRRetryExcErr, verbs.WCRespTimeoutErr, verbs.WCRemAbortErr, verbs.WCWRFlushErr:
		cause = transport.ErrPeerGone
	}
	return fmt.Errorf("efa: %s rank %d via %s: %v (vendor error %#x): %w", what, p.rank, t.dev, wc.Status, wc.VendorErr, cause)
}

// watchdog fails a peer whose oldest op has waited longer than
// Config.Timeout; its ops in flight complete with that error.
func (t *Transport) watchdog() {
	now := int64(time.Since(t.epoch))
	for _, p := range t.peers {
		if p == nil || p.err != nil {
			continue
		}
		for i := range p.ring {
			if s := &p.ring[i]; s.busy && time.Duration(now-s.posted) > t.cfg.Timeout {
				t.failPeer(p, fmt.Errorf("efa: write to rank %d via %s unfinished after %v: %w",
					p.rank, t.dev, time.Duration(now-s.posted).Round(time.Millisecond), transport.ErrTimeout))
				break
			}
		}
	}
}

// failPeer records why p failed and fails the transport. The QP serves
// every peer, so it stays up; p's ops in flight are completed now, with the
// error, and their late completions ignored.
func (t *Transport) failPeer(p *peer, err error) {
	if p.err != nil {
		return
	}
	p.err = err
	t.fail(err)
	for i := range p.ring {
		if s := &p.ring[i]; s.busy {
			t.synth = append(t.synth, transport.Completion{Cookie: s.cookie, Err: err})
			*s = slot{}
		}
	}
}

func (t *Transport) fail(err error) {
	if t.Fail(err) {
		t.log.Error("efa transport failed", zap.Error(err))
	}
}

// Close implements transport.Transport: it fails the transport with
// ErrClosed (unless it already failed), waits for Post or Poll to return,
// and destroys address handles, the QP, MRs, the CQ, the PD and the device
// context, in that order. Later calls return nil.
func (t *Transport) Close() error {
	return t.gate.Close(func() { t.fail(fmt.Errorf("efa: rank %d: %w", t.cfg.Rank, transport.ErrClosed)) }, t.release)
}
