package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

func TestAllGather(t *testing.T) {
	for _, world := range []int{1, 2, 8} {
		t.Run(fmt.Sprintf("W=%d", world), func(t *testing.T) {
			checkLeaks(t)
			ss := startJob(t, world)
			errs := runRanks(t, ss, 30*time.Second, func(s *Session) error {
				if s.World() != world {
					return fmt.Errorf("World() = %d", s.World())
				}
				ctx := context.Background()
				for round := range 5 {
					res, err := s.AllGather(ctx, makeBlob(s.Rank(), round))
					if err != nil {
						return err
					}
					if err := checkGather(res, world, round); err != nil {
						return err
					}
					if round%2 == 1 {
						if err := s.Barrier(ctx); err != nil {
							return err
						}
					}
				}
				return nil
			})
			requireNoErrors(t, errs)
			for r, s := range ss {
				if s.Rank() != r {
					t.Errorf("session %d: Rank() = %d", r, s.Rank())
				}
				if err := s.Err(); err != nil {
					t.Errorf("rank %d: Err() = %v while alive", r, err)
				}
			}
			closeAll(ss)
		})
	}
}

// The blobs returned are the caller's: changing them must not change what others got, and
// appending to one must not run into the next.
func TestAllGatherResultsAreIndependent(t *testing.T) {
	checkLeaks(t)
	ss := startJob(t, 3)
	errs := runRanks(t, ss, 20*time.Second, func(s *Session) error {
		blob := []byte{byte(s.Rank()), 1, 2}
		res, err := s.AllGather(context.Background(), blob)
		if err != nil {
			return err
		}
		blob[0] = 99 // the caller reuses its buffer
		_ = append(res[0], 0xee)
		for r, b := range res {
			if len(b) != 3 || b[0] != byte(r) || b[1] != 1 || b[2] != 2 {
				return fmt.Errorf("blob %d = %v", r, b)
			}
			b[1] = 42
		}
		if err := s.Barrier(context.Background()); err != nil {
			return err
		}
		res, err = s.AllGather(context.Background(), []byte{byte(s.Rank())})
		if err != nil {
			return err
		}
		for r, b := range res {
			if len(b) != 1 || b[0] != byte(r) {
				return fmt.Errorf("second round: blob %d = %v", r, b)
			}
		}
		return nil
	})
	requireNoErrors(t, errs)
}

func TestBarrierWaitsForEveryRank(t *testing.T) {
	checkLeaks(t)
	const world = 5
	ss := startJob(t, world)
	var arrived atomic.Int32
	errs := runRanks(t, ss, 20*time.Second, func(s *Session) error {
		for round := range 3 {
			time.Sleep(time.Duration(s.Rank()*5) * time.Millisecond)
			arrived.Add(1)
			if err := s.Barrier(context.Background()); err != nil {
				return err
			}
			if n := arrived.Load(); n < int32(world*(round+1)) {
				return fmt.Errorf("round %d: left the barrier when only %d of %d had arrived", round, n, world*(round+1))
			}
			if err := s.Barrier(context.Background()); err != nil { // nobody races into the next round
				return err
			}
		}
		return nil
	})
	requireNoErrors(t, errs)
}

func TestNewStandalone(t *testing.T) {
	checkLeaks(t)
	const world = 4
	addr := freeAddr(t)
	ss := make([]*Session, world)
	t.Cleanup(func() { closeAll(ss) })
	errs := make([]error, world)
	done := make(chan int)
	for r := range world {
		go func() {
			ss[r], errs[r] = New(context.Background(), Config{Rank: r, World: world, RootAddr: addr, Secret: testSecret(), Timeout: 20 * time.Second})
			done <- r
		}()
	}
	for range world {
		<-done
	}
	requireNoErrors(t, errs)
	if t.Failed() {
		return
	}
	errs = runRanks(t, ss, 20*time.Second, func(s *Session) error {
		res, err := s.AllGather(context.Background(), makeBlob(s.Rank(), 3))
		if err != nil {
			return err
		}
		return checkGather(res, world, 3)
	})
	requireNoErrors(t, errs)
}

func TestNewWorldOne(t *testing.T) {
	checkLeaks(t)
	s, err := New(context.Background(), Config{World: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.AllGather(context.Background(), []byte("solo"))
	if err != nil || len(res) != 1 || string(res[0]) != "solo" {
		t.Fatalf("AllGather = %q, %v", res, err)
	}
	if err := s.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestCloseIsIdempotentAndEndsTheSessionEverywhere(t *testing.T) {
	checkLeaks(t)
	ss := startJob(t, 3)
	if err := ss[1].Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := ss[1].Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	select {
	case <-ss[1].Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	expectErr(t, "closed rank", ss[1].Err(), ErrClosed)
	_, err := ss[1].AllGather(context.Background(), nil)
	expectErr(t, "AllGather after Close", err, ErrClosed)
	for _, r := range []int{0, 2} {
		select {
		case <-ss[r].Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("rank %d: Done not closed after rank 1 closed", r)
		}
		expectErr(t, fmt.Sprintf("rank %d", r), ss[r].Err(), ErrPeerGone, "rank 1 closed its session")
		err := ss[r].Barrier(context.Background())
		expectErr(t, fmt.Sprintf("rank %d Barrier", r), err, ErrPeerGone, "rank 1 closed its session")
	}
	closeAll(ss)
}

func TestRootCloseEndsPeers(t *testing.T) {
	checkLeaks(t)
	ss := startJob(t, 3)
	errs := make(chan error, 2)
	for _, r := range []int{1, 2} {
		go func() {
			_, err := ss[r].AllGather(context.Background(), []byte("x"))
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	ss[0].Close()
	for range 2 {
		select {
		case err := <-errs:
			expectErr(t, "peer", err, ErrPeerGone, "rank 0 closed the session")
		case <-time.After(10 * time.Second):
			t.Fatal("peer AllGather did not return after rank 0 closed")
		}
	}
}

func TestFormatRanks(t *testing.T) {
	many := make([]int, 0, 300)
	for i := 0; i < 600; i += 2 {
		many = append(many, i)
	}
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, "[]"},
		{[]int{3}, "[3]"},
		{[]int{3, 7}, "[3 7]"},
		{[]int{1, 2}, "[1 2]"},
		{[]int{1, 2, 3, 7, 9, 10, 11, 12}, "[1-3 7 9-12]"},
		{[]int{1, 2, 4}, "[1 2 4]"},
	} {
		if got := formatRanks(tc.in); got != tc.want {
			t.Errorf("formatRanks(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
	got := formatRanks(many)
	if want := "... 236 more]"; len(got) > 400 || got[len(got)-len(want):] != want {
		t.Errorf("formatRanks(300 ranks) = %q", got)
	}
}

func TestErrorKindsSurviveTheWire(t *testing.T) {
	for k := kindOther; k < kindClosed; k++ {
		got, msg := decodeError(errorFrame(k, "m").head)
		if got != k || msg != "m" {
			t.Errorf("kind %d: decoded %d %q", k, got, msg)
		}
	}
	if k, _ := decodeError([]byte{byte(kindClosed)}); k != kindOther {
		t.Errorf("kindClosed accepted from the wire")
	}
	err := newError(kindTimeout, context.DeadlineExceeded, "x")
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrPeerGone) {
		t.Errorf("errors.Is on %v", err)
	}
}

// Many ranks at once: concurrent handshakes and a wide result (W=256).
func TestManyRanks(t *testing.T) {
	checkLeaks(t)
	const world = 256
	small := func(rank, round int) []byte {
		b := make([]byte, (rank*31+round*7)%200)
		for i := range b {
			b[i] = byte(rank ^ i ^ round)
		}
		return b
	}
	start := time.Now()
	ss := startJob(t, world, WithTimeout(time.Minute))
	t.Logf("rendezvous of %d ranks: %v", world, time.Since(start))
	requireNoErrors(t, runRanks(t, ss, time.Minute, func(s *Session) error {
		for round := range 2 {
			res, err := s.AllGather(context.Background(), small(s.Rank(), round))
			if err != nil {
				return err
			}
			for r, b := range res {
				if !bytes.Equal(b, small(r, round)) {
					return fmt.Errorf("round %d: blob of rank %d differs", round, r)
				}
			}
		}
		return s.Barrier(context.Background())
	}))
	closeAll(ss)
}
