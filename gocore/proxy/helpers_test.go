package proxy_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/fifo"
	"github.com/mkernel/mkernel/gocore/proxy"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/loopback"
	"github.com/mkernel/mkernel/gocore/transport/shm"
	"github.com/mkernel/mkernel/gocore/transport/tcp"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

type backend struct {
	name string
	open transporttest.OpenFunc
}

func backends() []backend {
	return []backend{
		{"loopback", func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
			return loopback.Open(ctx, cfg)
		}},
		{"loopback-reorder", func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
			return loopback.Open(ctx, cfg, loopback.WithReorder(uint64(cfg.Rank)+11, 100*time.Microsecond))
		}},
		{"tcp", func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
			return tcp.Open(ctx, cfg)
		}},
		{"tcp-faults", func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
			return tcp.Open(ctx, cfg, tcp.WithFaults(uint64(cfg.Rank)+5, 200*time.Microsecond))
		}},
	}
}

// node is one rank: its transport job rank, FIFO and proxy.
type node struct {
	*transporttest.Rank
	ring  *fifo.Ring
	fifoM *shm.Segment
	p     *proxy.Proxy
}

type cluster struct {
	job   *transporttest.Job
	nodes []*node
}

const fifoSlots = 256

// startCluster connects world ranks over open and starts a proxy per rank.
func startCluster(t *testing.T, open transporttest.OpenFunc, world int, opts ...proxy.Option) *cluster {
	t.Helper()
	j := transporttest.StartJob(t, open, transporttest.JobOptions{World: world, DataSize: 1 << 20})
	c := &cluster{job: j}
	for r, rk := range j.Ranks {
		format := fifo.FormatSeq
		if os.Getenv("MKERNEL_FIFO_LL") == "1" { // the LL variants of the tests (ll_test.go)
			format = fifo.FormatLL
		}
		seg, err := shm.Create(fmt.Sprintf("fifo%d", r), fifo.BytesFormat(fifoSlots, format))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { seg.Close() })
		ring, err := fifo.InitFormat(seg.Bytes(), fifoSlots, fifo.ClockMonotonic, format)
		if err != nil {
			t.Fatal(err)
		}
		o := append([]proxy.Option{proxy.WithIdle(time.Millisecond, 20*time.Microsecond), proxy.WithOpTimeout(10 * time.Second)}, opts...)
		p, err := proxy.Start(context.Background(), ring, rk.T, proxy.Config{Rank: r, World: world, FlagBuf: transporttest.BufFlags}, o...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		c.nodes = append(c.nodes, &node{Rank: rk, ring: ring, fifoM: seg, p: p})
	}
	return c
}

func push(t testing.TB, r *fifo.Ring, cmd fifo.Cmd) uint64 {
	t.Helper()
	cmd.EnqueueNS = fifo.MonotonicNanos()
	ticket, err := r.Push(&cmd, 10*time.Second)
	if err != nil {
		t.Fatalf("push %s: %v", cmd.Kind, err)
	}
	return ticket
}

func flag(n *node, slot int) *uint64 { return n.Flag(slot) }

func waitFlag(t testing.TB, f *uint64, want uint64, what string) {
	t.Helper()
	if err := fifo.WaitFlag(f, want, 15*time.Second); err != nil {
		t.Fatalf("%s: flag holds %d, want %d: %v", what, atomic.LoadUint64(f), want, err)
	}
}

// stuck is a transport that accepts ops and never completes them.
type stuck struct {
	posted atomic.Int64
	done   chan struct{}
}

func (s *stuck) Name() string                                        { return "stuck" }
func (s *stuck) Caps() transport.Caps                                { return transport.Caps{OrderedWrites: true} }
func (s *stuck) Register(transport.BufferID, transport.Region) error { return nil }
func (s *stuck) Address() ([]byte, error)                            { return nil, nil }
func (s *stuck) Connect(context.Context, [][]byte) error             { return nil }
func (s *stuck) Post(ops []transport.Op) (int, error) {
	s.posted.Add(int64(len(ops)))
	return len(ops), nil
}
func (s *stuck) Poll([]transport.Completion) (int, error) { return 0, nil }
func (s *stuck) Done() <-chan struct{}                    { return s.done }
func (s *stuck) Err() error                               { return nil }
func (s *stuck) Close() error                             { return nil }

func newRing(t testing.TB, slots int) *fifo.Ring {
	t.Helper()
	seg, err := shm.Create("fifo", fifo.Bytes(slots))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { seg.Close() })
	r, err := fifo.Init(seg.Bytes(), slots, fifo.ClockMonotonic)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
