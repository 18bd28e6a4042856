package topology

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mkernel/mkernel/gocore/internal/nvml"
)

func TestNVMLProberWithoutLibrary(t *testing.T) {
	p := NewNVMLProber(WithNVMLLibrary("/nonexistent/libnvidia-ml.so.1"))
	_, err := p.NVLinkPeers(t.Context(), []string{"0000:1b:00.0"})
	if !errors.Is(err, ErrNotSupported) {
		t.Fatalf("NVLinkPeers = %v, want ErrNotSupported", err)
	}
	var ue *UnsupportedError
	if !errors.As(err, &ue) || ue.Feature != "NVML" || !errors.Is(err, nvml.ErrLibraryNotFound) {
		t.Errorf("error %v: want an UnsupportedError wrapping nvml.ErrLibraryNotFound", err)
	}
}

// TestNVMLProberDefault asks the real libnvidia-ml.so.1 about no GPUs:
// fine with the library, ErrNotSupported without it.
func TestNVMLProberDefault(t *testing.T) {
	peers, err := NewNVMLProber().NVLinkPeers(t.Context(), nil)
	switch {
	case errors.Is(err, ErrNotSupported):
		t.Logf("no NVML here: %v", err)
	case err != nil:
		t.Errorf("NVLinkPeers: %v", err)
	case len(peers) != 0:
		t.Errorf("NVLinkPeers(no GPUs) = %v", peers)
	}
}

// fakeGPU is a GPU as fakeNVML answers for it.
type fakeGPU struct {
	busID string   // sysfs form
	links []string // per NVLink: "switch", a remote bus ID in NVML form, or "" (down)
	noP2P bool     // P2PStatus(NVLink) says no, as without the fabric manager
}

// fakeNVML is an nvml.Interface for a list of GPUs. It counts Init and
// Shutdown calls.
type fakeNVML struct {
	gpus        []fakeGPU
	initErr     error // what Init returns
	shutdownErr error // what Shutdown returns
	inits       int   // successful Init calls
	shutdowns   int   // Shutdown calls
}

var (
	_ nvml.Interface = (*fakeNVML)(nil)
	_ nvml.Device    = fakeDevice{}
)

func (f *fakeNVML) Init() error {
	if f.initErr != nil {
		return f.initErr
	}
	f.inits++
	return nil
}

func (f *fakeNVML) Shutdown() error {
	f.shutdowns++
	return f.shutdownErr
}

func (f *fakeNVML) DeviceCount() (int, error) { return len(f.gpus), nil }

func (f *fakeNVML) DeviceByIndex(i int) (nvml.Device, error) {
	if i < 0 || i >= len(f.gpus) {
		return nil, &nvml.CallError{Func: "nvmlDeviceGetHandleByIndex_v2", Return: nvml.ErrInvalidArgument}
	}
	return fakeDevice{&f.gpus[i]}, nil
}

func (f *fakeNVML) DeviceByPCIBusID(id string) (nvml.Device, error) {
	for i := range f.gpus {
		if f.gpus[i].busID == id {
			return fakeDevice{&f.gpus[i]}, nil
		}
	}
	return nil, &nvml.CallError{Func: "nvmlDeviceGetHandleByPciBusId_v2", Return: nvml.ErrNotFound}
}

type fakeDevice struct{ g *fakeGPU }

func (d fakeDevice) PCIInfo() (nvml.PCIInfo, error) {
	return nvml.PCIInfo{BusID: d.g.busID}, nil
}

// link returns what is at link, failing like NVML for GPUs without NVLink
// and links past the last one.
func (d fakeDevice) link(fn string, link int) (string, error) {
	if len(d.g.links) == 0 {
		return "", &nvml.CallError{Func: fn, Return: nvml.ErrNotSupported}
	}
	if link < 0 || link >= len(d.g.links) {
		return "", &nvml.CallError{Func: fn, Return: nvml.ErrInvalidArgument}
	}
	return d.g.links[link], nil
}

func (d fakeDevice) NVLinkActive(link int) (bool, error) {
	remote, err := d.link("nvmlDeviceGetNvLinkState", link)
	return remote != "", err
}

func (d fakeDevice) NVLinkRemoteDeviceType(link int) (nvml.NVLinkDeviceType, error) {
	remote, err := d.link("nvmlDeviceGetNvLinkRemoteDeviceType", link)
	switch {
	case err != nil:
		return nvml.NVLinkDeviceTypeUnknown, err
	case remote == "switch":
		return nvml.NVLinkDeviceTypeSwitch, nil
	default:
		return nvml.NVLinkDeviceTypeGPU, nil
	}
}

func (d fakeDevice) NVLinkRemotePCIInfo(link int) (nvml.PCIInfo, error) {
	remote, err := d.link("nvmlDeviceGetNvLinkRemotePciInfo_v2", link)
	return nvml.PCIInfo{BusID: remote}, err
}

func (d fakeDevice) P2PStatus(peer nvml.Device, index nvml.P2PCapsIndex) (nvml.P2PStatus, error) {
	if _, ok := peer.(fakeDevice); !ok || index != nvml.P2PCapsIndexNVLink {
		return nvml.P2PStatusUnknown, &nvml.CallError{Func: "nvmlDeviceGetP2PStatus", Return: nvml.ErrInvalidArgument}
	}
	if d.g.noP2P {
		return nvml.P2PStatusNotSupported, nil
	}
	return nvml.P2PStatusOK, nil
}

func TestNVMLProberPeers(t *testing.T) {
	ids := []string{"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0"}
	sw := []string{"switch", "switch", "", "switch"} // one link down
	tests := []struct {
		name string
		gpus []fakeGPU
		want map[string][]string
	}{
		{
			name: "NVSwitch",
			gpus: []fakeGPU{{busID: ids[0], links: sw}, {busID: ids[1], links: sw}, {busID: ids[2], links: sw}, {busID: ids[3], links: sw}},
			want: map[string][]string{
				ids[0]: {ids[1], ids[2], ids[3]}, ids[1]: {ids[0], ids[2], ids[3]},
				ids[2]: {ids[0], ids[1], ids[3]}, ids[3]: {ids[0], ids[1], ids[2]},
			},
		},
		{
			// 0-1 bridged in both directions, 2 linked to 3 (3 reports
			// nothing), NVML's 8-digit upper-case IDs, a link to a
			// GPU that is not ours.
			name: "direct links",
			gpus: []fakeGPU{
				{busID: ids[0], links: []string{"00000000:43:00.0", "00000000:43:00.0"}},
				{busID: ids[1], links: []string{"00000000:1B:00.0", "", "00000000:1B:00.0"}},
				{busID: ids[2], links: []string{"00000000:61:00.0", "00000000:99:00.0"}},
				{busID: ids[3]},
			},
			want: map[string][]string{ids[0]: {ids[1]}, ids[1]: {ids[0]}, ids[2]: {ids[3]}, ids[3]: {ids[2]}},
		},
		{
			name: "NVSwitch without fabric manager",
			gpus: []fakeGPU{{busID: ids[0], links: sw, noP2P: true}, {busID: ids[1], links: sw, noP2P: true}},
			want: map[string][]string{ids[0]: {}, ids[1]: {}},
		},
		{
			name: "no NVLink",
			gpus: []fakeGPU{{busID: ids[0]}},
			want: map[string][]string{ids[0]: {}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lib := &fakeNVML{gpus: tt.gpus}
			p := &NVMLProber{lib: lib, path: "fake"}
			var busIDs []string
			for _, g := range tt.gpus {
				busIDs = append(busIDs, g.busID)
			}
			got, err := p.NVLinkPeers(t.Context(), busIDs)
			if err != nil {
				t.Fatal(err)
			}
			for _, peers := range got {
				slices.Sort(peers)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("NVLinkPeers (-want +got):\n%s", diff)
			}
			if lib.inits != 1 || lib.shutdowns != 1 {
				t.Errorf("Init succeeded %d times, Shutdown called %d times; want 1 and 1", lib.inits, lib.shutdowns)
			}
		})
	}
}

func TestNVMLProberErrors(t *testing.T) {
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name        string
		ctx         context.Context
		initErr     error
		shutdownErr error
		busIDs      []string
		unsupported bool
		shutdowns   int
	}{
		{
			name:        "no library",
			initErr:     fmt.Errorf("load libnvidia-ml.so.1: cannot open shared object file: %w", nvml.ErrLibraryNotFound),
			unsupported: true,
		},
		{
			name:        "driver too old",
			initErr:     fmt.Errorf("load libnvidia-ml.so.1: no symbol nvmlDeviceGetP2PStatus: %w", nvml.ErrFunctionNotFound),
			unsupported: true,
		},
		{
			name:        "no kernel driver",
			initErr:     &nvml.CallError{Func: "nvmlInit_v2", Return: nvml.ErrDriverNotLoaded},
			unsupported: true,
		},
		{
			name:    "driver/library mismatch",
			initErr: &nvml.CallError{Func: "nvmlInit_v2", Return: nvml.ErrLibRMVersionMismatch},
		},
		{
			name:      "unknown GPU",
			busIDs:    []string{"0000:1b:00.0", "0000:ff:00.0"},
			shutdowns: 1,
		},
		{
			name:      "bad bus ID",
			busIDs:    []string{"not-a-bus-id"},
			shutdowns: 1,
		},
		{
			name:        "shutdown fails",
			shutdownErr: &nvml.CallError{Func: "nvmlShutdown", Return: nvml.ErrUnknown},
			busIDs:      []string{"0000:1b:00.0"},
			shutdowns:   1,
		},
		{
			name:   "canceled",
			ctx:    canceled,
			busIDs: []string{"0000:1b:00.0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			lib := &fakeNVML{gpus: []fakeGPU{{busID: "0000:1b:00.0"}}, initErr: tt.initErr, shutdownErr: tt.shutdownErr}
			p := &NVMLProber{lib: lib, path: "fake"}
			peers, err := p.NVLinkPeers(ctx, tt.busIDs)
			if err == nil || peers != nil || errors.Is(err, ErrNotSupported) != tt.unsupported {
				t.Errorf("NVLinkPeers = %v, %v; want no peers and an error (ErrNotSupported: %v)", peers, err, tt.unsupported)
			}
			if tt.initErr != nil && !errors.Is(err, tt.initErr) {
				t.Errorf("error %v does not wrap Init's %v", err, tt.initErr)
			}
			if tt.shutdownErr != nil && !errors.Is(err, tt.shutdownErr) {
				t.Errorf("error %v does not wrap Shutdown's %v", err, tt.shutdownErr)
			}
			if lib.shutdowns != tt.shutdowns || lib.inits != tt.shutdowns {
				t.Errorf("Init succeeded %d times, Shutdown called %d times; want %d and %d", lib.inits, lib.shutdowns, tt.shutdowns, tt.shutdowns)
			}
			t.Logf("error: %v", err)
		})
	}
}
