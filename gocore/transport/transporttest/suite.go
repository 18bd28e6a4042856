package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/transport"
)

// Suite describes the backend under test.
type Suite struct {
	// Open opens one rank's endpoint (e.g. tcp.Open, or a closure adding test options).
	Open OpenFunc
	// Light runs fewer iterations, for backends with a slow data path (plugins, injected
	// delays).
	Light bool
	// Allocates skips the zero-allocation check, for test-only fault injection modes.
	Allocates bool
}

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, s Suite) {
	tests := []struct {
		name string
		fn   func(*testing.T, Suite)
	}{
		{"ExactRagged", testExactRagged},
		{"SignalAfterData", testSignalAfterData},
		{"CoversEarlierWrites", testCoversEarlierWrites},
		{"MonotonicFlag", testMonotonicFlag},
		{"AllToAll", testAllToAll},
		{"BackPressure", testBackPressure},
		{"InvalidOps", testInvalidOps},
		{"InvalidRegister", testInvalidRegister},
		{"MalformedBlobs", testMalformedBlobs},
		{"PeerClosed", testPeerClosed},
		{"CloseTwice", testCloseTwice},
		{"NoAllocs", testNoAllocs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, s) })
	}
}

func (s Suite) iters(n int) int {
	if s.Light {
		return max(n/4, 2)
	}
	return n
}

func fill(b []byte, rng *rand.Rand) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// testExactRagged writes ragged sizes at ragged offsets and checks every destination byte:
// the written range equals the source, the poisoned bytes around it are untouched.
func testExactRagged(t *testing.T, s Suite) {
	j := StartJob(t, s.Open, JobOptions{World: 2})
	ds := j.Drivers(t)
	src, dst := j.Ranks[0], j.Ranks[1]
	rng := rand.New(rand.NewPCG(1, 2))
	fill(src.Src.Bytes(), rng)
	poison := bytes.Repeat([]byte{0xA5}, dst.Data.Len())
	sizes := []int{1, 2, 3, 7, 8, 63, 64, 65, 4095, 4096, 4097, 65537, 1<<20 + 3, 3<<20 + 11}
	for i, n := range sizes {
		srcOff := rng.IntN(src.Src.Len() - n + 1)
		dstOff := rng.IntN(dst.Data.Len() - n + 1)
		copy(dst.Data.Bytes(), poison)
		op := transport.Op{Kind: transport.OpWriteSignal, Peer: 1, Local: BufSrc, LocalOff: uint64(srcOff),
			Remote: BufData, RemoteOff: uint64(dstOff), Len: uint64(n),
			SignalBuf: BufFlags, SignalOff: 0, SignalValue: uint64(i + 1), Cookie: uint64(i)}
		if err := ds[0].Do(op); err != nil {
			t.Fatalf("write %d bytes: %v", n, err)
		}
		if err := WaitFlag(dst.Flag(0), uint64(i+1), 10*time.Second); err != nil {
			t.Fatalf("write %d bytes: %v", n, err)
		}
		d := dst.Data.Bytes()
		if !bytes.Equal(d[dstOff:dstOff+n], src.Src.Bytes()[srcOff:srcOff+n]) {
			t.Fatalf("write of %d bytes from %d to %d: data differs at byte %d", n, srcOff, dstOff, firstDiff(d[dstOff:dstOff+n], src.Src.Bytes()[srcOff:srcOff+n]))
		}
		if !bytes.Equal(d[:dstOff], poison[:dstOff]) || !bytes.Equal(d[dstOff+n:], poison[dstOff+n:]) {
			t.Fatalf("write of %d bytes to [%d, %d) touched bytes outside it", n, dstOff, dstOff+n)
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// testSignalAfterData ping-pongs large writes whose content changes every round; the
// receiver checks the whole buffer the moment it sees the flag.
func testSignalAfterData(t *testing.T, s Suite) {
	const n = 1 << 20
	j := StartJob(t, s.Open, JobOptions{World: 2})
	ds := j.Drivers(t)
	a, b := j.Ranks[0], j.Ranks[1]
	errc := make(chan error, 1)
	rounds := s.iters(24)
	go func() {
		for i := 1; i <= rounds; i++ {
			if err := WaitFlag(b.Flag(1), uint64(i), 10*time.Second); err != nil {
				errc <- fmt.Errorf("rank 1, round %d: %w", i, err)
				return
			}
			d := b.Data.Bytes()
			for k := 0; k < n; k += 8 {
				if d[k] != byte(i) || d[k+7] != byte(i) {
					errc <- fmt.Errorf("round %d: rank 1 saw the signal before byte %d arrived (holds %d)", i, k, d[k])
					return
				}
			}
			ack := transport.Op{Kind: transport.OpWriteSignal, Peer: 0, SignalBuf: BufFlags, SignalOff: 8 * 2, SignalValue: uint64(i)}
			if err := ds[1].Do(ack); err != nil {
				errc <- fmt.Errorf("rank 1 ack %d: %w", i, err)
				return
			}
		}
		errc <- nil
	}()
	for i := 1; i <= rounds; i++ {
		sb := a.Src.Bytes()[:n]
		for k := range sb {
			sb[k] = byte(i)
		}
		op := transport.Op{Kind: transport.OpWriteSignal, Peer: 1, Local: BufSrc, Remote: BufData, Len: n,
			SignalBuf: BufFlags, SignalOff: 8, SignalValue: uint64(i), Cookie: uint64(i)}
		if err := ds[0].Do(op); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if err := WaitFlag(a.Flag(2), uint64(i), 10*time.Second); err != nil {
			t.Fatalf("rank 0 waiting for ack %d: %v", i, err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// testCoversEarlierWrites posts many plain writes and then a signal: with OrderedWrites
// right away, otherwise once they completed (the proxy's fence). The signal must cover all.
func testCoversEarlierWrites(t *testing.T, s Suite) {
	j := StartJob(t, s.Open, JobOptions{World: 2})
	ds := j.Drivers(t)
	a, b := j.Ranks[0], j.Ranks[1]
	ordered := a.T.Caps().OrderedWrites
	const chunk, chunks = 4099, 64
	for round := 1; round <= s.iters(8); round++ {
		sb := a.Src.Bytes()
		for k := range chunk * chunks {
			sb[k] = byte(k*7 + round)
		}
		ops := make([]transport.Op, 0, chunks+1)
		for c := range chunks {
			ops = append(ops, transport.Op{Kind: transport.OpWrite, Peer: 1, Local: BufSrc, LocalOff: uint64(c * chunk),
				Remote: BufData, RemoteOff: uint64(c * chunk), Len: chunk, Cookie: uint64(c)})
		}
		sig := transport.Op{Kind: transport.OpWriteSignal, Peer: 1, SignalBuf: BufFlags, SignalOff: 8 * 3, SignalValue: uint64(round), Cookie: 999}
		if ordered {
			if err := ds[0].Do(append(ops, sig)...); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := ds[0].Do(ops...); err != nil {
				t.Fatal(err)
			}
			if err := ds[0].Do(sig); err != nil {
				t.Fatal(err)
			}
		}
		if err := WaitFlag(b.Flag(3), uint64(round), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := b.Data.Bytes()[:chunk*chunks]; !bytes.Equal(d, sb[:chunk*chunks]) {
			t.Fatalf("round %d (ordered=%v): the signal arrived before byte %d of the earlier writes", round, ordered, firstDiff(d, sb[:chunk*chunks]))
		}
	}
}

// testMonotonicFlag signals 1..N into one word; a sampler checks it never decreases.
func testMonotonicFlag(t *testing.T, s Suite) {
	j := StartJob(t, s.Open, JobOptions{World: 2})
	ds := j.Drivers(t)
	b := j.Ranks[1]
	n := s.iters(400)
	var stop atomic.Bool
	errc := make(chan error, 1)
	go func() {
		var last uint64
		for !stop.Load() {
			v := atomic.LoadUint64(b.Flag(4))
			if v < last {
				errc <- fmt.Errorf("flag went back from %d to %d", last, v)
				return
			}
			last = v
		}
		errc <- nil
	}()
	ops := make([]transport.Op, n)
	for i := range ops {
		ops[i] = transport.Op{Kind: transport.OpWriteSignal, Peer: 1, SignalBuf: BufFlags, SignalOff: 8 * 4, SignalValue: uint64(i + 1), Cookie: uint64(i)}
	}
	if err := ds[0].Do(ops...); err != nil {
		t.Fatal(err)
	}
	err := WaitFlag(b.Flag(4), uint64(n), 10*time.Second)
	stop.Store(true)
	if e := <-errc; e != nil {
		t.Fatal(e)
	}
	if err != nil {
		t.Fatal(err)
	}
	if v := atomic.LoadUint64(b.Flag(4)); v != uint64(n) {
		t.Fatalf("flag ends at %d, want %d", v, n)
	}
}

// testAllToAll has every rank of 4 write a ragged slab into every other rank at the same
// time, each signalling its own flag word.
func testAllToAll(t *testing.T, s Suite) {
	const world = 4
	j := StartJob(t, s.Open, JobOptions{World: world, DataSize: 1 << 20})
	ds := j.Drivers(t)
	const slab = 200001
	var wg sync.WaitGroup
	errs := make([]error, world)
	for r := range world {
		sb := j.Ranks[r].Src.Bytes()
		for k := range slab {
			sb[k] = byte(k*13 + r*31 + 1)
		}
	}
	rounds := s.iters(4)
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 1; round <= rounds; round++ {
				var ops []transport.Op
				for p := range world {
					if p == r {
						continue
					}
					ops = append(ops, transport.Op{Kind: transport.OpWriteSignal, Peer: int32(p), Local: BufSrc, Remote: BufData,
						RemoteOff: uint64(r * slab), Len: slab, SignalBuf: BufFlags, SignalOff: uint64(8 * (10 + r)), SignalValue: uint64(round)})
				}
				if err := ds[r].Do(ops...); err != nil {
					errs[r] = fmt.Errorf("rank %d round %d: %w", r, round, err)
					return
				}
				for p := range world {
					if p == r {
						continue
					}
					if err := WaitFlag(j.Ranks[r].Flag(10+p), uint64(round), 10*time.Second); err != nil {
						errs[r] = fmt.Errorf("rank %d waiting for rank %d, round %d: %w", r, p, round, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r := range world {
		for p := range world {
			if p == r {
				continue
			}
			got := j.Ranks[r].Data.Bytes()[p*slab : (p+1)*slab]
			if want := j.Ranks[p].Src.Bytes()[:slab]; !bytes.Equal(got, want) {
				t.Errorf("rank %d: slab from rank %d differs at byte %d", r, p, firstDiff(got, want))
			}
		}
	}
}

// testBackPressure posts many more ops than any queue holds without waiting; Post may
// take a prefix, and everything must complete exactly once.
func testBackPressure(t *testing.T, s Suite) {
	j := StartJob(t, s.Open, JobOptions{World: 2})
	ds := j.Drivers(t)
	n := s.iters(20000)
	ops := make([]transport.Op, n)
	for i := range ops {
		ops[i] = transport.Op{Kind: transport.OpWrite, Peer: 1, Local: BufSrc, LocalOff: uint64(i % 1000 * 64),
			Remote: BufData, RemoteOff: uint64(i % 1000 * 64), Len: 64, Cookie: uint64(i)}
	}
	ops = append(ops, transport.Op{Kind: transport.OpWriteSignal, Peer: 1, SignalBuf: BufFlags, SignalOff: 8 * 5, SignalValue: 1, Cookie: uint64(n)})
	seen := make([]bool, n+1)
	tr := j.Ranks[0].T
	ds[0].Stop() // drive rank 0 from here to see every completion
	done := make([]transport.Completion, 256)
	posted, finished := 0, 0
	deadline := time.Now().Add(30 * time.Second)
	for finished < len(ops) {
		if posted < len(ops) {
			k, err := tr.Post(ops[posted:])
			if err != nil {
				t.Fatal(err)
			}
			posted += k
		}
		k, err := tr.Poll(done)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range done[:k] {
			if c.Err != nil {
				t.Fatalf("op %d: %v", c.Cookie, c.Err)
			}
			if c.Cookie > uint64(n) || seen[c.Cookie] {
				t.Fatalf("completion for cookie %d unexpected or repeated", c.Cookie)
			}
			seen[c.Cookie] = true
		}
		finished += k
		if k == 0 && time.Now().After(deadline) {
			t.Fatalf("%d of %d ops unfinished", len(ops)-finished, len(ops))
		}
	}
	if err := WaitFlag(j.Ranks[1].Flag(5), 1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// testInvalidOps checks that bad ops are refused with ErrInvalid and leave the transport
// usable.
func testInvalidOps(t *testing.T, s Suite) {
	j := StartJob(t, s.Open, JobOptions{World: 2, DataSize: 1 << 16})
	tr := j.Ranks[0].T
	good := transport.Op{Kind: transport.OpWrite, Peer: 1, Local: BufSrc, Remote: BufData, Len: 16}
	bad := map[string]transport.Op{}
	add := func(name string, edit func(*transport.Op)) {
		op := good
		edit(&op)
		bad[name] = op
	}
	add("self peer", func(o *transport.Op) { o.Peer = 0 })
	add("peer out of range", func(o *transport.Op) { o.Peer = 7 })
	add("negative peer", func(o *transport.Op) { o.Peer = -1 })
	add("unknown local buffer", func(o *transport.Op) { o.Local = 99 })
	add("unknown remote buffer", func(o *transport.Op) { o.Remote = 99 })
	add("local range past the end", func(o *transport.Op) { o.LocalOff = 1<<16 - 8 })
	add("remote range past the end", func(o *transport.Op) { o.RemoteOff = 1 << 16 })
	add("offset overflow", func(o *transport.Op) { o.RemoteOff = ^uint64(0) - 4 })
	add("zero kind", func(o *transport.Op) { o.Kind = 0 })
	add("zero-length write", func(o *transport.Op) { o.Len = 0 })
	add("misaligned flag", func(o *transport.Op) {
		o.Kind, o.SignalBuf, o.SignalOff = transport.OpWriteSignal, BufFlags, 4
	})
	add("flag past the end", func(o *transport.Op) {
		o.Kind, o.SignalBuf, o.SignalOff = transport.OpWriteSignal, BufFlags, 8*FlagWords
	})
	add("unknown flag buffer", func(o *transport.Op) {
		o.Kind, o.SignalBuf = transport.OpWriteSignal, 77
	})
	for name, op := range bad {
		n, err := tr.Post([]transport.Op{op})
		if n != 0 || !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("%s: Post = %d, %v; want 0, ErrInvalid", name, n, err)
		}
	}
	if err := tr.Err(); err != nil {
		t.Fatalf("an invalid op broke the transport: %v", err)
	}
	ds := j.Drivers(t)
	if err := ds[0].Do(good); err != nil {
		t.Fatalf("a good op after bad ones: %v", err)
	}
}

func testInvalidRegister(t *testing.T, s Suite) {
	j := StartJob(t, s.Open, JobOptions{World: 2, DataSize: 1 << 16})
	tr := j.Ranks[0].T
	if err := tr.Register(BufData, j.Ranks[0].Data.Region()); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("registering an ID twice: %v, want ErrInvalid", err)
	}
	if err := tr.Register(50, transport.Region{}); err == nil {
		t.Errorf("registering an empty region succeeded")
	}
}

// testMalformedBlobs hands Connect garbage for the peer's blob: it must fail (not panic,
// not hang past the timeout).
func testMalformedBlobs(t *testing.T, s Suite) {
	cases := map[string]func(good []byte) []byte{
		"empty":     func([]byte) []byte { return nil },
		"truncated": func(g []byte) []byte { return g[:len(g)/2] },
		"garbage": func(g []byte) []byte {
			b := make([]byte, len(g))
			fill(b, rand.New(rand.NewPCG(3, 4)))
			return b
		},
		"huge": func([]byte) []byte { return bytes.Repeat([]byte{0xff}, transport.MaxBlobSize+1) },
	}
	for name, mangle := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cfg := transport.Config{Rank: 0, World: 2, AllPeers: true, Key: TestKey, Timeout: 2 * time.Second, BindHost: "127.0.0.1"}
			a, err := s.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			cfg.Rank = 1
			b, err := s.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			own, err := a.Address()
			if err != nil {
				t.Fatal(err)
			}
			peer, err := b.Address()
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = a.Connect(ctx, [][]byte{own, mangle(peer)})
			if err == nil {
				t.Fatal("Connect accepted a malformed blob")
			}
			if time.Since(start) > 8*time.Second {
				t.Errorf("Connect took %v to refuse a malformed blob", time.Since(start))
			}
		})
	}
}

// testPeerClosed closes rank 1; rank 0's data path must fail naming it within the timeout.
func testPeerClosed(t *testing.T, s Suite) {
	j := StartJob(t, s.Open, JobOptions{World: 3, DataSize: 1 << 16, Timeout: 3 * time.Second})
	if err := j.Ranks[1].T.Close(); err != nil {
		t.Fatalf("close rank 1: %v", err)
	}
	tr := j.Ranks[0].T
	op := transport.Op{Kind: transport.OpWriteSignal, Peer: 1, Local: BufSrc, Remote: BufData, Len: 64,
		SignalBuf: BufFlags, SignalValue: 1}
	done := make([]transport.Completion, 16)
	deadline := time.Now().Add(10 * time.Second)
	var failure error
	for failure == nil {
		if time.Now().After(deadline) {
			t.Fatal("rank 0 still works 10 s after rank 1 closed")
		}
		if _, err := tr.Post([]transport.Op{op}); err != nil {
			failure = err
			break
		}
		n, err := tr.Poll(done)
		if err != nil {
			failure = err
			break
		}
		for _, c := range done[:n] {
			if c.Err != nil {
				failure = c.Err
			}
		}
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(failure, transport.ErrPeerGone) && !errors.Is(failure, transport.ErrTimeout) {
		t.Errorf("failure %v does not match ErrPeerGone or ErrTimeout", failure)
	}
	if !strings.Contains(failure.Error(), "rank 1") {
		t.Errorf("failure %q does not name rank 1", failure)
	}
	select {
	case <-tr.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the failure")
	}
	if tr.Err() == nil {
		t.Error("Err is nil after Done")
	}
}

func testCloseTwice(t *testing.T, s Suite) {
	j := StartJob(t, s.Open, JobOptions{World: 2, DataSize: 1 << 16})
	tr := j.Ranks[0].T
	if err := tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if !errors.Is(tr.Err(), transport.ErrClosed) {
		t.Errorf("Err after Close = %v, want ErrClosed", tr.Err())
	}
	if _, err := tr.Post([]transport.Op{{Kind: transport.OpWrite, Peer: 1, Local: BufSrc, Remote: BufData, Len: 8}}); err == nil {
		t.Error("Post after Close succeeded")
	}
}

// testNoAllocs measures a post → completion → arrival cycle with testing.AllocsPerRun,
// both ranks driven from this goroutine.
func testNoAllocs(t *testing.T, s Suite) {
	if s.Allocates {
		t.Skip("the backend allocates in this (test-only) mode")
	}
	j := StartJob(t, s.Open, JobOptions{World: 2, DataSize: 1 << 16})
	a, b := j.Ranks[0], j.Ranks[1]
	ops := []transport.Op{{Kind: transport.OpWriteSignal, Peer: 1, Local: BufSrc, Remote: BufData, Len: 256,
		SignalBuf: BufFlags, SignalOff: 8 * 6}}
	done := make([]transport.Completion, 8)
	var seq uint64
	var failure error
	step := func() {
		seq++
		ops[0].SignalValue, ops[0].Cookie = seq, seq
		for posted := 0; posted == 0; {
			n, err := a.T.Post(ops)
			if err != nil {
				failure = err
				return
			}
			posted = n
			if _, err := a.T.Poll(done); err != nil {
				failure = err
				return
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for atomic.LoadUint64(b.Flag(6)) < seq {
			if _, err := a.T.Poll(done); err != nil {
				failure = err
				return
			}
			if _, err := b.T.Poll(done); err != nil {
				failure = err
				return
			}
			if time.Now().After(deadline) {
				failure = errors.New("no arrival within 5 s")
				return
			}
			// AllocsPerRun runs at GOMAXPROCS=1: park briefly so the backend's goroutines
			// and the network poller run (Gosched alone leaves the poller to sysmon, 10 ms).
			time.Sleep(time.Microsecond)
		}
		_, _ = a.T.Poll(done)
	}
	for range 200 { // warm up: connections, lazily grown queues
		step()
	}
	allocs := testing.AllocsPerRun(500, step)
	if failure != nil {
		t.Fatal(failure)
	}
	if allocs > 0 {
		t.Errorf("%.2f allocations per write+signal, want 0", allocs)
	}
}
