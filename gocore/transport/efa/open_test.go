package efa_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/topology"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/efa"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs/verbstest"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

func cfg(rank, world int) transport.Config {
	return transport.Config{Rank: rank, World: world, AllPeers: true, Key: transporttest.TestKey, Timeout: 3 * time.Second}
}

func TestOpenWithoutLibraryIsNotSupported(t *testing.T) {
	_, err := efa.Open(context.Background(), cfg(0, 2), efa.WithLibrary(filepath.Join(t.TempDir(), "libibverbs.so.1")), efa.WithDevice("rdmap0", 1))
	if !errors.Is(err, transport.ErrNotSupported) || !strings.Contains(err.Error(), "rdmap0") {
		t.Fatalf("Open without libibverbs: %v, want ErrNotSupported naming the device", err)
	}
	// libibverbs present (the fake), libefa missing.
	t.Setenv("FAKEVERBS_DEVICES", "rdmap0:efa")
	lib := verbstest.Build(t)
	_, err = efa.Open(context.Background(), cfg(0, 2), efa.WithLibrary(lib), efa.WithEFALibrary(filepath.Join(t.TempDir(), "libefa.so.1")), efa.WithDevice("rdmap0", 1))
	if !errors.Is(err, transport.ErrNotSupported) || !strings.Contains(err.Error(), "libefa.so.1") {
		t.Fatalf("Open without libefa: %v, want ErrNotSupported naming libefa", err)
	}
}

func TestOpenWithoutNICIsNotSupported(t *testing.T) {
	c := cfg(0, 2)
	c.Placement = &topology.Placement{NICs: []topology.NICChoice{{Name: "mlx5_0", Port: 1, Kind: topology.KindIBVerbs}}}
	if _, err := efa.Open(context.Background(), c); !errors.Is(err, transport.ErrNotSupported) {
		t.Fatalf("Open with only a verbs NIC: %v", err)
	}
	if ok, reason := efa.AvailableFor(c.Placement); ok || !strings.Contains(reason, "no EFA NIC") {
		t.Errorf("AvailableFor = %v, %q", ok, reason)
	}
	if (efa.Backend{}).Usable(nil) {
		t.Error("Usable(nil)")
	}
	ok, reason := efa.Available()
	t.Logf("Available() = %v, %q", ok, reason)
}

func TestOpenRefusals(t *testing.T) {
	for _, tc := range []struct{ name, devices, dev, caps, want string }{
		{"no RDMA write", "rdmap0:efa", "rdmap0", "3", "cannot RDMA write"},
		{"not an EFA device", "mlx5_0:roce", "mlx5_0", "", "not an EFA device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.caps != "" {
				t.Setenv("FAKEVERBS_EFA_CAPS", tc.caps)
			}
			t.Setenv("FAKEVERBS_DEVICES", tc.devices)
			lib := verbstest.Build(t)
			_, err := efa.Open(context.Background(), cfg(0, 2), efa.WithLibrary(lib), efa.WithEFALibrary(lib), efa.WithDevice(tc.dev, 1))
			if !errors.Is(err, transport.ErrNotSupported) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v, want ErrNotSupported mentioning %q", err, tc.want)
			}
		})
	}
}

// TestReorderedArrivals checks that the fake fabric really reorders SRD
// traffic, so that both arrival orders of a signal's data and descriptor
// were exercised by the conformance run.
func TestReorderedArrivals(t *testing.T) {
	j := transporttest.StartJob(t, fakeOpen(t), transporttest.JobOptions{World: 2, DataSize: 1 << 20})
	ds := j.Drivers(t)
	ops := make([]transport.Op, 400)
	for i := range ops {
		ops[i] = transport.Op{Kind: transport.OpWriteSignal, Peer: 1, Local: transporttest.BufSrc, Remote: transporttest.BufData,
			RemoteOff: uint64(i * 256), Len: 256, SignalBuf: transporttest.BufFlags, SignalOff: 8 * 7, SignalValue: uint64(i + 1), Cookie: uint64(i)}
	}
	if err := ds[0].Do(ops...); err != nil {
		t.Fatal(err)
	}
	if err := transporttest.WaitFlag(j.Ranks[1].Flag(7), 400, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// The flag is a max: it may reach 400 before every earlier signal is
	// applied. Wait for all of them.
	var descFirst, dataFirst uint64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if descFirst, dataFirst = j.Ranks[1].T.(*efa.Transport).Arrivals(); descFirst+dataFirst >= 400 {
			break
		}
	}
	t.Logf("descriptor first %d, data first %d", descFirst, dataFirst)
	if descFirst == 0 || dataFirst == 0 || descFirst+dataFirst != 400 {
		t.Errorf("arrivals: descriptor first %d, data first %d; want both orders, 400 in all", descFirst, dataFirst)
	}
}

// TestDeviceMemory registers "GPU memory" (host memory and a memfd standing
// in for it) as a data destination, and checks that a flag in a peer's GPU
// memory is refused: on EFA the receiver stores flags with the CPU.
func TestDeviceMemory(t *testing.T) {
	gpu := verbstest.NewGPUMemory(t, 1<<16)
	const bufGPU transport.BufferID = 40
	j := transporttest.StartJob(t, verbstest.RegisterOn(fakeOpen(t), 1, bufGPU, gpu.Region(gpu.FD)), transporttest.JobOptions{World: 2, DataSize: 1 << 16})
	src := j.Ranks[0].Src.Bytes()
	for i := range 1000 {
		src[i] = byte(i + 7)
	}
	ds := j.Drivers(t)
	if err := ds[0].Do(transport.Op{Kind: transport.OpWriteSignal, Peer: 1, Local: transporttest.BufSrc, Remote: bufGPU, RemoteOff: 64, Len: 1000,
		SignalBuf: transporttest.BufFlags, SignalOff: 8 * 9, SignalValue: 1}); err != nil {
		t.Fatal(err)
	}
	if err := transporttest.WaitFlag(j.Ranks[1].Flag(9), 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gpu.Mem[64:64+1000], src[:1000]) {
		t.Fatal("the GPU region does not hold the data written")
	}
	ds[0].Stop()
	_, err := j.Ranks[0].T.Post([]transport.Op{{Kind: transport.OpWriteSignal, Peer: 1, SignalBuf: bufGPU, SignalOff: 0, SignalValue: 1}})
	if !errors.Is(err, transport.ErrNotSupported) || !strings.Contains(err.Error(), "GPU memory") {
		t.Errorf("a flag in the peer's GPU memory: %v, want ErrNotSupported", err)
	}
	if j.Ranks[0].T.Err() != nil {
		t.Errorf("the refusal broke the transport: %v", j.Ranks[0].T.Err())
	}
}

func TestPeerGoneNamesEverything(t *testing.T) {
	tr, err := verbstest.WriteToClosedPeer(t, fakeOpen(t))
	if !errors.Is(err, transport.ErrPeerGone) {
		t.Fatalf("write to a closed peer: %v, want ErrPeerGone", err)
	}
	for _, s := range []string{"rank 1", "rdmap0"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	if tr.Caps().OrderedWrites {
		t.Error("SRD claims ordered writes")
	}
}
