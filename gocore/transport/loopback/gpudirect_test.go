package loopback_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/loopback"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

const bufGPU transport.BufferID = 10

// openGPUDirect opens a GPU-direct endpoint and registers a fake GPU region of gpuBytes as
// bufGPU (never dereferenced: the transport moves no bytes for it).
func openGPUDirect(gpuBytes uint64, opts ...loopback.Option) transporttest.OpenFunc {
	return func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
		t, err := loopback.Open(ctx, cfg, append([]loopback.Option{loopback.WithGPUDirect()}, opts...)...)
		if err != nil {
			return nil, err
		}
		if err := t.Register(bufGPU, transport.Region{Device: &transport.DeviceRegion{GPU: 0, Ptr: 0xdead0000, Len: gpuBytes, DMABufFD: -1}}); err != nil {
			_ = t.Close()
			return nil, err
		}
		return t, nil
	}
}

// A write from a GPU region places only the signal (the producer stored the bytes itself):
// the peer's host regions stay untouched, the completion and the flag come in order.
func TestGPUDirectPlacesSignalOnly(t *testing.T) {
	j := transporttest.StartJob(t, openGPUDirect(8<<20), transporttest.JobOptions{World: 2, DataSize: 1 << 20})
	a, b := j.Ranks[0], j.Ranks[1]
	if !a.T.Caps().DeviceMemory {
		t.Fatal("a GPU-direct endpoint does not report Caps.DeviceMemory")
	}
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
	for i, v := range b.Data.Bytes() {
		if v != 0 {
			t.Fatalf("byte %d of the peer's host buffer was written (%d): a GPU-direct write copied host memory", i, v)
		}
	}
}

// The shaped link is charged for the bytes of a GPU-direct write: 4 MiB at 0.1 GB/s complete
// no sooner than 41.9 ms.
func TestGPUDirectChargesTheLink(t *testing.T) {
	const rate, n = 0.1e9, 4 << 20
	j := transporttest.StartJob(t, openGPUDirect(n, loopback.WithShape(transport.LinkShape{BytesPerSecond: rate})),
		transporttest.JobOptions{World: 2, DataSize: 1 << 16})
	a, b := j.Ranks[0], j.Ranks[1]
	start := time.Now()
	op := transport.Op{Kind: transport.OpWriteSignal, Peer: 1, Local: bufGPU, Remote: bufGPU, Len: n,
		SignalBuf: transporttest.BufFlags, SignalValue: 3}
	if err := transporttest.RunOps(a.T, []transport.Op{op}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	took, ideal := time.Since(start), time.Duration(float64(n)/rate*1e9)
	if took < ideal*99/100 || atomic.LoadUint64(b.Flag(0)) != 3 {
		t.Fatalf("4 MiB GPU-direct at 0.1 GB/s completed in %v (ideal %v), flag %d", took, ideal, atomic.LoadUint64(b.Flag(0)))
	}
}

// GPU regions pair with GPU regions, inside their sizes; without WithGPUDirect a GPU region is
// refused at registration.
func TestGPUDirectRefusals(t *testing.T) {
	j := transporttest.StartJob(t, openGPUDirect(1<<20), transporttest.JobOptions{World: 2, DataSize: 1 << 16})
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
	plain, err := loopback.Open(context.Background(), transport.Config{Rank: 0, World: 1, Key: transporttest.TestKey})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	err = plain.Register(bufGPU, transport.Region{Device: &transport.DeviceRegion{Ptr: 0x1000, Len: 64, DMABufFD: -1}})
	if !errors.Is(err, transport.ErrNotSupported) {
		t.Fatalf("Register of a GPU region without WithGPUDirect = %v, want ErrNotSupported", err)
	}
}
