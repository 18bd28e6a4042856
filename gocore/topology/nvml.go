package topology

import (
	"context"
	"errors"
	"fmt"

	"github.com/mkernel/mkernel/gocore/internal/nvml"
)

// NVMLProber is the NVLinkProber that asks NVML. It loads the library in
// each NVLinkPeers call, not before, so programs that never ask build and run
// without the NVIDIA driver; there, and in builds without cgo, NVLinkPeers
// returns an error matching ErrNotSupported.
type NVMLProber struct {
	lib  nvml.Interface
	path string
}

// NewNVMLProber returns a prober for libnvidia-ml.so.1 (or the library named
// with WithNVMLLibrary). It loads nothing yet.
func NewNVMLProber(opts ...NVMLOption) *NVMLProber {
	o := newNVMLOptions(opts)
	return &NVMLProber{lib: nvml.New(o.path), path: o.path}
}

// NVLinkPeers initializes NVML, walks every NVLink of every GPU in busIDs, and
// shuts NVML down again.
//
// A link to an NVSwitch makes its GPU a peer of every other GPU on a switch;
// a link to a GPU makes the two peers. Pairs NVML says cannot do NVLink P2P
// (e.g. NVSwitch without the fabric manager running) are dropped.
func (p *NVMLProber) NVLinkPeers(ctx context.Context, busIDs []string) (peers map[string][]string, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := p.lib.Init(); err != nil {
		if nvmlUnavailable(err) {
			return nil, &UnsupportedError{Feature: "NVML", Err: fmt.Errorf("init: %w", err)}
		}
		return nil, fmt.Errorf("NVML init: %w", err)
	}
	defer func() {
		// The answer stands on its own, but a failing nvmlShutdown means
		// a driver in trouble: report it rather than a result.
		if serr := p.lib.Shutdown(); serr != nil && err == nil {
			peers, err = nil, fmt.Errorf("NVML shutdown: %w", serr)
		}
	}()
	return nvmlPeers(ctx, p.lib, busIDs)
}

// nvmlUnavailable reports whether an Init error means this host has no
// usable NVML (no library, a driver too old for the entry points we use, no
// kernel driver) rather than a broken one.
func nvmlUnavailable(err error) bool {
	return errors.Is(err, nvml.ErrLibraryNotFound) || errors.Is(err, nvml.ErrFunctionNotFound) ||
		errors.Is(err, nvml.ErrDriverNotLoaded) || errors.Is(err, nvml.ErrNotSupported)
}

func nvmlPeers(ctx context.Context, lib nvml.Interface, busIDs []string) (map[string][]string, error) {
	index := make(map[string]int, len(busIDs))
	devs := make([]nvml.Device, len(busIDs))
	for i, id := range busIDs {
		norm, err := NormalizeBusID(id)
		if err != nil {
			return nil, fmt.Errorf("NVML: GPU %s: %w", id, err)
		}
		index[norm] = i
		dev, err := lib.DeviceByPCIBusID(id)
		if err != nil {
			return nil, fmt.Errorf("NVML: get handle of GPU %s: %w", id, err)
		}
		devs[i] = dev
	}

	linked := make([][]bool, len(devs))
	for i := range linked {
		linked[i] = make([]bool, len(devs))
	}
	onSwitch := make([]bool, len(devs))
	for i, dev := range devs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for link := range nvml.MaxNVLinks {
			active, err := dev.NVLinkActive(link)
			if errors.Is(err, nvml.ErrInvalidArgument) || errors.Is(err, nvml.ErrNotSupported) {
				break // past the GPU's last link, or no NVLink at all
			}
			if err != nil || !active {
				continue
			}
			if kind, err := dev.NVLinkRemoteDeviceType(link); err == nil && kind == nvml.NVLinkDeviceTypeSwitch {
				onSwitch[i] = true
				continue
			}
			pci, err := dev.NVLinkRemotePCIInfo(link)
			if err != nil {
				continue
			}
			remote, err := NormalizeBusID(pci.BusID)
			if err != nil {
				continue
			}
			if j, ok := index[remote]; ok && j != i {
				linked[i][j], linked[j][i] = true, true
			}
		}
	}

	peers := make(map[string][]string, len(busIDs))
	for i, id := range busIDs {
		peers[id] = []string{}
		for j, other := range busIDs {
			if i == j || !(linked[i][j] || onSwitch[i] && onSwitch[j]) {
				continue
			}
			status, err := devs[i].P2PStatus(devs[j], nvml.P2PCapsIndexNVLink)
			if err == nil && status != nvml.P2PStatusOK {
				continue
			}
			peers[id] = append(peers[id], other)
		}
	}
	return peers, nil
}
