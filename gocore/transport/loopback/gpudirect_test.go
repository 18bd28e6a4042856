package loopback_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/loopback"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

const bufGPU transport.BufferID = 10

// fakeGPU is the ranks' "GPU memory" (bufGPU of each rank, a byte slice) and a DeviceCopier per
// rank that copies it when started and reports the copy done once `lag` passed, recording when
// each copy started. The ranks of a transporttest job live in one process, so the copier can
// reach every rank's bytes, as the extension's copy engine reaches its peers' IPC mappings.
type fakeGPU struct {
	mu     sync.Mutex
	mem    [][]byte
	starts []time.Time // every Start, in order
	lag    time.Duration
	fail   error // returned by Start when set
}

type fakeCopier struct {
	g    *fakeGPU
	rank int
	seq  uint64
	at   []time.Time // start time of each token
}

func (c *fakeCopier) Start(peer int, local transport.BufferID, localOff uint64, remote transport.BufferID, remoteOff, n uint64) (uint64, error) {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	if c.g.fail != nil {
		return 0, c.g.fail
	}
	if local != bufGPU || remote != bufGPU {
		return 0, errors.New("fake copier: not the GPU buffer")
	}
	copy(c.g.mem[peer][remoteOff:remoteOff+n], c.g.mem[c.rank][localOff:localOff+n])
	now := time.Now()
	c.g.starts = append(c.g.starts, now)
	c.at = append(c.at, now)
	c.seq++
	return c.seq - 1, nil
}

func (c *fakeCopier) Done(token uint64) (bool, error) {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	return time.Since(c.at[token]) >= c.g.lag, nil
}

// openGPUDirect opens a GPU-direct endpoint with g's copier and registers g's region of the
// rank as bufGPU.
func openGPUDirect(g *fakeGPU, opts ...loopback.Option) transporttest.OpenFunc {
	return func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
		cfg.DeviceCopy = &fakeCopier{g: g, rank: cfg.Rank}
		t, err := loopback.Open(ctx, cfg, append([]loopback.Option{loopback.WithGPUDirect()}, opts...)...)
		if err != nil {
			return nil, err
		}
		n := uint64(len(g.mem[cfg.Rank]))
		if err := t.Register(bufGPU, transport.Region{Device: &transport.DeviceRegion{GPU: 0, Ptr: 0xdead0000, Len: n, DMABufFD: -1}}); err != nil {
			_ = t.Close()
			return nil, err
		}
		return t, nil
	}
}

func newFakeGPU(world int, bytes int) *fakeGPU {
	g := &fakeGPU{}
	for r := range world {
		b := make([]byte, bytes)
		for i := range b {
			b[i] = byte(r*31 + i*7 + 1)
		}
		g.mem = append(g.mem, b)
	}
	return g
}

// A write between GPU regions is copied by the copier (the bytes land at the peer's region),
// the peer's host regions stay untouched, the completion and the flag come in order.
func TestGPUDirectCopiesThroughTheCopier(t *testing.T) {
	g := newFakeGPU(2, 8<<20)
	j := transporttest.StartJob(t, openGPUDirect(g), transporttest.JobOptions{World: 2, DataSize: 1 << 20})
	a, b := j.Ranks[0], j.Ranks[1]
	if !a.T.Caps().DeviceMemory {
		t.Fatal("a GPU-direct endpoint does not report Caps.DeviceMemory")
	}
	want := append([]byte(nil), g.mem[0]...)
	ops := []transport.Op{
		{Kind: transport.OpWrite, Peer: 1, Local: bufGPU, LocalOff: 0, Remote: bufGPU, RemoteOff: 4 << 20, Len: 4 << 20, Cookie: 0},
		{Kind: transport.OpWriteSignal, Peer: 1, Local: bufGPU, LocalOff: 4 << 20, Remote: bufGPU, RemoteOff: 0, Len: 4 << 20,
			SignalBuf: transporttest.BufFlags, SignalOff: 8, SignalValue: 7, Cookie: 1},
	}
	if err := transporttest.RunOps(a.T, ops, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := atomic.LoadUint64(b.Flag(1)); got != 7 {
		t.Fatalf("flag = %d, want 7", got)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if string(g.mem[1][4<<20:]) != string(want[:4<<20]) || string(g.mem[1][:4<<20]) != string(want[4<<20:]) {
		t.Fatal("the peer's GPU region does not hold the sent bytes")
	}
	for i, v := range b.Data.Bytes() {
		if v != 0 {
			t.Fatalf("byte %d of the peer's host buffer was written (%d): a GPU-direct write copied host memory", i, v)
		}
	}
}

// The shaped link is charged for the bytes of a GPU-direct write, and the bytes move only when
// the op is due (after serialization and latency: the real NIC's last byte), never before: 4 MiB
// at 0.1 GB/s + 5 ms start copying no sooner than 46.9 ms after the post.
func TestGPUDirectCopiesOnlyWhenDue(t *testing.T) {
	const rate, n, lat = 0.1e9, 4 << 20, 5 * time.Millisecond
	g := newFakeGPU(2, n)
	j := transporttest.StartJob(t, openGPUDirect(g, loopback.WithShape(transport.LinkShape{BytesPerSecond: rate, Latency: lat})),
		transporttest.JobOptions{World: 2, DataSize: 1 << 16})
	a, b := j.Ranks[0], j.Ranks[1]
	start := time.Now()
	op := transport.Op{Kind: transport.OpWriteSignal, Peer: 1, Local: bufGPU, Remote: bufGPU, Len: n,
		SignalBuf: transporttest.BufFlags, SignalValue: 3}
	if err := transporttest.RunOps(a.T, []transport.Op{op}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	took, ideal := time.Since(start), time.Duration(float64(n)/rate*1e9)+lat
	g.mu.Lock()
	copied := g.starts[0].Sub(start)
	g.mu.Unlock()
	if copied < ideal*99/100 || took < ideal*99/100 || atomic.LoadUint64(b.Flag(0)) != 3 {
		t.Fatalf("4 MiB GPU-direct at 0.1 GB/s + %v: copy started after %v, completed after %v (ideal %v), flag %d",
			lat, copied, took, ideal, atomic.LoadUint64(b.Flag(0)))
	}
}

// The signal and the completion wait for the copy: with a copier that takes 40 ms the flag is
// not set before, and ops behind it complete in order after it.
func TestGPUDirectSignalWaitsForTheCopy(t *testing.T) {
	g := newFakeGPU(2, 1<<20)
	g.lag = 40 * time.Millisecond
	j := transporttest.StartJob(t, openGPUDirect(g), transporttest.JobOptions{World: 2, DataSize: 1 << 16})
	a, b := j.Ranks[0], j.Ranks[1]
	ops := []transport.Op{
		{Kind: transport.OpWriteSignal, Peer: 1, Local: bufGPU, Remote: bufGPU, Len: 4096,
			SignalBuf: transporttest.BufFlags, SignalValue: 5, Cookie: 0},
		{Kind: transport.OpWriteSignal, Peer: 1, SignalBuf: transporttest.BufFlags, SignalOff: 8, SignalValue: 6, Cookie: 1},
	}
	start := time.Now()
	if n, err := a.T.Post(ops); err != nil || n != 2 {
		t.Fatalf("Post = %d, %v", n, err)
	}
	time.Sleep(10 * time.Millisecond)
	var done [4]transport.Completion
	if n, err := a.T.Poll(done[:]); err != nil || n != 0 {
		t.Fatalf("Poll during the copy = %d, %v: want no completion", n, err)
	}
	if atomic.LoadUint64(b.Flag(0)) != 0 || atomic.LoadUint64(b.Flag(1)) != 0 {
		t.Fatal("a flag was set before the device copy finished")
	}
	got := 0
	for got < 2 && time.Since(start) < 5*time.Second {
		n, err := a.T.Poll(done[got:])
		if err != nil {
			t.Fatal(err)
		}
		for i := got; i < got+n; i++ {
			if done[i].Cookie != uint64(i) {
				t.Fatalf("completion %d has cookie %d", i, done[i].Cookie)
			}
		}
		got += n
	}
	if got != 2 || time.Since(start) < g.lag || atomic.LoadUint64(b.Flag(0)) != 5 || atomic.LoadUint64(b.Flag(1)) != 6 {
		t.Fatalf("%d completions after %v, flags %d %d", got, time.Since(start), atomic.LoadUint64(b.Flag(0)), atomic.LoadUint64(b.Flag(1)))
	}
}

// A failed device copy fails the transport with the copier's error, naming the peer.
func TestGPUDirectCopyFailure(t *testing.T) {
	g := newFakeGPU(2, 1<<20)
	g.fail = errors.New("CUDA error 700")
	j := transporttest.StartJob(t, openGPUDirect(g), transporttest.JobOptions{World: 2, DataSize: 1 << 16})
	op := transport.Op{Kind: transport.OpWriteSignal, Peer: 1, Local: bufGPU, Remote: bufGPU, Len: 64,
		SignalBuf: transporttest.BufFlags, SignalValue: 1}
	err := transporttest.RunOps(j.Ranks[0].T, []transport.Op{op}, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "CUDA error 700") || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("RunOps = %v, want the copier's error naming rank 1", err)
	}
}

// GPU regions pair with GPU regions, inside their sizes; a GPU region is refused at registration
// without WithGPUDirect, and with it but no device copier (a caller that cannot move the bytes:
// ErrNotSupported naming the cause, never a path that silently moves nothing).
func TestGPUDirectRefusals(t *testing.T) {
	j := transporttest.StartJob(t, openGPUDirect(newFakeGPU(2, 1<<20)), transporttest.JobOptions{World: 2, DataSize: 1 << 16})
	a := j.Ranks[0]
	for name, op := range map[string]transport.Op{
		"GPU into host":          {Kind: transport.OpWrite, Peer: 1, Local: bufGPU, Remote: transporttest.BufData, Len: 64},
		"past the local region":  {Kind: transport.OpWrite, Peer: 1, Local: bufGPU, LocalOff: 1 << 20, Remote: bufGPU, Len: 64},
		"past the peer's region": {Kind: transport.OpWrite, Peer: 1, Local: bufGPU, Remote: bufGPU, RemoteOff: 1<<20 - 32, Len: 64},
		"host into GPU":          {Kind: transport.OpWrite, Peer: 1, Local: transporttest.BufSrc, Remote: bufGPU, Len: 64},
	} {
		if _, err := a.T.Post([]transport.Op{op}); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("%s: Post = %v, want ErrInvalid", name, err)
		}
	}
	region := transport.Region{Device: &transport.DeviceRegion{Ptr: 0x1000, Len: 64, DMABufFD: -1}}
	plain, err := loopback.Open(context.Background(), transport.Config{Rank: 0, World: 1, Key: transporttest.TestKey})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Register(bufGPU, region); !errors.Is(err, transport.ErrNotSupported) {
		t.Fatalf("Register of a GPU region without WithGPUDirect = %v, want ErrNotSupported", err)
	}
	nocopy, err := loopback.Open(context.Background(), transport.Config{Rank: 0, World: 1, Key: transporttest.TestKey}, loopback.WithGPUDirect())
	if err != nil {
		t.Fatal(err)
	}
	defer nocopy.Close()
	if err := nocopy.Register(bufGPU, region); !errors.Is(err, transport.ErrNotSupported) || !strings.Contains(err.Error(), "device copier") {
		t.Fatalf("Register of a GPU region with WithGPUDirect but no copier = %v, want ErrNotSupported naming the copier", err)
	}
}

// Backend.Open turns the emulation on for a caller that passes a device copier, whatever
// MKERNEL_NET_GDR says (the extension decides and passes one only then); without one it follows
// the variable.
func TestGPUDirectFollowsTheCopier(t *testing.T) {
	t.Setenv(loopback.EnvGPUDirect, "")
	for _, withCopier := range []bool{false, true} {
		cfg := transport.Config{Rank: 0, World: 1, Key: transporttest.TestKey}
		if withCopier {
			cfg.DeviceCopy = &fakeCopier{g: newFakeGPU(1, 64)}
		}
		tr, err := loopback.Backend{}.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := tr.Caps().DeviceMemory; got != withCopier {
			t.Errorf("copier %v: Caps.DeviceMemory = %v", withCopier, got)
		}
		_ = tr.Close()
	}
}
