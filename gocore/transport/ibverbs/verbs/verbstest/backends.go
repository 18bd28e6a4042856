package verbstest

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mkernel/mkernel/gocore/topology"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

// The tests the verbs backends (ibverbs, efa) share.

// RunOnDevice runs the transport conformance suite on this host's first NIC
// of kind with an ACTIVE port, opened by open(device, port). It skips,
// saying why, where available reports no usable device (on every machine
// this project has: none has an RDMA NIC).
func RunOnDevice(t *testing.T, kind topology.NICKind, available func() (bool, string), open func(dev string, port int) transporttest.OpenFunc) {
	ok, reason := available()
	if !ok {
		t.Skipf("no usable %s device on this host: %s", kind, reason)
	}
	fs, err := topology.NewFS("/sys")
	if err != nil {
		t.Fatal(err)
	}
	nics, err := fs.NICs()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nics {
		for _, p := range n.Ports {
			if n.Kind == kind && p.Active() {
				transporttest.Run(t, transporttest.Suite{Open: open(n.Name, p.Port)})
				return
			}
		}
	}
	t.Skipf("Available found a %s device but no ACTIVE port remains", kind)
}

// GPUMemory is host memory standing in for GPU memory: a mapping to
// register as a transport.DeviceRegion, with a memfd as its DMA-BUF.
type GPUMemory struct {
	Mem []byte
	FD  int // the stand-in DMA-BUF
}

// NewGPUMemory maps size bytes and creates the memfd; t.Cleanup frees both.
func NewGPUMemory(t testing.TB, size int) *GPUMemory {
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	fd, err := unix.MemfdCreate("fake-dmabuf", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	return &GPUMemory{Mem: mem, FD: fd}
}

// Region describes g as GPU 0's memory, with dmabufFD as its DMA-BUF (-1:
// none, so registration falls back to nvidia-peermem).
func (g *GPUMemory) Region(dmabufFD int) transport.Region {
	return transport.Region{Device: &transport.DeviceRegion{GPU: 0, Ptr: uintptr(unsafe.Pointer(&g.Mem[0])), Len: uint64(len(g.Mem)), DMABufFD: dmabufFD}}
}

// Word returns the 8-byte word at byte off of g.
func (g *GPUMemory) Word(off int) *uint64 { return (*uint64)(unsafe.Pointer(&g.Mem[off])) }

// RegisterOn wraps open so that rank also registers r as id, before the
// job's regions are exchanged.
func RegisterOn(open transporttest.OpenFunc, rank int, id transport.BufferID, r transport.Region) transporttest.OpenFunc {
	return func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
		tr, err := open(ctx, cfg)
		if err != nil || cfg.Rank != rank {
			return tr, err
		}
		return tr, tr.Register(id, r)
	}
}

// WriteToClosedPeer starts a job of two ranks, closes rank 1 and returns
// rank 0 and the error of its write to rank 1, which should name rank 1
// and the device, and match ErrPeerGone.
func WriteToClosedPeer(t *testing.T, open transporttest.OpenFunc) (transport.Transport, error) {
	j := transporttest.StartJob(t, open, transporttest.JobOptions{World: 2, DataSize: 1 << 16, Timeout: time.Second})
	if err := j.Ranks[1].T.Close(); err != nil {
		t.Fatal(err)
	}
	tr := j.Ranks[0].T
	op := transport.Op{Kind: transport.OpWrite, Peer: 1, Local: transporttest.BufSrc, Remote: transporttest.BufData, Len: 8}
	return tr, transporttest.RunOps(tr, []transport.Op{op}, 10*time.Second)
}
