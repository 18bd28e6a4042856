package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/fifo"
	"github.com/mkernel/mkernel/gocore/proxy"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

// TestAllToAllExact has every rank push ragged chunks to every other rank through its
// FIFO, then a signal; every receiver checks every byte once the flag says so. The
// reordering backends check that fences and deferred signals keep the contract.
func TestAllToAllExact(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			const world, rounds = 3, 3
			c := startCluster(t, b.open, world)
			slab := 1<<20/world - 37 // ragged
			var wg sync.WaitGroup
			errs := make([]error, world)
			for r, n := range c.nodes {
				src := n.Src.Bytes()
				for i := range src {
					src[i] = byte(i*7 + r*13 + 1)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for round := 1; round <= rounds; round++ {
						for p := range world {
							if p == r {
								continue
							}
							// Three ragged pieces, then the signal on its own (zero bytes).
							cuts := []int{0, slab / 3, slab/3 + 1, slab}
							for k := range 3 {
								push(t, n.ring, fifo.Cmd{Kind: fifo.KindWrite, Peer: uint16(p), LocalBuf: uint32(transporttest.BufSrc),
									RemoteBuf: uint32(transporttest.BufData), LocalOff: uint64(cuts[k]), RemoteOff: uint64(r*slab + cuts[k]),
									Bytes: uint64(cuts[k+1] - cuts[k])})
							}
							push(t, n.ring, fifo.Cmd{Kind: fifo.KindWriteSignal, Peer: uint16(p), ArrivalSlot: uint32(r), ArrivalSeq: uint64(round)})
						}
						for p := range world {
							if p != r {
								if err := fifo.WaitFlag(n.Flag(p), uint64(round), 15*time.Second); err != nil {
									errs[r] = fmt.Errorf("rank %d round %d waiting for rank %d: %w (proxy: %v)", r, round, p, err, n.p.Err())
									return
								}
							}
						}
					}
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for r, n := range c.nodes {
				for p, m := range c.nodes {
					if p == r {
						continue
					}
					got := n.Data.Bytes()[p*slab : (p+1)*slab]
					if want := m.Src.Bytes()[:slab]; !bytes.Equal(got, want) {
						t.Errorf("rank %d: data from rank %d differs", r, p)
					}
				}
				// Completions may trail arrivals (acks); the histogram is published every tick.
				deadline := time.Now().Add(5 * time.Second)
				st := n.p.Stats()
				for (st.Finished != st.Consumed || st.Latency.Count != st.Finished) && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
					st = n.p.Stats()
				}
				if st.Finished != st.Consumed || st.Latency.Count != st.Finished || st.Consumed != uint64(rounds*(world-1)*4) {
					t.Errorf("rank %d: consumed %d, finished %d, histogram %d", r, st.Consumed, st.Finished, st.Latency.Count)
				}
			}
		})
	}
}

// TestBarrier: every rank of 4 pushes BARRIER with increasing sequence numbers.
func TestBarrier(t *testing.T) {
	for _, b := range backends()[:2] {
		t.Run(b.name, func(t *testing.T) {
			const world, base = 4, 100
			c := startCluster(t, b.open, world)
			var wg sync.WaitGroup
			for r, n := range c.nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for seq := uint64(1); seq <= 20; seq++ {
						push(t, n.ring, fifo.Cmd{Kind: fifo.KindBarrier, ArrivalSlot: base, ArrivalSeq: seq})
						for p := range world {
							if p != r {
								waitFlag(t, n.Flag(base+p), seq, fmt.Sprintf("rank %d barrier %d from rank %d", r, seq, p))
							}
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// countingTransport checks the credit limits at the transport's door.
type countingTransport struct {
	transport.Transport
	limit    int
	inflight map[int32]int
	cookies  map[uint64]int32
	max      int
	mu       sync.Mutex
}

func (c *countingTransport) Post(ops []transport.Op) (int, error) {
	n, err := c.Transport.Post(ops)
	c.mu.Lock()
	for _, op := range ops[:n] {
		c.inflight[op.Peer]++
		c.cookies[op.Cookie] = op.Peer
		c.max = max(c.max, c.inflight[op.Peer])
	}
	c.mu.Unlock()
	return n, err
}

func (c *countingTransport) Poll(done []transport.Completion) (int, error) {
	n, err := c.Transport.Poll(done)
	c.mu.Lock()
	for _, d := range done[:n] {
		c.inflight[c.cookies[d.Cookie]]--
	}
	c.mu.Unlock()
	return n, err
}

func TestCreditsBoundInflight(t *testing.T) {
	open := backends()[3].open // tcp with delays: completions lag
	var wrapped []*countingTransport
	var mu sync.Mutex
	countingOpen := func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
		tr, err := open(ctx, cfg)
		if err != nil {
			return nil, err
		}
		ct := &countingTransport{Transport: tr, inflight: map[int32]int{}, cookies: map[uint64]int32{}}
		mu.Lock()
		wrapped = append(wrapped, ct)
		mu.Unlock()
		return ct, nil
	}
	c := startCluster(t, countingOpen, 2, proxy.WithCredits(3, 1<<30))
	n := c.nodes[0]
	for i := range 300 {
		push(t, n.ring, fifo.Cmd{Kind: fifo.KindWrite, Peer: 1, LocalBuf: uint32(transporttest.BufSrc), RemoteBuf: uint32(transporttest.BufData),
			LocalOff: uint64(i * 64), RemoteOff: uint64(i * 64), Bytes: 64})
	}
	ticket := push(t, n.ring, fifo.Cmd{Kind: fifo.KindWriteSignal, Peer: 1, ArrivalSlot: 9, ArrivalSeq: 1})
	waitFlag(t, c.nodes[1].Flag(9), 1, "signal after 300 writes")
	if err := n.ring.WaitDone(ticket, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, w := range wrapped {
		w.mu.Lock() // the proxies may still be posting (acks, the other rank)
		most := w.max
		w.mu.Unlock()
		if most > 3 {
			t.Errorf("a peer had %d commands in flight, limit 3", most)
		}
	}
	if st := n.p.Stats(); st.Stalls.Credit == 0 {
		t.Errorf("no credit stall recorded: %+v", st.Stalls)
	}
}

func TestWatchdogNamesPeerAndSlot(t *testing.T) {
	ring := newRing(t, 16)
	tr := &stuck{done: make(chan struct{})}
	p, err := proxy.Start(context.Background(), ring, tr, proxy.Config{Rank: 0, World: 4, FlagBuf: 3},
		proxy.WithOpTimeout(150*time.Millisecond), proxy.WithIdle(time.Millisecond, 50*time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 5 {
		push(t, ring, fifo.Cmd{Kind: fifo.KindWrite, Peer: 2, LocalBuf: 1, RemoteBuf: 1, Bytes: 8})
	}
	time.Sleep(20 * time.Millisecond)
	st := p.Stats()
	if st.Oldest == nil || st.Oldest.Peer != 2 || st.Oldest.Ticket != 0 || st.Oldest.Waiting != "completion" {
		t.Errorf("oldest unfinished: %+v", st.Oldest)
	}
	if st.InFlight != 5 || len(st.Peers) != 1 || st.Peers[0].Cmds != 5 || st.Peers[0].Bytes != 40 {
		t.Errorf("in flight %d, peers %+v", st.InFlight, st.Peers)
	}
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the watchdog did not fire")
	}
	err = p.Err()
	if !errors.Is(err, transport.ErrTimeout) || !strings.Contains(err.Error(), "rank 2") || !strings.Contains(err.Error(), "FIFO slot 0") {
		t.Fatalf("watchdog error %q should be a timeout naming rank 2 and FIFO slot 0", err)
	}
	if code, peer, _ := ring.Failure(); code != fifo.ErrProxy || peer != 2 {
		t.Errorf("FIFO error word %d peer %d", code, peer)
	}
	if _, err := ring.Push(&fifo.Cmd{Kind: fifo.KindFence, Peer: fifo.PeerAll}, time.Second); !errors.Is(err, fifo.ErrFailed) {
		t.Errorf("a producer after the failure: %v", err)
	}
	if err := p.Close(); err == nil {
		t.Error("Close after a failure returned nil")
	}
}

func TestBlockedOnCreditTimesOut(t *testing.T) {
	ring := newRing(t, 16)
	tr := &stuck{done: make(chan struct{})}
	p, err := proxy.Start(context.Background(), ring, tr, proxy.Config{Rank: 1, World: 2, FlagBuf: 3},
		proxy.WithOpTimeout(200*time.Millisecond), proxy.WithCredits(1, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	push(t, ring, fifo.Cmd{Kind: fifo.KindWrite, Peer: 0, LocalBuf: 1, RemoteBuf: 1, Bytes: 8})
	push(t, ring, fifo.Cmd{Kind: fifo.KindWriteSignal, Peer: 0, ArrivalSlot: 5, ArrivalSeq: 1})
	time.Sleep(30 * time.Millisecond)
	if st := p.Stats(); st.Blocked == nil || st.Blocked.Ticket != 1 || st.Blocked.Waiting != "credit" || st.QueueDepth != 1 {
		t.Errorf("blocked %+v, depth %d", st.Blocked, st.QueueDepth)
	}
	<-p.Done()
	if err := p.Err(); !errors.Is(err, transport.ErrTimeout) || !strings.Contains(err.Error(), "rank 0") {
		t.Fatalf("%v", err)
	}
}

func TestPeerGoneFailsProxy(t *testing.T) {
	c := startCluster(t, backends()[2].open, 3) // tcp
	if err := c.nodes[2].p.Close(); err != nil {
		t.Fatal(err)
	}
	c.nodes[2].T.Close()
	n := c.nodes[0]
	push(t, n.ring, fifo.Cmd{Kind: fifo.KindWriteSignal, Peer: 2, ArrivalSlot: 1, ArrivalSeq: 1})
	select {
	case <-n.p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("rank 0's proxy did not notice rank 2 left")
	}
	if err := n.p.Err(); !errors.Is(err, transport.ErrPeerGone) || !strings.Contains(err.Error(), "rank 2") {
		t.Fatalf("error %q should be ErrPeerGone naming rank 2", err)
	}
	// The FIFO's record (what a GPU producer reads) names the lost rank too.
	if code, peer, _ := n.ring.Failure(); code != fifo.ErrProxy || peer != 2 {
		t.Fatalf("FIFO failure record: code %d peer %d, want ErrProxy naming rank 2", code, peer)
	}
}

func TestBadCommand(t *testing.T) {
	ring := newRing(t, 16)
	p, err := proxy.Start(context.Background(), ring, &stuck{done: make(chan struct{})}, proxy.Config{Rank: 0, World: 2, FlagBuf: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	push(t, ring, fifo.Cmd{Kind: 9, Peer: 1})
	<-p.Done()
	if err := p.Err(); !errors.Is(err, proxy.ErrBadCommand) || !strings.Contains(err.Error(), "ticket 0") {
		t.Fatalf("%v", err)
	}
}

func TestProducerFailure(t *testing.T) {
	ring := newRing(t, 16)
	p, err := proxy.Start(context.Background(), ring, &stuck{done: make(chan struct{})}, proxy.Config{Rank: 0, World: 2, FlagBuf: 3},
		proxy.WithIdle(time.Millisecond, 50*time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ring.Fail(fifo.ErrProducer, 1, 77)
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("producer failure not noticed")
	}
	if err := p.Err(); !errors.Is(err, proxy.ErrProducer) || !strings.Contains(err.Error(), "ticket 77") {
		t.Fatalf("%v", err)
	}
}

func TestCloseAndContext(t *testing.T) {
	ring := newRing(t, 16)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := proxy.Start(ctx, ring, &stuck{done: make(chan struct{})}, proxy.Config{Rank: 0, World: 2, FlagBuf: 3})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("cancelling the context did not stop the proxy")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !errors.Is(p.Err(), proxy.ErrClosed) {
		t.Fatalf("Err %v", p.Err())
	}
	if code, _, _ := ring.Failure(); code != fifo.ErrClosed {
		t.Fatalf("FIFO error word %d after Close", code)
	}
}

func TestPinsToCPUs(t *testing.T) {
	ring := newRing(t, 16)
	p, err := proxy.Start(context.Background(), ring, &stuck{done: make(chan struct{})}, proxy.Config{Rank: 0, World: 2, FlagBuf: 3},
		proxy.WithCPUs([]int{0}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	st := p.Stats()
	if len(st.CPUs) != 1 || st.CPUs[0] != 0 {
		t.Fatalf("proxy thread affinity %v, want [0]", st.CPUs)
	}
	if _, err := json.Marshal(st); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidConfig(t *testing.T) {
	ring := newRing(t, 16)
	tr := &stuck{done: make(chan struct{})}
	for name, tc := range map[string]struct {
		cfg  proxy.Config
		opts []proxy.Option
	}{
		"rank out of range": {proxy.Config{Rank: 2, World: 2}, nil},
		"bad peer":          {proxy.Config{Rank: 0, World: 2, Peers: []int{0}}, nil},
		"table":             {proxy.Config{Rank: 0, World: 2}, []proxy.Option{proxy.WithTable(100)}},
		"credits":           {proxy.Config{Rank: 0, World: 2}, []proxy.Option{proxy.WithCredits(0, 1)}},
	} {
		if p, err := proxy.Start(context.Background(), ring, tr, tc.cfg, tc.opts...); err == nil {
			p.Close()
			t.Errorf("%s: accepted", name)
		}
	}
}
