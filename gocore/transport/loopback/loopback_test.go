package loopback_test

import (
	"context"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/loopback"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Suite{Open: func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
		return loopback.Open(ctx, cfg)
	}})
}

func TestConformanceReordered(t *testing.T) {
	transporttest.Run(t, transporttest.Suite{Light: true, Open: func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
		return loopback.Open(ctx, cfg, loopback.WithReorder(uint64(cfg.Rank)+7, 200*time.Microsecond))
	}})
}

// TestReorderReorders checks that the test-only option really applies ops out of order.
func TestReorderReorders(t *testing.T) {
	j := transporttest.StartJob(t, func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
		return loopback.Open(ctx, cfg, loopback.WithReorder(1, 500*time.Microsecond))
	}, transporttest.JobOptions{World: 2, DataSize: 1 << 16})
	tr := j.Ranks[0].T
	if tr.Caps().OrderedWrites {
		t.Fatal("a reordering transport claims OrderedWrites")
	}
	ops := make([]transport.Op, 200)
	for i := range ops {
		ops[i] = transport.Op{Kind: transport.OpWrite, Peer: 1, Local: transporttest.BufSrc, Remote: transporttest.BufData, Len: 8, Cookie: uint64(i)}
	}
	if n, err := tr.Post(ops); n != len(ops) || err != nil {
		t.Fatalf("Post = %d, %v", n, err)
	}
	var order []uint64
	done := make([]transport.Completion, 16)
	for deadline := time.Now().Add(5 * time.Second); len(order) < len(ops) && time.Now().Before(deadline); {
		n, err := tr.Poll(done)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range done[:n] {
			order = append(order, c.Cookie)
		}
	}
	inversions := 0
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			inversions++
		}
	}
	if len(order) != len(ops) || inversions == 0 {
		t.Fatalf("%d completions with %d inversions: not reordered", len(order), inversions)
	}
}
