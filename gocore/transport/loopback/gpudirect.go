package loopback

import (
	"fmt"
	"os"
	"strings"

	"github.com/mkernel/mkernel/gocore/transport"
)

// GPU-direct emulation. A real inter-node link with GPUDirect RDMA moves a GPU buffer into the
// peer's GPU buffer with no host memory on the way; the loopback emulation of that (one box,
// every rank on the same GPU or on GPUs of one host) cannot copy device memory from Go, so the
// producer itself stores the bytes into the peer's GPU buffer (a CUDA IPC mapping) before it
// pushes the command, and the transport moves no data for it: it checks the offsets against
// the two GPU regions, charges the emulated link (WithShape) for the bytes, and places the
// signal and the completion in order, as for any op. Only the byte mover differs from a NIC
// (the producer's SMs instead of the NIC's DMA); the protocol — what a receiver may read after
// which signal — is the same, and a shaped link still bounds the rate.
//
// With WithGPUDirect the endpoint reports Caps.DeviceMemory, so gocore/datapath registers
// offered GPU buffers (Region.Device) with it instead of allocating host staging; a write
// whose local buffer is such a region must name a GPU region of the peer, and vice versa host
// regions pair with host regions. Every rank of a job must agree (a peer's GPU region in the
// address blob of a rank without it is a protocol error).

// EnvGPUDirect turns the GPU-direct emulation on ("1"); unset or "0": off (host staging).
const EnvGPUDirect = "MKERNEL_NET_GDR"

// WithGPUDirect accepts GPU regions (Region.Device) as regions whose bytes the producer
// places at the peer itself (see the comment above); Caps.DeviceMemory becomes true.
func WithGPUDirect() Option { return func(o *options) { o.gdr = true } }

func gpuDirectFromEnv() (bool, error) {
	switch v := strings.TrimSpace(os.Getenv(EnvGPUDirect)); v {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("%w: %s=%q (want 0 or 1)", transport.ErrInvalid, EnvGPUDirect, v)
	}
}

// registerPlaced records a GPU region (t.mu held).
func (t *Transport) registerPlaced(id transport.BufferID, d *transport.DeviceRegion) error {
	switch {
	case d.Len == 0 || d.Len > 1<<46:
		return fmt.Errorf("loopback: register GPU buffer %d: %w: %d bytes", id, transport.ErrInvalid, d.Len)
	case len(t.regions) >= maxRegions:
		return fmt.Errorf("loopback: register GPU buffer %d: %w: more than %d regions", id, transport.ErrInvalid, maxRegions)
	}
	if _, dup := t.regions[id]; dup {
		return fmt.Errorf("loopback: register GPU buffer %d: %w: already registered", id, transport.ErrInvalid)
	}
	t.regions[id] = region{placed: d.Len}
	return nil
}

// checkPlaced validates a write from a local GPU region of `size` bytes: the peer's
// destination must be one of its GPU regions, both ranges inside.
func (t *Transport) checkPlaced(op *transport.Op, p *peer, size uint64) error {
	if !transport.InRange(op.LocalOff, op.Len, size) {
		return fmt.Errorf("loopback: rank %d: %w: local GPU buffer %d [%d, +%d) of %d bytes", t.cfg.Rank, transport.ErrInvalid, op.Local, op.LocalOff, op.Len, size)
	}
	rsize, ok := p.placed[op.Remote]
	if !ok {
		return fmt.Errorf("loopback: rank %d: %w: write from GPU buffer %d into buffer %d of rank %d, which is not a GPU buffer", t.cfg.Rank, transport.ErrInvalid, op.Local, op.Remote, op.Peer)
	}
	if !transport.InRange(op.RemoteOff, op.Len, rsize) {
		return fmt.Errorf("loopback: rank %d: %w: GPU buffer %d [%d, +%d) of rank %d (%d bytes)", t.cfg.Rank, transport.ErrInvalid, op.Remote, op.RemoteOff, op.Len, op.Peer, rsize)
	}
	return nil
}
