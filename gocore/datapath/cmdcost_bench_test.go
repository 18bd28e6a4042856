package datapath_test

import (
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/datapath"
	"github.com/mkernel/mkernel/gocore/fifo"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/loopback"
)

// The proxy's cost per command on loopback, FIFO push -> proxy -> transport -> the peer's flag:
// a host producer pushes b.N WRITE_SIGNAL commands of `bytes` to the other rank and waits for the
// last signal. "gdr": from a GPU region (MKERNEL_NET_GDR=1: the transport moves no data), so the
// figure is the control path alone; "staged": from host staging (the transport memcpys).
//
//	go test ./gocore/datapath/ -run '^$' -bench CommandCost -benchtime 20000x
func BenchmarkCommandCost(b *testing.B) {
	for _, mode := range []struct {
		name  string
		gdr   bool
		bytes uint64
	}{{"gdr_1MiB", true, 1 << 20}, {"staged_64KiB", false, 64 << 10}, {"staged_1MiB", false, 1 << 20}} {
		b.Run(mode.name, func(b *testing.B) {
			if mode.gdr {
				b.Setenv(loopback.EnvGPUDirect, "1")
			}
			dps := openBench(b, mode.gdr)
			b.SetBytes(int64(mode.bytes))
			b.ResetTimer()
			for i := range b.N {
				local := transport.BufferID(7)
				if !mode.gdr {
					local = bufSrc
				}
				remote := local
				if !mode.gdr {
					remote = bufData
				}
				if _, err := dps[0].Ring().Push(&fifo.Cmd{Kind: fifo.KindWriteSignal, Peer: 1, LocalBuf: uint32(local), RemoteBuf: uint32(remote),
					Bytes: mode.bytes, ArrivalSlot: 0, ArrivalSeq: uint64(i + 1)}, 10*time.Second); err != nil {
					b.Fatal(err)
				}
			}
			if err := fifo.WaitFlag(dps[1].Flag(0), uint64(b.N), 60*time.Second); err != nil {
				b.Fatal(err)
			}
		})
	}
}

func openBench(b *testing.B, gdr bool) []*datapath.Datapath {
	return openGroup(b, 2, func(int) datapath.Config {
		cfg := datapath.Config{
			Buffers: []datapath.Buffer{{ID: bufSrc, Bytes: 1 << 20}, {ID: bufData, Bytes: 1 << 20}},
			Node:    []int{0, 1}, Net: transport.Selection{Name: "loopback"}, Timeout: 10 * time.Second, BindHost: "127.0.0.1",
		}
		if gdr {
			cfg.Device = []datapath.DeviceBuffer{{ID: 7, Region: transport.DeviceRegion{Ptr: 0xdead0000, Len: 1 << 20, DMABufFD: -1}}}
			cfg.DeviceCopy = &serialCopier{} // GPU-direct needs a device copier (one that moves nothing)
		}
		return cfg
	})
}
