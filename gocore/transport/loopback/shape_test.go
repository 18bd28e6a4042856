package loopback_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/loopback"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

func openWith(opts ...loopback.Option) transporttest.OpenFunc {
	return func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
		return loopback.Open(ctx, cfg, opts...)
	}
}

// The transport contract holds with the link shaped and large ops copied in pieces by
// workers (three of them, whatever this machine's CPU count).
func TestConformanceShapedParallel(t *testing.T) {
	transporttest.Run(t, transporttest.Suite{Light: true, Open: openWith(
		loopback.WithShape(transport.LinkShape{BytesPerSecond: 20e9, Latency: 20 * time.Microsecond}),
		loopback.WithCopyWorkers(3))})
}

func TestConformanceParallelCopy(t *testing.T) {
	transporttest.Run(t, transporttest.Suite{Light: true, Open: openWith(loopback.WithCopyWorkers(3))})
}

// drain polls tr until want completions came back or the deadline passed; it returns when
// each cookie completed (ns after start) and checks completions come in posting order.
func drain(t *testing.T, tr transport.Transport, want int, start time.Time) []int64 {
	t.Helper()
	at := make([]int64, 0, want)
	done := make([]transport.Completion, 64)
	for deadline := time.Now().Add(20 * time.Second); len(at) < want; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d ops completed in 20 s", len(at), want)
		}
		n, err := tr.Poll(done)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Since(start).Nanoseconds()
		for _, c := range done[:n] {
			if c.Err != nil {
				t.Fatal(c.Err)
			}
			if int(c.Cookie) != len(at) {
				t.Fatalf("completion %d came back as number %d: out of order", c.Cookie, len(at))
			}
			at = append(at, now)
		}
	}
	return at
}

// The link's rate: 8 MiB in 512 KiB writes (copied in pieces by workers) at 0.1 GB/s take
// 83.9 ms. They may never arrive sooner (checked on every attempt), each op no sooner than its
// own bytes left, and the data is exact. Not much later either (the copies, a few ms, overlap
// the link's time): a starved test machine can stretch one attempt, so the upper bound (+30% +
// 20 ms) must hold on one of three.
func TestShapeRate(t *testing.T) {
	const rate, chunk, chunks = 0.1e9, 512 << 10, 16
	j := transporttest.StartJob(t, openWith(loopback.WithShape(transport.LinkShape{BytesPerSecond: rate}), loopback.WithCopyWorkers(2)),
		transporttest.JobOptions{World: 2, DataSize: chunk * chunks})
	a, b := j.Ranks[0], j.Ranks[1]
	rng := rand.New(rand.NewPCG(3, 4))
	ideal := float64(chunk*chunks) / rate * 1e9
	var took []float64
	for attempt := 1; attempt <= 3; attempt++ {
		src := a.Src.Bytes()
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		ops := make([]transport.Op, chunks)
		for i := range ops {
			ops[i] = transport.Op{Kind: transport.OpWrite, Peer: 1, Local: transporttest.BufSrc, LocalOff: uint64(i * chunk),
				Remote: transporttest.BufData, RemoteOff: uint64(i * chunk), Len: chunk, Cookie: uint64(i)}
		}
		last := &ops[chunks-1]
		last.Kind, last.SignalBuf, last.SignalValue = transport.OpWriteSignal, transporttest.BufFlags, uint64(attempt)
		time.Sleep(5 * time.Millisecond) // the link is idle again (its booked time has passed)
		start := time.Now()
		if n, err := a.T.Post(ops); n != chunks || err != nil {
			t.Fatalf("Post = %d, %v", n, err)
		}
		at := drain(t, a.T, chunks, start)
		for i := range chunks { // op i completes when its own bytes have left: (i+1)/16 of the total
			if want := ideal * float64(i+1) / chunks; float64(at[i]) < 0.99*want {
				t.Fatalf("op %d completed at %.2f ms, before its bytes could leave (%.2f ms)", i, float64(at[i])/1e6, want/1e6)
			}
		}
		if atomic.LoadUint64(b.Flag(0)) != uint64(attempt) || !bytes.Equal(b.Data.Bytes(), src) {
			t.Fatal("the shaped writes did not place the exact data and the signal")
		}
		got := float64(at[chunks-1])
		took = append(took, got/1e6)
		if got <= 1.3*ideal+20e6 {
			t.Logf("8 MiB at 0.1 GB/s: %.2f ms (ideal %.2f; attempts %v ms)", got/1e6, ideal/1e6, took)
			return
		}
	}
	t.Fatalf("8 MiB at 0.1 GB/s took %v ms in three attempts, want %.1f ms (+30%% + 20 ms)", took, ideal/1e6)
}

// The link's latency: a pure signal is visible at the peer no sooner than the latency
// after its Post, and its median arrives within a loaded machine's scheduling noise.
func TestShapeLatency(t *testing.T) {
	const lat = 300 * time.Microsecond
	j := transporttest.StartJob(t, openWith(loopback.WithShape(transport.LinkShape{Latency: lat})), transporttest.JobOptions{World: 2, DataSize: 1 << 16})
	a, b := j.Ranks[0], j.Ranks[1]
	var delays []time.Duration
	done := make([]transport.Completion, 4)
	completed := 0
	for i := 1; i <= 60; i++ {
		op := transport.Op{Kind: transport.OpWriteSignal, Peer: 1, SignalBuf: transporttest.BufFlags, SignalOff: 16, SignalValue: uint64(i), Cookie: uint64(i)}
		start := time.Now()
		if n, err := a.T.Post([]transport.Op{op}); n != 1 || err != nil {
			t.Fatalf("Post = %d, %v", n, err)
		}
		for atomic.LoadUint64(b.Flag(2)) < uint64(i) {
			n, err := a.T.Poll(done)
			if err != nil {
				t.Fatal(err)
			}
			completed += n
			if time.Since(start) > 5*time.Second {
				t.Fatalf("signal %d not placed in 5 s", i)
			}
		}
		d := time.Since(start)
		if d < lat {
			t.Fatalf("signal %d arrived after %v, before the link's latency %v", i, d, lat)
		}
		delays = append(delays, d)
		for completed < i { // its completion, before the next op
			n, err := a.T.Poll(done)
			if err != nil {
				t.Fatal(err)
			}
			completed += n
		}
	}
	sort.Slice(delays, func(i, k int) bool { return delays[i] < delays[k] })
	if p50 := delays[len(delays)/2]; p50 > lat+lat/2 {
		t.Fatalf("median signal delay %v, want %v (+50%%)", p50, lat)
	}
	t.Logf("latency %v: p50 %v, max %v", lat, delays[len(delays)/2], delays[len(delays)-1])
}

// Backend.Open (what the data path uses) honours MKERNEL_NET_EMULATE and refuses a bad one.
func TestBackendReadsEmulate(t *testing.T) {
	t.Setenv(transport.EnvNetEmulate, "2GB/s,50us")
	tr, err := loopback.Backend{}.Open(context.Background(), transport.Config{Rank: 0, World: 1, Key: transporttest.TestKey})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if got := tr.(*loopback.Transport).Shape(); got != (transport.LinkShape{BytesPerSecond: 2e9, Latency: 50 * time.Microsecond}) {
		t.Fatalf("shape %v", got)
	}
	t.Setenv(transport.EnvNetEmulate, "fast")
	if _, err := (loopback.Backend{}).Open(context.Background(), transport.Config{Rank: 0, World: 1}); err == nil {
		t.Fatal("a malformed MKERNEL_NET_EMULATE was accepted")
	}
	t.Setenv(transport.EnvNetEmulate, "")
	t.Setenv(loopback.EnvCopyThreads, "-2")
	if _, err := (loopback.Backend{}).Open(context.Background(), transport.Config{Rank: 0, World: 1}); err == nil {
		t.Fatal("a malformed MKERNEL_NET_COPY_THREADS was accepted")
	}
}

// Copies of consecutive ops overlap (workers), but a write whose destination overlaps an
// earlier one still being copied waits for it: the later write wins, as in posting order.
func TestParallelCopiesKeepOverlappingWritesInOrder(t *testing.T) {
	const big = 4 << 20
	j := transporttest.StartJob(t, openWith(loopback.WithCopyWorkers(3)), transporttest.JobOptions{World: 2, DataSize: 2 * big})
	a, b := j.Ranks[0], j.Ranks[1]
	src := a.Src.Bytes()
	for round := 1; round <= 20; round++ {
		for i := range big {
			src[i] = byte(round)
		}
		for i := big; i < 2*big; i++ {
			src[i] = byte(100 + round)
		}
		// A large write of 0x(round) over [0, 4 MiB), a small one of 0x(100+round) into its
		// middle, another large one elsewhere, then a signal.
		ops := []transport.Op{
			{Kind: transport.OpWrite, Peer: 1, Local: transporttest.BufSrc, Remote: transporttest.BufData, Len: big, Cookie: 0},
			{Kind: transport.OpWrite, Peer: 1, Local: transporttest.BufSrc, LocalOff: big, Remote: transporttest.BufData, RemoteOff: 1 << 20, Len: 4096, Cookie: 1},
			{Kind: transport.OpWrite, Peer: 1, Local: transporttest.BufSrc, LocalOff: big, Remote: transporttest.BufData, RemoteOff: big, Len: big, Cookie: 2},
			{Kind: transport.OpWriteSignal, Peer: 1, SignalBuf: transporttest.BufFlags, SignalOff: 8, SignalValue: uint64(round), Cookie: 3},
		}
		if n, err := a.T.Post(ops); n != len(ops) || err != nil {
			t.Fatalf("Post = %d, %v", n, err)
		}
		drain(t, a.T, len(ops), time.Now())
		if atomic.LoadUint64(b.Flag(1)) != uint64(round) {
			t.Fatalf("round %d: signal not placed", round)
		}
		d := b.Data.Bytes()
		for i, want := range []struct {
			off, n int
			v      byte
		}{{0, 1 << 20, byte(round)}, {1 << 20, 4096, byte(100 + round)}, {1<<20 + 4096, big - (1<<20 + 4096), byte(round)}, {big, big, byte(100 + round)}} {
			for k := want.off; k < want.off+want.n; k++ {
				if d[k] != want.v {
					t.Fatalf("round %d, range %d: byte %d holds %d, want %d", round, i, k, d[k], want.v)
				}
			}
		}
	}
}

// A peer whose files are released without a clean Close (its process dying) is reported at once
// through its liveness socket — even before (here: without) its pidfd firing — naming the rank;
// a clean Close is not a failure.
func TestLivenessSocketNamesADeadPeer(t *testing.T) {
	j := transporttest.StartJob(t, openWith(), transporttest.JobOptions{World: 3, DataSize: 1 << 16})
	start := time.Now()
	j.Ranks[2].T.(*loopback.Transport).ReleaseLivenessForTest()
	for _, r := range []int{0, 1} {
		select {
		case <-j.Ranks[r].T.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("rank %d did not notice rank 2's released liveness socket in 5 s", r)
		}
		lost, ok := transport.LostRank(j.Ranks[r].T.Err())
		if !ok || lost.Rank != 2 || lost.Closed {
			t.Fatalf("rank %d: %v, want rank 2 lost", r, j.Ranks[r].T.Err())
		}
	}
	t.Logf("noticed after %v", time.Since(start))

	k := transporttest.StartJob(t, openWith(), transporttest.JobOptions{World: 2, DataSize: 1 << 16})
	_ = k.Ranks[1].T.Close()
	time.Sleep(50 * time.Millisecond)
	if err := k.Ranks[0].T.Err(); err != nil {
		t.Fatalf("a clean Close of rank 1 failed rank 0: %v", err)
	}
}
