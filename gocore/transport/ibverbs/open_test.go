package ibverbs_test

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
	"github.com/mkernel/mkernel/gocore/transport/ibverbs"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs/verbstest"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

func cfg(rank, world int) transport.Config {
	return transport.Config{Rank: rank, World: world, AllPeers: true, Key: transporttest.TestKey, Timeout: 3 * time.Second}
}

func TestOpenWithoutLibraryIsNotSupported(t *testing.T) {
	_, err := ibverbs.Open(context.Background(), cfg(0, 2),
		ibverbs.WithLibrary(filepath.Join(t.TempDir(), "libibverbs.so.1")), ibverbs.WithDevice("mlx5_0", 1))
	if !errors.Is(err, transport.ErrNotSupported) {
		t.Fatalf("Open without libibverbs: %v, want ErrNotSupported", err)
	}
	if !strings.Contains(err.Error(), "mlx5_0 port 1") {
		t.Errorf("error %q does not name the device and port", err)
	}
}

func TestOpenWithoutNICIsNotSupported(t *testing.T) {
	c := cfg(0, 2)
	c.Placement = &topology.Placement{NICs: []topology.NICChoice{{Name: "rdmap79s0", Port: 1, Kind: topology.KindEFA}}}
	if _, err := ibverbs.Open(context.Background(), c); !errors.Is(err, transport.ErrNotSupported) {
		t.Fatalf("Open with only an EFA NIC placed: %v, want ErrNotSupported", err)
	}
	if ok, reason := ibverbs.AvailableFor(c.Placement); ok || !strings.Contains(reason, "no ibverbs NIC") {
		t.Errorf("AvailableFor = %v, %q", ok, reason)
	}
	if ok, _ := ibverbs.AvailableFor(nil); ok {
		t.Error("AvailableFor(nil) = true")
	}
	if (ibverbs.Backend{}).Usable(c.Placement) {
		t.Error("Usable with an EFA NIC")
	}
}

func TestAvailableOnThisHost(t *testing.T) {
	ok, reason := ibverbs.Available()
	t.Logf("Available() = %v, %q", ok, reason)
	if reason == "" {
		t.Error("Available gives no reason")
	}
}

func TestOpenRefusesUnusablePorts(t *testing.T) {
	for _, tc := range []struct{ name, devices, dev, env, want string }{
		{"port down", "mlx5_0:roce", "mlx5_0", "1", "DOWN"},
		{"EFA device", "rdmap0:efa", "rdmap0", "", "link layer"},
		{"missing device", "mlx5_0:roce", "mlx5_7", "", "mlx5_7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("FAKEVERBS_PORT_STATE", tc.env)
			}
			open := fakeOpen(t, tc.devices, tc.dev)
			_, err := open(context.Background(), cfg(0, 2))
			if !errors.Is(err, transport.ErrNotSupported) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v, want ErrNotSupported mentioning %q", err, tc.want)
			}
		})
	}
}

func TestOpenPicksGID(t *testing.T) {
	open := fakeOpen(t, "mlx5_0:roce", "mlx5_0")
	tr, err := open(context.Background(), cfg(0, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	g, idx, typ := tr.(*ibverbs.Transport).GID()
	if idx != 3 || !g.IPv4Mapped() || typ.String() != "RoCE v2" {
		t.Errorf("GID %s index %d %v, want the RoCE v2 IPv4 entry 3", g, idx, typ)
	}
	if dev, port := tr.(*ibverbs.Transport).Device(); dev != "mlx5_0" || port != 1 {
		t.Errorf("Device() = %s, %d", dev, port)
	}
	caps := tr.Caps()
	if !caps.OrderedWrites || !caps.DeviceMemory || caps.NeedsFile || caps.MaxOpBytes != 1<<30 || caps.MaxInflight != ibverbs.DefaultQueue {
		t.Errorf("caps %+v", caps)
	}
	open = fakeOpen(t, "mlx5_0:roce", "mlx5_0", ibverbs.WithGIDIndex(1))
	tr2, err := open(context.Background(), cfg(0, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.Close()
	if _, idx, _ := tr2.(*ibverbs.Transport).GID(); idx != 1 {
		t.Errorf("WithGIDIndex(1): index %d", idx)
	}
}

// TestDeviceRegions registers "GPU memory" (host memory standing in for
// it, with a memfd as its DMA-BUF) through ibv_reg_dmabuf_mr, and through
// the nvidia-peermem fallback when the provider refuses DMA-BUF, and writes
// into it.
func TestDeviceRegions(t *testing.T) {
	for _, mode := range []string{"dmabuf", "fail", "nofd"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "fail" {
				t.Setenv("FAKEVERBS_DMABUF", "fail")
			}
			gpu := verbstest.NewGPUMemory(t, 1<<16)
			fd := gpu.FD
			if mode == "nofd" {
				fd = -1
			}
			const bufGPU transport.BufferID = 40
			// Rank 0 registers no buffer 40, but peers only need the
			// remote side's.
			open := verbstest.RegisterOn(fakeOpen(t, "mlx5_0:roce", "mlx5_0"), 1, bufGPU, gpu.Region(fd))
			j := transporttest.StartJob(t, open, transporttest.JobOptions{World: 2, DataSize: 1 << 16})
			src := j.Ranks[0].Src.Bytes()
			for i := range 4096 {
				src[i] = byte(i*3 + 1)
			}
			ds := j.Drivers(t)
			op := transport.Op{Kind: transport.OpWriteSignal, Peer: 1, Local: transporttest.BufSrc, Remote: bufGPU, RemoteOff: 512, Len: 4096,
				SignalBuf: bufGPU, SignalOff: 8, SignalValue: 77}
			if err := ds[0].Do(op); err != nil {
				t.Fatal(err)
			}
			if err := transporttest.WaitFlag(gpu.Word(8), 77, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(gpu.Mem[512:512+4096], src[:4096]) {
				t.Fatal("the device region does not hold the data written")
			}
		})
	}
}

// TestPeerGoneNamesEverything: the error of a write to a dead peer names
// the peer's rank, the device and the port, and matches ErrPeerGone.
func TestPeerGoneNamesEverything(t *testing.T) {
	tr, err := verbstest.WriteToClosedPeer(t, fakeOpen(t, "mlx5_0:roce", "mlx5_0"))
	if !errors.Is(err, transport.ErrPeerGone) {
		t.Fatalf("write to a closed peer: %v, want ErrPeerGone", err)
	}
	for _, s := range []string{"rank 1", "mlx5_0 port 1", "retry"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	if !errors.Is(tr.Err(), transport.ErrPeerGone) {
		t.Errorf("Err() = %v", tr.Err())
	}
	if _, err := tr.Post([]transport.Op{{Kind: transport.OpWrite, Peer: 1, Local: transporttest.BufSrc, Remote: transporttest.BufData, Len: 8}}); err == nil {
		t.Error("Post after the failure succeeded")
	}
}

// TestConnectHandshakeTimeout: a peer that never connects is reported by
// rank, as a timeout.
func TestConnectHandshakeTimeout(t *testing.T) {
	open := fakeOpen(t, "mlx5_0:roce", "mlx5_0")
	ctx := context.Background()
	c0, c1 := cfg(0, 2), cfg(1, 2)
	c0.Timeout = 300 * time.Millisecond
	a, err := open(ctx, c0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := open(ctx, c1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ba, err := a.Address()
	if err != nil {
		t.Fatal(err)
	}
	bb, err := b.Address()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = a.Connect(ctx, [][]byte{ba, bb}) // b never connects
	if !errors.Is(err, transport.ErrTimeout) && !errors.Is(err, transport.ErrPeerGone) {
		t.Fatalf("Connect to a silent peer: %v", err)
	}
	if !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("error %q does not name rank 1", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v", d)
	}
	// Connect checks: the other side's blob for a different world.
	if err := b.Connect(ctx, [][]byte{ba}); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("Connect with one blob for two ranks: %v", err)
	}
}
