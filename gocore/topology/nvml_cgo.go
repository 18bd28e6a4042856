//go:build cgo

package topology

import (
	"context"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlMu serializes this package's NVML sessions: go-nvml swaps package-level
// state (its error-string function) when a library is loaded or unloaded.
var nvmlMu sync.Mutex

// NVMLProber is the NVLinkProber that asks NVML. It dlopens the library in
// each NVLinkPeers call, not before, so programs that never ask build and run
// without the NVIDIA driver; there NVLinkPeers returns an error matching
// ErrNotSupported.
type NVMLProber struct {
	lib  nvml.Interface
	path string
}

// NewNVMLProber returns a prober for libnvidia-ml.so.1 (or the library named
// with WithNVMLLibrary). It loads nothing yet.
func NewNVMLProber(opts ...NVMLOption) *NVMLProber {
	o := newNVMLOptions(opts)
	return &NVMLProber{lib: nvml.New(nvml.WithLibraryPath(o.path)), path: o.path}
}

// NVLinkPeers initializes NVML, walks every NVLink of every GPU in busIDs, and
// shuts NVML down again.
//
// A link to an NVSwitch makes its GPU a peer of every other GPU on a switch;
// a link to a GPU makes the two peers. Pairs NVML says cannot do NVLink P2P
// (e.g. NVSwitch without the fabric manager running) are dropped.
func (p *NVMLProber) NVLinkPeers(ctx context.Context, busIDs []string) (map[string][]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nvmlMu.Lock()
	defer nvmlMu.Unlock()
	switch ret := p.lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, &UnsupportedError{Feature: "NVML", Err: fmt.Errorf("load %s: %w", p.path, ret)}
	case nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_NOT_SUPPORTED:
		return nil, &UnsupportedError{Feature: "NVML", Err: fmt.Errorf("init: %w", ret)}
	default:
		return nil, fmt.Errorf("NVML init: %w", ret)
	}
	defer p.lib.Shutdown()
	return nvmlPeers(ctx, p.lib, busIDs)
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
		dev, ret := lib.DeviceGetHandleByPciBusId(id)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML: get handle of GPU %s: %w", id, ret)
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
		for link := range nvml.NVLINK_MAX_LINKS {
			state, ret := dev.GetNvLinkState(link)
			if ret == nvml.ERROR_INVALID_ARGUMENT || ret == nvml.ERROR_NOT_SUPPORTED {
				break // past the GPU's last link, or no NVLink at all
			}
			if ret != nvml.SUCCESS || state != nvml.FEATURE_ENABLED {
				continue
			}
			if kind, ret := dev.GetNvLinkRemoteDeviceType(link); ret == nvml.SUCCESS && kind == nvml.NVLINK_DEVICE_TYPE_SWITCH {
				onSwitch[i] = true
				continue
			}
			pci, ret := dev.GetNvLinkRemotePciInfo(link)
			if ret != nvml.SUCCESS {
				continue
			}
			remote, err := NormalizeBusID(cString(pci.BusId[:]))
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
			status, ret := devs[i].GetP2PStatus(devs[j], nvml.P2P_CAPS_INDEX_NVLINK)
			if ret == nvml.SUCCESS && status != nvml.P2P_STATUS_OK {
				continue
			}
			peers[id] = append(peers[id], other)
		}
	}
	return peers, nil
}

// cString converts a NUL-terminated C char array.
func cString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}
