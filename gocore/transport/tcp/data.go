package tcp

import (
	"fmt"

	"github.com/mkernel/mkernel/gocore/transport"
)

func (t *Transport) check(op *transport.Op) (*peer, error) {
	if err := transport.CheckOp(op, t.cfg.Rank, t.cfg.World); err != nil {
		return nil, fmt.Errorf("tcp: rank %d: %w", t.cfg.Rank, err)
	}
	p := t.peers[op.Peer]
	if p == nil {
		return nil, fmt.Errorf("tcp: rank %d: %w: rank %d is not a connected peer", t.cfg.Rank, transport.ErrInvalid, op.Peer)
	}
	if op.Len > 0 {
		l, ok := t.regions[op.Local]
		if !ok || !transport.InRange(op.LocalOff, op.Len, uint64(len(l))) {
			return nil, fmt.Errorf("tcp: rank %d: %w: local buffer %d [%d, +%d)", t.cfg.Rank, transport.ErrInvalid, op.Local, op.LocalOff, op.Len)
		}
		size, ok := p.remote[op.Remote]
		if !ok || !transport.InRange(op.RemoteOff, op.Len, size) {
			return nil, fmt.Errorf("tcp: rank %d: %w: buffer %d [%d, +%d) of rank %d", t.cfg.Rank, transport.ErrInvalid, op.Remote, op.RemoteOff, op.Len, op.Peer)
		}
	}
	if op.Kind == transport.OpWriteSignal {
		size, ok := p.remote[op.SignalBuf]
		if !ok || !transport.InRange(op.SignalOff, 8, size) {
			return nil, fmt.Errorf("tcp: rank %d: %w: signal word %d:%d of rank %d", t.cfg.Rank, transport.ErrInvalid, op.SignalBuf, op.SignalOff, op.Peer)
		}
	}
	return p, nil
}

func (t *Transport) peerGone(p *peer) error {
	err := &transport.RankLostError{Rank: p.rank, Closed: true,
		Seen: fmt.Sprintf("tcp, seen by rank %d: it closed its transport", t.cfg.Rank)}
	if cause := p.byeCause.Load(); cause > 0 {
		// The peer closed because it lost another rank: that one is the cause; lead with
		// it, and pass it on.
		t.lost.CompareAndSwap(0, cause)
		err = &transport.RankLostError{Rank: int(cause - 1),
			Seen: fmt.Sprintf("tcp, seen by rank %d: rank %d closed its transport after losing it", t.cfg.Rank, p.rank)}
	}
	t.fail(err)
	return t.Err()
}

// Post implements transport.Transport: queue ops on their peers' rings, then wake the
// writers of the peers touched.
func (t *Transport) Post(ops []transport.Op) (int, error) {
	if err := t.Err(); err != nil {
		return 0, err
	}
	if !t.connected {
		return 0, fmt.Errorf("tcp: rank %d: %w: Post before Connect", t.cfg.Rank, transport.ErrInvalid)
	}
	i := 0
	var err error
	for ; i < len(ops); i++ {
		op := &ops[i]
		var p *peer
		if p, err = t.check(op); err != nil {
			break
		}
		if p.bye.Load() {
			err = t.peerGone(p)
			break
		}
		h := p.head.Load()
		if h-p.polled >= p.q {
			break // back-pressure
		}
		p.ring[h%p.q] = *op
		p.head.Store(h + 1)
		if !p.touched {
			p.touched = true
			t.touched = append(t.touched, p)
		}
	}
	for _, p := range t.touched {
		p.touched = false
		p.wakeWriter()
	}
	t.touched = t.touched[:0]
	return i, err
}

// Poll implements transport.Transport.
func (t *Transport) Poll(done []transport.Completion) (int, error) {
	if err := t.Err(); err != nil {
		return 0, err
	}
	n := 0
	for _, p := range t.peerList {
		a := p.acked.Load()
		for p.polled < a && n < len(done) {
			done[n] = transport.Completion{Cookie: p.ring[p.polled%p.q].Cookie}
			p.polled++
			n++
		}
		if p.polled == a && a < p.head.Load() && p.bye.Load() {
			return n, t.peerGone(p)
		}
	}
	return n, nil
}
