package proxy

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/mkernel/mkernel/gocore/fifo"
)

// NumBuckets is the number of latency histogram buckets. Bucket 0 counts latencies below
// 128 ns; bucket i > 0 those in [64·2^i, 128·2^i) ns; the last bucket everything above.
const NumBuckets = 32

// bucketOf maps a latency in ns to its bucket.
func bucketOf(ns uint64) int {
	b := bits.Len64(ns >> 7) // 0 below 128 ns
	if b >= NumBuckets {
		b = NumBuckets - 1
	}
	return b
}

// BucketUpperNS returns the exclusive upper bound of bucket i in ns (the last is open).
func BucketUpperNS(i int) uint64 { return 128 << uint(i) }

// Histogram is a snapshot of the per-command latency histogram. Latency is from the
// producer's enqueue timestamp (when the FIFO's clock is the host's monotonic clock) or
// from the proxy's pick-up of the command, to the command's completion.
type Histogram struct {
	// UpperNS[i] is bucket i's exclusive upper bound (the last bucket is open-ended).
	UpperNS []uint64 `json:"upper_ns"`
	Counts  []uint64 `json:"counts"`
	Count   uint64   `json:"count"`
	// From says where latencies start: "enqueue" or "pickup".
	From string `json:"from"`
	// P50NS, P99NS are bucket upper bounds: a latency percentile is at most this.
	P50NS uint64 `json:"p50_ns"`
	P99NS uint64 `json:"p99_ns"`
}

// Quantile returns the upper bound of the bucket holding quantile q (0..1), 0 if empty.
func (h Histogram) Quantile(q float64) uint64 {
	if h.Count == 0 {
		return 0
	}
	want := uint64(q*float64(h.Count) + 0.5)
	if want == 0 {
		want = 1
	}
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= want {
			return h.UpperNS[i]
		}
	}
	return h.UpperNS[len(h.UpperNS)-1]
}

// PeerStats is what is in flight to one peer.
type PeerStats struct {
	Rank  int    `json:"rank"`
	Cmds  int64  `json:"cmds"`
	Bytes uint64 `json:"bytes"`
}

// Command describes one command for diagnostics.
type Command struct {
	Ticket uint64 `json:"ticket"`
	// Slot is the FIFO slot (ticket mod capacity).
	Slot        uint64 `json:"slot"`
	Kind        string `json:"kind"`
	Peer        int    `json:"peer"` // -1: all peers
	Bytes       uint64 `json:"bytes"`
	ArrivalSlot uint32 `json:"arrival_slot"`
	ArrivalSeq  uint64 `json:"arrival_seq"`
	// AgeNS is how long it has been unfinished (since pick-up) or blocked.
	AgeNS uint64 `json:"age_ns"`
	// Waiting says what it waits for: "completion", "credit", "fence", "table".
	Waiting string `json:"waiting"`
	// OpsPending is the number of transport ops not yet complete.
	OpsPending int `json:"ops_pending"`
}

// Stalls counts the times consumption stopped, by reason.
type Stalls struct {
	Credit uint64 `json:"credit"`
	Fence  uint64 `json:"fence"`
	Table  uint64 `json:"table"`
}

// Stats is a snapshot of a proxy's diagnostics, safe to take from any goroutine.
type Stats struct {
	Rank      int    `json:"rank"`
	Transport string `json:"transport"`
	// CPUs is the proxy thread's affinity after pinning (empty when not pinned).
	CPUs []int `json:"cpus"`
	// Consumed and Finished count commands taken from the FIFO and finished in order.
	Consumed uint64 `json:"consumed"`
	Finished uint64 `json:"finished"`
	// QueueDepth counts commands published in the FIFO and not yet consumed.
	QueueDepth int `json:"queue_depth"`
	// Capacity is the FIFO's size in commands.
	Capacity int `json:"capacity"`
	// FIFOFormat is the FIFO's slot format ("ll", the data path's default, or "seq": MKERNEL_FIFO_LL=0).
	FIFOFormat string `json:"fifo_format"`
	// InFlight counts commands consumed and not finished.
	InFlight uint64      `json:"in_flight"`
	Peers    []PeerStats `json:"peers"`
	Stalls   Stalls      `json:"stalls"`
	// Oldest is the oldest unfinished command; Blocked the command at the head of the FIFO
	// waiting for credit, if any.
	Oldest  *Command  `json:"oldest,omitempty"`
	Blocked *Command  `json:"blocked,omitempty"`
	Latency Histogram `json:"latency"`
	// Err is why the proxy stopped; empty while it runs.
	Err string `json:"error,omitempty"`
}

// cmdWords is a Command published under a sequence lock.
type cmdWords struct {
	seq                                          atomic.Uint64 // odd while being written
	valid                                        atomic.Bool
	ticket, bytes, arrivalSeq, startNS           atomic.Uint64
	kind, peer, arrivalSlot, waiting, opsPending atomic.Int64
}

func (w *cmdWords) publish(valid bool, e *entry, startNS uint64, waiting waitReason) {
	w.seq.Add(1)
	w.valid.Store(valid)
	if valid {
		w.ticket.Store(e.ticket)
		w.bytes.Store(e.bytes)
		w.arrivalSeq.Store(e.arrivalSeq)
		w.startNS.Store(startNS)
		w.kind.Store(int64(e.kind))
		w.peer.Store(int64(e.peer))
		w.arrivalSlot.Store(int64(e.arrivalSlot))
		w.waiting.Store(int64(waiting))
		w.opsPending.Store(int64(e.pending))
	}
	w.seq.Add(1)
}

func (w *cmdWords) read(now uint64, capacity int) *Command {
	for {
		s := w.seq.Load()
		if s&1 != 0 {
			continue
		}
		var c *Command
		if w.valid.Load() {
			c = &Command{
				Ticket:      w.ticket.Load(),
				Kind:        fifo.Kind(w.kind.Load()).String(),
				Peer:        int(w.peer.Load()),
				Bytes:       w.bytes.Load(),
				ArrivalSlot: uint32(w.arrivalSlot.Load()),
				ArrivalSeq:  w.arrivalSeq.Load(),
				Waiting:     waitReason(w.waiting.Load()).String(),
				OpsPending:  int(w.opsPending.Load()),
			}
			c.Slot = c.Ticket % uint64(capacity)
			if start := w.startNS.Load(); now > start {
				c.AgeNS = now - start
			}
			if c.Peer == fifo.PeerAll {
				c.Peer = -1
			}
		}
		if w.seq.Load() == s {
			return c
		}
	}
}

type waitReason int

const (
	waitNone waitReason = iota
	waitCompletion
	waitCredit
	waitFence
	waitTable
)

func (w waitReason) String() string {
	return [...]string{"", "completion", "credit", "fence", "table"}[w]
}

// published is what the loop shares with Stats.
type published struct {
	consumed, finished atomic.Uint64
	hist               [NumBuckets]atomic.Uint64
	peerCmds           []atomic.Int64
	peerBytes          []atomic.Uint64
	oldest, blocked    cmdWords
	stallCredit        atomic.Uint64
	stallFence         atomic.Uint64
	stallTable         atomic.Uint64
	cpus               atomic.Pointer[[]int]
}

// Stats returns a snapshot of the proxy's diagnostics.
func (p *Proxy) Stats() Stats {
	pub := &p.pub
	now := fifo.MonotonicNanos()
	s := Stats{
		Rank:       p.cfg.Rank,
		Transport:  p.t.Name(),
		Consumed:   p.ring.Tail(), // live: the FIFO's own counters
		Finished:   p.ring.Done(),
		QueueDepth: p.ring.Depth(),
		Capacity:   p.ring.Capacity(),
		FIFOFormat: p.ring.Format().String(),
		Peers:      []PeerStats{},
		CPUs:       []int{},
		Oldest:     pub.oldest.read(now, p.ring.Capacity()),
		Blocked:    pub.blocked.read(now, p.ring.Capacity()),
		Stalls:     Stalls{Credit: pub.stallCredit.Load(), Fence: pub.stallFence.Load(), Table: pub.stallTable.Load()},
	}
	if c := pub.cpus.Load(); c != nil {
		s.CPUs = *c
	}
	s.InFlight = s.Consumed - min(s.Finished, s.Consumed)
	for r := range pub.peerCmds {
		if c, b := pub.peerCmds[r].Load(), pub.peerBytes[r].Load(); c != 0 || b != 0 {
			s.Peers = append(s.Peers, PeerStats{Rank: r, Cmds: c, Bytes: b})
		}
	}
	h := Histogram{UpperNS: make([]uint64, NumBuckets), Counts: make([]uint64, NumBuckets), From: "pickup"}
	if p.ring.Clock() == fifo.ClockMonotonic {
		h.From = "enqueue"
	}
	for i := range NumBuckets {
		h.UpperNS[i] = BucketUpperNS(i)
		h.Counts[i] = pub.hist[i].Load()
		h.Count += h.Counts[i]
	}
	h.P50NS, h.P99NS = h.Quantile(0.5), h.Quantile(0.99)
	s.Latency = h
	if err := p.Err(); err != nil {
		s.Err = err.Error()
	}
	return s
}

// age formats a duration in ns for messages.
func age(ns uint64) time.Duration { return time.Duration(ns) }
