package proxy

import (
	"fmt"

	"github.com/mkernel/mkernel/gocore/fifo"
	"github.com/mkernel/mkernel/gocore/transport"
)

// tick publishes the diagnostics and runs the watchdog. It runs on the loop every
// tickSteps steps and when idle, so it may read loop state freely.
func (p *Proxy) tick(now uint64) {
	pub := &p.pub
	pub.consumed.Store(p.tail)
	pub.finished.Store(p.done)
	for i := range p.hist {
		if pub.hist[i].Load() != p.hist[i] {
			pub.hist[i].Store(p.hist[i])
		}
	}
	for r := range p.peerCmds {
		if int64(p.peerCmds[r]) != pub.peerCmds[r].Load() {
			pub.peerCmds[r].Store(int64(p.peerCmds[r]))
		}
		if p.peerBytes[r] != pub.peerBytes[r].Load() {
			pub.peerBytes[r].Store(p.peerBytes[r])
		}
	}
	timeout := uint64(p.o.opTimeout)

	// The oldest unfinished command is the one at the done counter.
	if p.done < p.tail {
		e := &p.table[p.done&p.mask]
		pub.oldest.publish(true, e, e.pickNS, waitCompletion)
		if now > e.pickNS && now-e.pickNS > timeout {
			p.fail(fifo.ErrProxy, int(e.peer), e.ticket, fmt.Errorf("proxy: rank %d: %w: %s to rank %d (ticket %d, FIFO slot %d, arrival slot %d, %d bytes) unfinished after %v (%d transport ops outstanding)",
				p.cfg.Rank, transport.ErrTimeout, e.kind, e.peer, e.ticket, e.ticket%uint64(p.ring.Capacity()), e.arrivalSlot, e.bytes, age(now-e.pickNS), e.pending))
			return
		}
	} else if pub.oldest.valid.Load() {
		pub.oldest.publish(false, nil, 0, waitNone)
	}

	// A command waiting for credit (or a fence) that never comes: the peers it waits
	// for are not completing.
	if p.blockedTicket != 0 {
		if c := p.ring.Published(p.blockedTicket - 1); c != nil {
			e := entry{ticket: p.blockedTicket - 1, bytes: c.Bytes, arrivalSeq: c.ArrivalSeq, arrivalSlot: c.ArrivalSlot, peer: c.Peer, kind: c.Kind}
			pub.blocked.publish(true, &e, p.blockedSince, p.blockedWhy)
			if now > p.blockedSince && now-p.blockedSince > timeout {
				peer := int(c.Peer)
				what := fmt.Sprintf("rank %d", peer)
				if peer >= len(p.peerCmds) {
					what = "every peer"
				} else {
					what += fmt.Sprintf(" (%d commands, %d bytes in flight)", p.peerCmds[peer], p.peerBytes[peer])
				}
				p.fail(fifo.ErrProxy, peer, e.ticket, fmt.Errorf("proxy: rank %d: %w: %s (ticket %d, FIFO slot %d) waited %v for %s to %s",
					p.cfg.Rank, transport.ErrTimeout, e.kind, e.ticket, e.ticket%uint64(p.ring.Capacity()), age(now-p.blockedSince), p.blockedWhy, what))
				return
			}
		}
	} else if pub.blocked.valid.Load() {
		pub.blocked.publish(false, nil, 0, waitNone)
	}

	if code, peer, ticket := p.ring.Failure(); code == fifo.ErrProducer {
		p.fail(fifo.ErrProducer, int(peer), ticket, fmt.Errorf("proxy: rank %d: %w: a producer gave up on ticket %d (FIFO slot %d, peer %d)",
			p.cfg.Rank, ErrProducer, ticket, ticket%uint64(p.ring.Capacity()), int32(peer)))
		return
	}
	if err := p.t.Err(); err != nil {
		p.failTransport(err)
	}
}
