package tcp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mkernel/mkernel/gocore/transport"
)

// Frame types.
const (
	frameWrite       = 1
	frameWriteSignal = 2
	frameAck         = 3 // value: data frames applied so far
	frameBye         = 4
)

// A frame header, little endian:
//
//	0  u8  type        4  u32 remote buffer    8  u64 remote offset   16 u64 length
//	24 u32 flag buffer 28 u32 zero             32 u64 flag offset     40 u64 value
type header [hdrSize]byte

func (h *header) put(typ byte, op *transport.Op) {
	*h = header{}
	h[0] = typ
	binary.LittleEndian.PutUint32(h[4:], uint32(op.Remote))
	binary.LittleEndian.PutUint64(h[8:], op.RemoteOff)
	binary.LittleEndian.PutUint64(h[16:], op.Len)
	binary.LittleEndian.PutUint32(h[24:], uint32(op.SignalBuf))
	binary.LittleEndian.PutUint64(h[32:], op.SignalOff)
	binary.LittleEndian.PutUint64(h[40:], op.SignalValue)
}

func (h *header) putAck(n uint64) {
	*h = header{}
	h[0] = frameAck
	binary.LittleEndian.PutUint64(h[40:], n)
}

// peer is the connection to one rank and both directions' state.
type peer struct {
	t       *Transport
	rank    int
	conn    *net.TCPConn
	remote  map[transport.BufferID]uint64 // the peer's region sizes
	q       uint64
	ring    []transport.Op
	touched bool // Post's scratch

	head   atomic.Uint64 // ops posted (Post)
	sent   atomic.Uint64 // ops written to the socket (writer)
	acked  atomic.Uint64 // ops the peer applied (reader, from acks)
	polled uint64        // ops returned by Poll (Poll)

	applied atomic.Uint64 // data frames from the peer applied here (reader or applier)
	ackSent uint64        // last ack value written (writer)
	bye     atomic.Bool   // the peer closed cleanly
	// byeCause is 1 + the rank whose loss made the peer close (0: a clean close),
	// from its goodbye, so a cascade of closes still names the rank that died.
	byeCause atomic.Int32

	wake chan struct{}

	// writer scratch
	hdrs [maxBatch + 1]header
	iov  net.Buffers
	bufs [][]byte

	// reader scratch
	br      *bufio.Reader
	rhdr    header
	unacked bool // frames applied since the writer was last asked to ack

	faults *faultState // WithFaults only
}

func (t *Transport) newPeer(r int, c *net.TCPConn, remote map[transport.BufferID]uint64) *peer {
	p := &peer{
		t: t, rank: r, conn: c, remote: remote,
		q:    uint64(t.o.queue),
		ring: make([]transport.Op, t.o.queue),
		wake: make(chan struct{}, 1),
		bufs: make([][]byte, 0, 2*maxBatch+1),
		br:   bufio.NewReaderSize(c, readBuffer),
	}
	if t.o.faults {
		p.faults = newFaultState(p, t.o.seed+uint64(t.cfg.Rank)*1000+uint64(r), t.o.maxDelay)
	}
	return p
}

func (p *peer) start() {
	p.t.wg.Add(2)
	go p.writeLoop()
	go p.readLoop()
	if p.faults != nil {
		p.t.wg.Add(1)
		go p.faults.applyLoop()
	}
}

func (p *peer) wakeWriter() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *peer) stopping() bool {
	select {
	case <-p.t.stopping:
		return true
	default:
		return false
	}
}

// lost fails the transport because the connection to p broke, unless we are closing.
func (p *peer) lost(what string, err error) {
	if p.stopping() {
		return
	}
	kind := transport.ErrPeerGone
	if errors.Is(err, os.ErrDeadlineExceeded) {
		kind = transport.ErrTimeout
	}
	p.t.lost.CompareAndSwap(0, int32(p.rank)+1)
	p.t.fail(&transport.RankLostError{Rank: p.rank, Kind: kind, Err: err,
		Seen: fmt.Sprintf("tcp, seen by rank %d: %s", p.t.cfg.Rank, what)})
}

// writeLoop sends pending ops (and acks) in batches of one writev each.
func (p *peer) writeLoop() {
	defer p.t.wg.Done()
	defer p.conn.Close()
	for {
		select {
		case <-p.wake:
		case <-p.t.stopping:
		}
		if p.stopping() {
			p.goodbye()
			return
		}
		for {
			s, h, ap := p.sent.Load(), p.head.Load(), p.applied.Load()
			if s == h && ap == p.ackSent {
				break
			}
			bufs := p.bufs[:0]
			k := 0
			if ap != p.ackSent {
				p.hdrs[0].putAck(ap)
				bufs = append(bufs, p.hdrs[0][:])
				k = 1
			}
			n := uint64(0)
			for ; s+n < h && k < len(p.hdrs); n++ {
				op := &p.ring[(s+n)%p.q]
				typ := byte(frameWrite)
				if op.Kind == transport.OpWriteSignal {
					typ = frameWriteSignal
				}
				p.hdrs[k].put(typ, op)
				bufs = append(bufs, p.hdrs[k][:])
				if op.Len > 0 {
					bufs = append(bufs, p.t.regions[op.Local][op.LocalOff:op.LocalOff+op.Len])
				}
				k++
			}
			p.iov = bufs
			_ = p.conn.SetWriteDeadline(time.Now().Add(p.t.cfg.Timeout))
			if _, err := p.iov.WriteTo(p.conn); err != nil {
				p.lost("write", err)
				return
			}
			p.ackSent = ap
			p.sent.Store(s + n)
		}
	}
}

func (p *peer) goodbye() {
	if p.bye.Load() {
		return
	}
	var h header
	h[0] = frameBye
	binary.LittleEndian.PutUint32(h[4:], uint32(p.t.lost.Load()))
	_ = p.conn.SetWriteDeadline(time.Now().Add(byeTimeout))
	_, _ = p.conn.Write(h[:])
	_ = p.conn.CloseWrite()
}

// readLoop applies the peer's frames.
func (p *peer) readLoop() {
	defer p.t.wg.Done()
	for {
		if _, err := io.ReadFull(p.br, p.rhdr[:]); err != nil {
			if !p.bye.Load() {
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					p.lost("connection closed without goodbye", err)
				} else {
					p.lost("read", err)
				}
			}
			if p.faults != nil {
				p.faults.stop()
			}
			return
		}
		err := p.frame()
		// Coalesce acks: ask for one only when no further frame is already buffered (the
		// last frame of a burst acknowledges all of it; a partly buffered frame is still
		// being sent, in full, so the ack follows soon).
		if p.unacked && p.br.Buffered() == 0 {
			p.unacked = false
			p.wakeWriter()
		}
		if err != nil {
			p.lost("bad frame", err)
			p.conn.Close()
			if p.faults != nil {
				p.faults.stop()
			}
			return
		}
		if p.bye.Load() {
			if p.faults != nil {
				p.faults.stop()
			}
			return
		}
	}
}

func (p *peer) frame() error {
	h := &p.rhdr
	switch h[0] {
	case frameAck:
		v := binary.LittleEndian.Uint64(h[40:])
		// The ack may overtake the writer's own bookkeeping (sent), never what was posted.
		if v < p.acked.Load() || v > p.head.Load() {
			return fmt.Errorf("%w: ack of %d ops, %d posted", transport.ErrProtocol, v, p.head.Load())
		}
		p.acked.Store(v)
		return nil
	case frameBye:
		p.byeCause.Store(int32(binary.LittleEndian.Uint32(h[4:])))
		p.bye.Store(true)
		return nil
	case frameWrite, frameWriteSignal:
	default:
		return fmt.Errorf("%w: frame type %d", transport.ErrProtocol, h[0])
	}
	buf := transport.BufferID(binary.LittleEndian.Uint32(h[4:]))
	off, n := binary.LittleEndian.Uint64(h[8:]), binary.LittleEndian.Uint64(h[16:])
	var dst []byte
	if n > 0 {
		r, ok := p.t.regions[buf]
		if !ok || !transport.InRange(off, n, uint64(len(r))) {
			return fmt.Errorf("%w: write to buffer %d [%d, +%d) outside the registered regions", transport.ErrProtocol, buf, off, n)
		}
		dst = r[off : off+n]
	}
	var flag *uint64
	if h[0] == frameWriteSignal {
		fb := transport.BufferID(binary.LittleEndian.Uint32(h[24:]))
		foff := binary.LittleEndian.Uint64(h[32:])
		r, ok := p.t.regions[fb]
		if !ok || foff%8 != 0 || !transport.InRange(foff, 8, uint64(len(r))) {
			return fmt.Errorf("%w: signal word %d:%d outside the registered regions", transport.ErrProtocol, fb, foff)
		}
		flag = (*uint64)(unsafe.Pointer(&r[foff]))
	}
	value := binary.LittleEndian.Uint64(h[40:])
	if p.faults != nil {
		return p.faults.stage(dst, flag, value)
	}
	if _, err := io.ReadFull(p.br, dst); err != nil {
		return fmt.Errorf("payload of %d bytes: %w", n, err)
	}
	if flag != nil {
		storeMax(flag, value)
	}
	p.applied.Add(1)
	p.unacked = true
	return nil
}

// storeMax raises *flag to v (Go atomics are sequentially consistent: a release store).
func storeMax(flag *uint64, v uint64) {
	for {
		old := atomic.LoadUint64(flag)
		if old >= v || atomic.CompareAndSwapUint64(flag, old, v) {
			return
		}
	}
}
