package loopback

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mkernel/mkernel/gocore/transport"
)

// GPU-direct emulation. A real inter-node link with GPUDirect RDMA (ConnectX-7 on an H200
// node) moves a GPU buffer into the peer's GPU buffer with no host memory on the way: the
// producer stores the bytes into its registered GPU send buffer and posts the write; the NIC
// reads them over PCIe, serializes them at the link's rate, and the peer's NIC writes them
// into the peer's GPU receive buffer, then the signal; the send buffer may be reused once the
// write completed. The loopback emulation of that keeps every step but the wire: GPU regions
// are registered (Caps.DeviceMemory), a write between two GPU regions is booked on the shaped
// link (WithShape: serialization at its rate, then its latency) like any op, and only when the
// op is due at the peer does the transport start the copy — through the DeviceCopier of its
// Config, a copy engine of the extension that owns the GPU memory (Go cannot copy device
// memory) — and release the signal and the completion once that copy is done. So the bytes
// land when the real NIC's last byte would (never before), the sender's source stays busy
// until then, and the kernels run the same code as over a real RDMA transport (GPU send and
// receive areas, net_wait_sent before reuse): a receiver that read before its signal would
// read stale bytes here as on the real link.
//
// With WithGPUDirect the endpoint reports Caps.DeviceMemory, so gocore/datapath registers
// offered GPU buffers (Region.Device) with it instead of allocating host staging; it refuses
// them when its Config has no DeviceCopier (an extension that cannot copy for it: a clear error
// instead of a path that moves no data). A write whose local buffer is such a region must name
// a GPU region of the peer, and vice versa host regions pair with host regions. Every rank of
// a job must agree (a peer's GPU region in the address blob of a rank without it is a protocol
// error).

// EnvGPUDirect turns the GPU-direct emulation on ("1"); unset or "0": off (host staging) — unless
// the caller passes a device copier (transport.Config.DeviceCopy), which asks for it: the torch
// extension decides (csrc/comm/net_path.cpp reads the same variable) and passes one only then, so
// the two sides cannot disagree.
const EnvGPUDirect = "MKERNEL_NET_GDR"

// WithGPUDirect accepts GPU regions (Region.Device), whose bytes the Config's DeviceCopier
// moves when an op is due (see the comment above); Caps.DeviceMemory becomes true.
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
	case t.cfg.DeviceCopy == nil:
		return fmt.Errorf("loopback: register GPU buffer %d: %w: %s=1 needs a device copier from the caller "+
			"(the torch extension passes one through the C ABI v3; an extension built before it cannot: rebuild "+
			"the extension and the core together)", id, transport.ErrNotSupported, EnvGPUDirect)
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

// deviceOp reports whether op moves bytes between GPU regions (the DeviceCopier's job).
func (t *Transport) deviceOp(op *transport.Op) bool {
	return op.Len > 0 && t.regions[op.Local].placed > 0
}

// startCopy starts op's device copy.
func (t *Transport) startCopy(op *transport.Op) (uint64, error) {
	tok, err := t.cfg.DeviceCopy.Start(int(op.Peer), op.Local, op.LocalOff, op.Remote, op.RemoteOff, op.Len)
	if err != nil {
		return 0, fmt.Errorf("loopback: rank %d: GPU-direct copy of %d bytes to rank %d: %w", t.cfg.Rank, op.Len, op.Peer, err)
	}
	return tok, nil
}

// copyDone reports whether the device copy of token completed.
func (t *Transport) copyDone(op *transport.Op, token uint64) (bool, error) {
	done, err := t.cfg.DeviceCopy.Done(token)
	if err != nil {
		return false, fmt.Errorf("loopback: rank %d: GPU-direct copy of %d bytes to rank %d: %w", t.cfg.Rank, op.Len, op.Peer, err)
	}
	return done, nil
}

// copyNow copies op's bytes and waits (the reordering test mode, which applies ops one by one).
func (t *Transport) copyNow(op *transport.Op) error {
	tok, err := t.startCopy(op)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(t.cfg.Timeout)
	for {
		done, err := t.copyDone(op, tok)
		if err != nil || done {
			return err
		}
		if t.cfg.Timeout > 0 && time.Now().After(deadline) {
			return fmt.Errorf("loopback: rank %d: %w: GPU-direct copy of %d bytes to rank %d unfinished after %v", t.cfg.Rank, transport.ErrTimeout, op.Len, op.Peer, t.cfg.Timeout)
		}
	}
}
