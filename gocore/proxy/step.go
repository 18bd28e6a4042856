package proxy

import (
	"errors"
	"fmt"

	"github.com/mkernel/mkernel/gocore/fifo"
	"github.com/mkernel/mkernel/gocore/transport"
)

// step is one iteration of the hot loop: completions, consumption, posting. It reports
// whether anything happened. It allocates nothing (checked by TestStepDoesNotAllocate).
func (p *Proxy) step() bool {
	progress := false
	n, err := p.t.Poll(p.comps)
	if err != nil {
		p.failTransport(err)
		return false
	}
	if n > 0 {
		progress = true
		now := fifo.MonotonicNanos()
		for i := range n {
			c := &p.comps[i]
			if !p.complete(c, now) {
				return false
			}
		}
		d := p.done
		for d < p.tail {
			e := &p.table[d&p.mask]
			if !e.finished {
				break
			}
			e.live, e.finished = false, false
			d++
		}
		if d != p.done {
			p.done = d
			p.ring.SetDone(d)
		}
	}
	if len(p.pend) > 0 && !p.post() {
		return false
	}
	if len(p.pend) < p.o.batch && p.consume() {
		progress = true
		if !p.post() {
			return false
		}
	}
	return progress
}

// complete accounts one transport completion; false if the proxy failed.
func (p *Proxy) complete(c *transport.Completion, now uint64) bool {
	e := &p.table[c.Cookie&p.mask]
	if !e.live || e.ticket != c.Cookie || e.finished {
		p.fail(fifo.ErrProxy, -1, c.Cookie, fmt.Errorf("proxy: rank %d: completion for ticket %d, which is not in flight (transport bug)", p.cfg.Rank, c.Cookie))
		return false
	}
	if c.Err != nil {
		p.fail(fifo.ErrProxy, blamed(c.Err, int(e.peer)), e.ticket, fmt.Errorf("proxy: rank %d: %s to rank %d (ticket %d, FIFO slot %d) failed: %w",
			p.cfg.Rank, e.kind, e.peer, e.ticket, e.ticket%uint64(p.ring.Capacity()), c.Err))
		return false
	}
	e.pending--
	if e.pending > 0 {
		return true
	}
	if e.deferSig {
		e.deferSig = false
		e.pending = 1
		p.pend = append(p.pend, transport.Op{Kind: transport.OpWriteSignal, Peer: int32(e.peer),
			SignalBuf: p.cfg.FlagBuf, SignalOff: uint64(e.arrivalSlot) * fifo.FlagBytes, SignalValue: e.arrivalSeq, Cookie: e.ticket})
		return true
	}
	p.finish(e, now)
	return true
}

func (p *Proxy) finish(e *entry, now uint64) {
	switch e.kind {
	case fifo.KindWrite, fifo.KindWriteSignal:
		p.peerCmds[e.peer]--
		p.peerBytes[e.peer] -= e.bytes
		p.inflight--
	case fifo.KindBarrier:
		for _, r := range p.peers {
			p.peerCmds[r]--
		}
		p.inflight -= len(p.peers)
	}
	e.finished = true
	start := e.pickNS
	if p.latFromEnq && e.enqNS != 0 && e.enqNS <= now {
		start = e.enqNS
	}
	if now > start {
		p.hist[bucketOf(now-start)]++
	} else {
		p.hist[0]++
	}
}

// post hands the pending ops to the transport; false if the proxy failed.
func (p *Proxy) post() bool {
	n, err := p.t.Post(p.pend)
	if err != nil {
		op := &p.pend[n]
		e := &p.table[op.Cookie&p.mask]
		p.fail(fifo.ErrProxy, blamed(err, int(op.Peer)), op.Cookie, fmt.Errorf("proxy: rank %d: post %s to rank %d (ticket %d, FIFO slot %d): %w",
			p.cfg.Rank, e.kind, op.Peer, op.Cookie, op.Cookie%uint64(p.ring.Capacity()), err))
		return false
	}
	if n > 0 {
		k := copy(p.pend, p.pend[n:])
		p.pend = p.pend[:k]
	}
	return true
}

func (p *Proxy) failTransport(err error) {
	p.fail(fifo.ErrProxy, blamed(err, -1), p.done, fmt.Errorf("proxy: rank %d: %w", p.cfg.Rank, err))
}

// blamed is the rank a failure is recorded against in the FIFO (the GPU's wait record names
// it): the rank the transport lost when it says so — a failed transport fails every later op,
// whatever its destination — else fallback.
func blamed(err error, fallback int) int {
	var lost *transport.RankLostError
	if errors.As(err, &lost) && lost.Rank >= 0 {
		return lost.Rank
	}
	return fallback
}

// consume takes published commands in ticket order while they have credit; it reports
// whether it took any.
func (p *Proxy) consume() bool {
	start := p.tail
	for len(p.pend) < p.o.batch {
		c := p.ring.Published(p.tail)
		if c == nil {
			break
		}
		if p.tail == start {
			p.now = fifo.MonotonicNanos() // one clock read per batch: the pick-up time
		}
		if p.tail-p.done >= uint64(len(p.table)) {
			p.block(waitTable)
			break
		}
		cmd := *c // the slot may be reused as soon as the tail moves
		why, ok := p.admit(&cmd)
		if !ok {
			if why != waitNone {
				p.block(why)
			}
			break
		}
		p.tail++
		p.blockedTicket = 0
	}
	if p.tail == start {
		return false
	}
	p.ring.SetTail(p.tail)
	return true
}

func (p *Proxy) block(why waitReason) {
	if p.blockedTicket == p.tail+1 {
		return
	}
	p.blockedTicket, p.blockedWhy, p.blockedSince = p.tail+1, why, fifo.MonotonicNanos()
	switch why {
	case waitCredit:
		p.pub.stallCredit.Add(1)
	case waitFence:
		p.pub.stallFence.Add(1)
	case waitTable:
		p.pub.stallTable.Add(1)
	}
}

// admit checks a command's credit and turns it into ops. It returns (waitNone, false)
// when the proxy failed, (reason, false) when the command must wait.
func (p *Proxy) admit(c *fifo.Cmd) (waitReason, bool) {
	ticket := p.tail
	peer := int(c.Peer)
	switch c.Kind {
	case fifo.KindWrite, fifo.KindWriteSignal:
		if peer >= p.cfg.World || peer == p.cfg.Rank {
			p.badCommand(c, ticket, "peer %d (world %d, this rank %d)", peer, p.cfg.World, p.cfg.Rank)
			return waitNone, false
		}
		if c.Kind == fifo.KindWrite && c.Bytes == 0 {
			p.badCommand(c, ticket, "zero-length write")
			return waitNone, false
		}
		if int(p.peerCmds[peer]) >= p.o.peerCmds || (p.peerCmds[peer] > 0 && p.peerBytes[peer]+c.Bytes > p.o.peerBytes) {
			return waitCredit, false
		}
		signal := c.Kind == fifo.KindWriteSignal
		if signal && !p.ordered && p.peerCmds[peer] > 0 {
			return waitFence, false // the signal must cover the earlier commands to this peer
		}
		chunks := uint64(1)
		if p.maxOp > 0 && c.Bytes > p.maxOp {
			chunks = (c.Bytes + p.maxOp - 1) / p.maxOp
			if chunks > maxSplit {
				p.badCommand(c, ticket, "%d bytes is more than %d ops of the transport's %d-byte maximum", c.Bytes, maxSplit, p.maxOp)
				return waitNone, false
			}
		}
		e := p.newEntry(c, ticket)
		op := transport.Op{Kind: transport.OpWrite, Peer: int32(peer), Local: transport.BufferID(c.LocalBuf),
			Remote: transport.BufferID(c.RemoteBuf), Cookie: ticket}
		for i := range chunks {
			op.LocalOff = c.LocalOff + i*p.maxOp
			op.RemoteOff = c.RemoteOff + i*p.maxOp
			op.Len = c.Bytes
			if chunks > 1 {
				op.Len = min(p.maxOp, c.Bytes-i*p.maxOp)
			}
			if signal && i == chunks-1 && (chunks == 1 || p.ordered) {
				op.Kind = transport.OpWriteSignal
				op.SignalBuf, op.SignalOff, op.SignalValue = p.cfg.FlagBuf, uint64(c.ArrivalSlot)*fifo.FlagBytes, c.ArrivalSeq
			}
			p.pend = append(p.pend, op)
		}
		e.pending = int32(chunks)
		e.deferSig = signal && chunks > 1 && !p.ordered
		p.peerCmds[peer]++
		p.peerBytes[peer] += c.Bytes
		p.inflight++
	case fifo.KindFence:
		if peer != fifo.PeerAll && (peer >= p.cfg.World || peer == p.cfg.Rank) {
			p.badCommand(c, ticket, "fence on peer %d", peer)
			return waitNone, false
		}
		if !p.ordered && ((peer == fifo.PeerAll && p.inflight > 0) || (peer != fifo.PeerAll && p.peerCmds[peer] > 0)) {
			return waitFence, false
		}
		e := p.newEntry(c, ticket)
		e.finished = true
	case fifo.KindBarrier:
		if !p.ordered && p.inflight > 0 {
			return waitFence, false
		}
		for _, r := range p.peers {
			if int(p.peerCmds[r]) >= p.o.peerCmds {
				return waitCredit, false
			}
		}
		e := p.newEntry(c, ticket)
		off := (uint64(c.ArrivalSlot) + uint64(p.cfg.Rank)) * fifo.FlagBytes
		for _, r := range p.peers {
			p.pend = append(p.pend, transport.Op{Kind: transport.OpWriteSignal, Peer: int32(r),
				SignalBuf: p.cfg.FlagBuf, SignalOff: off, SignalValue: c.ArrivalSeq, Cookie: ticket})
			p.peerCmds[r]++
		}
		p.inflight += len(p.peers)
		e.pending = int32(len(p.peers))
		if e.pending == 0 {
			e.finished = true
		}
	default:
		p.badCommand(c, ticket, "kind %d", c.Kind)
		return waitNone, false
	}
	return waitNone, true
}

func (p *Proxy) newEntry(c *fifo.Cmd, ticket uint64) *entry {
	e := &p.table[ticket&p.mask]
	*e = entry{ticket: ticket, bytes: c.Bytes, arrivalSeq: c.ArrivalSeq, enqNS: c.EnqueueNS, pickNS: p.now,
		arrivalSlot: c.ArrivalSlot, peer: c.Peer, kind: c.Kind, live: true}
	return e
}

func (p *Proxy) badCommand(c *fifo.Cmd, ticket uint64, format string, args ...any) {
	p.fail(fifo.ErrProxy, int(c.Peer), ticket, fmt.Errorf("proxy: rank %d: %w at ticket %d (FIFO slot %d, %s): %s",
		p.cfg.Rank, ErrBadCommand, ticket, ticket%uint64(p.ring.Capacity()), c.Kind, fmt.Sprintf(format, args...)))
}
