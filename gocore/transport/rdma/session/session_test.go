package session

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/transport"
)

type peer struct {
	rank int
	done bool
}

func (p *peer) Handshake() (int, bool) { return p.rank, p.done }

func TestWaitHandshake(t *testing.T) {
	peers := []*peer{nil, {rank: 1}, {rank: 2}, nil}
	if got := Unheard(peers); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("Unheard = %v, want [1 2]", got)
	}
	polls := 0
	err := WaitHandshake(context.Background(), time.Second, func() (int, error) {
		polls++
		peers[polls%2+1].done = true // one completion a poll
		return 1, nil
	}, func() ([]int, error) { return Unheard(peers), nil })
	if err != nil || polls != 2 {
		t.Errorf("WaitHandshake = %v after %d polls", err, polls)
	}

	peers[2].done = false
	idle := func() (int, error) { return 0, nil }
	pending := func() ([]int, error) { return Unheard(peers), nil }
	start := time.Now()
	err = WaitHandshake(context.Background(), 20*time.Millisecond, idle, pending)
	if !errors.Is(err, transport.ErrTimeout) || !strings.Contains(err.Error(), "rank 2") || time.Since(start) > time.Second {
		t.Errorf("silent peer: %v after %v, want ErrTimeout naming rank 2", err, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WaitHandshake(ctx, time.Hour, idle, pending); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "rank 2") {
		t.Errorf("cancelled: %v", err)
	}
	boom := errors.New("boom")
	if err := WaitHandshake(context.Background(), time.Hour, idle, func() ([]int, error) { return Unheard(peers), boom }); !errors.Is(err, boom) {
		t.Errorf("pending's error: %v", err)
	}
	if err := WaitHandshake(context.Background(), time.Hour, func() (int, error) { return 0, boom }, pending); !errors.Is(err, boom) {
		t.Errorf("poll's error: %v", err)
	}
}

func TestCheckConnect(t *testing.T) {
	var f transport.Failure
	for _, tc := range []struct {
		connected, addressed bool
		blobs                int
		want                 string
	}{
		{false, true, 2, ""},
		{true, true, 2, "called twice"},
		{false, false, 2, "Address was not called"},
		{false, true, 1, "1 blobs for 2 ranks"},
	} {
		err := CheckConnect(&f, tc.connected, tc.addressed, tc.blobs, 2)
		if tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, transport.ErrInvalid) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc, err, tc.want)
		}
	}
	f.Fail(transport.ErrClosed)
	if err := CheckConnect(&f, false, true, 2, 2); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("closed: %v", err)
	}
}

func TestGateClosesOnce(t *testing.T) {
	var g Gate
	stops, releases := 0, 0
	boom := errors.New("boom")
	stop := func() { stops++ }
	release := func() error {
		releases++
		if !g.Closing {
			t.Error("release ran before Closing was set")
		}
		return boom
	}
	if err := g.Close(stop, release); !errors.Is(err, boom) {
		t.Errorf("first Close: %v", err)
	}
	if err := g.Close(stop, release); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if stops != 1 || releases != 1 {
		t.Errorf("stop ran %d times, release %d", stops, releases)
	}
}

func TestTeardown(t *testing.T) {
	var d Teardown
	d.Note("destroy QP", nil)
	d.Device(nil, nil, nil)
	if d.Err() != nil {
		t.Fatalf("nothing failed: %v", d.Err())
	}
	d.Note("destroy QP", errors.New("busy"))
	d.Add(errors.New("deregister buffer 3: busy"))
	if err := d.Err(); err == nil || !strings.Contains(err.Error(), "destroy QP: busy") || !strings.Contains(err.Error(), "buffer 3") {
		t.Errorf("Err = %v", err)
	}
}
