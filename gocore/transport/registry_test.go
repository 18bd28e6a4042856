package transport_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/mkernel/mkernel/gocore/topology"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

// fake backends with chosen priorities and open results
type fake struct {
	name   string
	prio   int
	usable bool
	fails  func(rank int) bool
}

func (f fake) Name() string                    { return f.name }
func (f fake) Priority() int                   { return f.prio }
func (f fake) Usable(*topology.Placement) bool { return f.usable }
func (f fake) Open(_ context.Context, cfg transport.Config) (transport.Transport, error) {
	if f.fails != nil && f.fails(cfg.Rank) {
		return nil, transport.ErrNotSupported
	}
	return &fakeT{name: f.name, done: make(chan struct{})}, nil
}

type fakeT struct {
	transport.Transport
	name   string
	done   chan struct{}
	closed bool
}

func (t *fakeT) Name() string { return t.name }
func (t *fakeT) Close() error { t.closed = true; return nil }

var registerOnce sync.Once

func register() {
	registerOnce.Do(func() {
		transport.Register(fake{name: "fake-rdma", prio: 95, usable: true, fails: func(r int) bool { return r == 2 }})
		transport.Register(fake{name: "fake-sock", prio: 5, usable: true})
		transport.Register(fake{name: "fake-unusable", prio: 99, usable: false})
		transport.Register(fake{name: "fake-manual", prio: 0, usable: true})
	})
}

// TestOpenAgreesOnABackend: rank 2 cannot open fake-rdma, so every rank falls back to
// the best backend that opened everywhere.
func TestOpenAgreesOnABackend(t *testing.T) {
	register()
	const world = 3
	g := transporttest.NewLocalGroup(world)
	got := make([]string, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sel := transport.Selection{}
			tr, err := transport.OpenSelected(context.Background(), g.Exchanger(r), transport.Config{Rank: r, World: world}, sel)
			errs[r] = err
			if err == nil {
				got[r] = tr.Name()
			}
		}()
	}
	wg.Wait()
	for r := range world {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		// tcp/loopback are not linked into this test binary; fake-sock is the common one.
		if got[r] != "fake-sock" {
			t.Errorf("rank %d chose %q, want fake-sock", r, got[r])
		}
	}
}

func TestSelectionByName(t *testing.T) {
	register()
	tr, err := transport.OpenSelected(context.Background(), nil, transport.Config{World: 1}, transport.Selection{Name: "fake-manual"})
	if err != nil || tr.Name() != "fake-manual" {
		t.Fatalf("%v %v", tr, err)
	}
	if _, err := transport.OpenSelected(context.Background(), nil, transport.Config{World: 1}, transport.Selection{Name: "nope"}); !errors.Is(err, transport.ErrNotSupported) {
		t.Fatalf("unknown name: %v", err)
	}
	if _, err := transport.OpenSelected(context.Background(), nil, transport.Config{World: 1}, transport.Selection{Plugin: "/x"}); !errors.Is(err, transport.ErrNotSupported) {
		t.Fatalf("plugin without a loader: %v", err)
	}
	cands, err := transport.Candidates(transport.Selection{}, nil)
	if err != nil || cands[0].Name() != "fake-rdma" {
		t.Fatalf("candidates %v %v", cands, err)
	}
	for _, c := range cands {
		if c.Name() == "fake-unusable" || c.Name() == "fake-manual" {
			t.Errorf("candidate %s should not be chosen automatically", c.Name())
		}
	}
}
