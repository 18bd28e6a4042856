package fifo

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func newRing(t testing.TB, capacity int) *Ring { return newRingFormat(t, capacity, FormatSeq) }

func newRingFormat(t testing.TB, capacity int, f Format) *Ring {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, BytesFormat(capacity, f), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	r, err := InitFormat(mem, capacity, ClockMonotonic, f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLayoutSizes(t *testing.T) {
	if got := Bytes(0); got != 5*LineBytes {
		t.Fatalf("control block of %d bytes, want %d", got, 5*LineBytes)
	}
	for _, f := range Layout() {
		if f.Name == "sizeof(mk_fifo_cmd)" && f.Offset != CmdBytes {
			t.Fatalf("Cmd is %d bytes", f.Offset)
		}
	}
}

func TestInitAttach(t *testing.T) {
	r := newRing(t, 64)
	a, err := Attach(r.Memory())
	if err != nil {
		t.Fatal(err)
	}
	if a.Capacity() != 64 || a.Clock() != ClockMonotonic {
		t.Fatalf("attached capacity %d clock %d", a.Capacity(), a.Clock())
	}
	if _, err := Attach(make([]byte, Bytes(4))); !errors.Is(err, ErrLayout) {
		t.Errorf("attach to zeroes: %v", err)
	}
	if _, err := Init(r.Memory(), 48, ClockNone); !errors.Is(err, ErrLayout) {
		t.Errorf("capacity 48: %v", err)
	}
	if _, err := Init(r.Memory(), 1<<12, ClockNone); !errors.Is(err, ErrLayout) {
		t.Errorf("capacity beyond the memory: %v", err)
	}
}

// TestProducersConsumer runs 4 producers against one consumer through a small ring and
// checks every command arrives exactly once, intact, in ticket order, in both formats.
func TestProducersConsumer(t *testing.T) {
	for _, f := range []Format{FormatSeq, FormatLL} {
		t.Run(f.String(), func(t *testing.T) { testProducersConsumer(t, f) })
	}
}

func testProducersConsumer(t *testing.T, f Format) {
	r := newRingFormat(t, 16, f)
	const producers, each = 4, 5000
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				cmd := Cmd{Kind: KindWrite, Peer: uint16(p), LocalOff: uint64(i), RemoteOff: uint64(i) * 3, Bytes: uint64(p*each + i), EnqueueNS: MonotonicNanos()}
				if _, err := r.Push(&cmd, 10*time.Second); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	next := make([]uint64, producers)
	var pos uint64
	deadline := time.Now().Add(30 * time.Second)
	for pos < producers*each {
		c := r.Published(pos)
		if c == nil {
			if time.Now().After(deadline) {
				t.Fatalf("stuck at ticket %d", pos)
			}
			continue
		}
		if c.Kind != KindWrite || c.LocalOff != next[c.Peer] || c.RemoteOff != 3*c.LocalOff || c.Bytes != uint64(c.Peer)*each+c.LocalOff {
			t.Fatalf("ticket %d: torn or reordered command %+v (want local_off %d)", pos, *c, next[c.Peer])
		}
		next[c.Peer]++
		pos++
		r.SetTail(pos)
		r.SetDone(pos)
	}
	wg.Wait()
}

func TestCreditTimeoutAndResume(t *testing.T) {
	for _, f := range []Format{FormatSeq, FormatLL} {
		t.Run(f.String(), func(t *testing.T) { testCreditTimeoutAndResume(t, f) })
	}
}

func testCreditTimeoutAndResume(t *testing.T, f Format) {
	r := newRingFormat(t, 4, f)
	cmd := Cmd{Kind: KindFence}
	for range 4 {
		if _, ok, err := r.TryPush(&cmd); !ok || err != nil {
			t.Fatalf("TryPush into a free slot: %v %v", ok, err)
		}
	}
	if _, ok, _ := r.TryPush(&cmd); ok {
		t.Fatal("TryPush into a full ring succeeded")
	}
	ticket, err := r.Push(&cmd, 20*time.Millisecond)
	if !errors.Is(err, ErrTimeout) || ticket != 4 {
		t.Fatalf("Push into a full ring: ticket %d, %v", ticket, err)
	}
	if r.Depth() != 4 {
		t.Fatalf("depth %d, want 4", r.Depth())
	}
	r.SetTail(1)
	if err := r.Resume(&cmd, ticket, time.Second); err != nil {
		t.Fatal(err)
	}
	if r.Published(4) == nil {
		t.Fatal("resumed ticket not published")
	}
	if err := r.WaitDone(0, 10*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("WaitDone before done: %v", err)
	}
	r.SetDone(1)
	if err := r.WaitDone(0, time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestFailStopsProducers(t *testing.T) {
	r := newRing(t, 2)
	cmd := Cmd{Kind: KindWrite}
	r.Push(&cmd, time.Second)
	r.Push(&cmd, time.Second)
	errc := make(chan error)
	go func() {
		_, err := r.Push(&cmd, 10*time.Second)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	r.Fail(ErrProxy, 3, 1)
	if err := <-errc; !errors.Is(err, ErrFailed) {
		t.Fatalf("blocked producer got %v, want ErrFailed", err)
	}
	r.Fail(ErrClosed, 9, 9)
	if code, peer, ticket := r.Failure(); code != ErrProxy || peer != 3 || ticket != 1 {
		t.Fatalf("failure %d/%d/%d: the first Fail must win", code, peer, ticket)
	}
}

// TestFailRecordIsNeverTorn races many failing parties against readers: the record a
// reader sees is always one party's complete (code, peer, ticket), and it never changes
// once seen.
func TestFailRecordIsNeverTorn(t *testing.T) {
	for round := range 50 {
		r := newRing(t, 4)
		const parties = 8
		var wg sync.WaitGroup
		start := make(chan struct{})
		wins := make(chan uint32, parties)
		for i := range parties {
			wg.Add(1)
			go func(i uint32) {
				defer wg.Done()
				<-start
				// Each party's details are derived from its code: a torn record mixes them.
				if r.Fail(ErrProducer+i%3, 100+i, uint64(1000+i)) {
					wins <- i
				}
			}(uint32(i))
		}
		stop := make(chan struct{})
		torn := make(chan string, 1)
		go func() {
			var first uint32
			for {
				select {
				case <-stop:
					close(torn)
					return
				default:
				}
				code, peer, ticket := r.Failure()
				if code == ErrNone {
					if peer != 0 || ticket != 0 {
						torn <- fmt.Sprintf("no error but details %d/%d", peer, ticket)
						return
					}
					continue
				}
				i := peer - 100
				if i >= parties || code != ErrProducer+i%3 || ticket != uint64(1000+i) || (first != 0 && first != peer) {
					torn <- fmt.Sprintf("record %d/%d/%d", code, peer, ticket)
					return
				}
				first = peer
			}
		}()
		close(start)
		wg.Wait()
		close(stop)
		if msg, bad := <-torn; bad {
			t.Fatalf("round %d: torn failure record: %s", round, msg)
		}
		close(wins)
		n := 0
		var winner uint32
		for w := range wins {
			n++
			winner = w
		}
		if code, peer, _ := r.Failure(); n != 1 || peer != 100+winner || code != ErrProducer+winner%3 {
			t.Fatalf("round %d: %d winners, record peer %d, winner %d", round, n, peer, winner)
		}
		if r.Ctrl().ErrorState != ErrorSet {
			t.Fatalf("round %d: error_state %d after Fail, want %d", round, r.Ctrl().ErrorState, ErrorSet)
		}
	}
}

func TestFlagWait(t *testing.T) {
	flags := make([]byte, 64)
	f := Flag(flags, 3)
	go func() {
		time.Sleep(5 * time.Millisecond)
		atomic.StoreUint64(f, 7)
	}()
	if err := WaitFlag(f, 7, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := WaitFlag(f, 8, 5*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("WaitFlag past the value: %v", err)
	}
}

func TestMonotonicNanos(t *testing.T) {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	got := MonotonicNanos()
	if d := int64(got) - ts.Nano(); d < 0 || d > int64(50*time.Millisecond) {
		t.Fatalf("MonotonicNanos is %d ns from CLOCK_MONOTONIC", d)
	}
}

func TestPushDoesNotAllocate(t *testing.T) {
	r := newRing(t, 1024)
	cmd := Cmd{Kind: KindWrite}
	var pos uint64
	allocs := testing.AllocsPerRun(1000, func() {
		r.Push(&cmd, time.Second)
		r.Published(pos)
		pos++
		r.SetTail(pos)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per push", allocs)
	}
}
