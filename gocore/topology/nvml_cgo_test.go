//go:build cgo

package topology

import (
	"errors"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"
)

var _ nvml.Interface = (*mock.Interface)(nil)

func TestNVMLProberWithoutLibrary(t *testing.T) {
	p := NewNVMLProber(WithNVMLLibrary("/nonexistent/libnvidia-ml.so.1"))
	_, err := p.NVLinkPeers(t.Context(), []string{"0000:1b:00.0"})
	if !errors.Is(err, ErrNotSupported) {
		t.Fatalf("NVLinkPeers = %v, want ErrNotSupported", err)
	}
	var ue *UnsupportedError
	if !errors.As(err, &ue) || ue.Feature != "NVML" || !errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) {
		t.Errorf("error %v: want an UnsupportedError wrapping ERROR_LIBRARY_NOT_FOUND", err)
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

// fakeGPU is a GPU as the NVML mock answers for it.
type fakeGPU struct {
	busID string   // sysfs form
	links []string // per NVLink: "switch", a remote bus ID in NVML form, or "" (down)
	noP2P bool     // GetP2PStatus(NVLINK) says no, as without the fabric manager
}

// fakeNVML builds an nvml.Interface for the GPUs and counts Shutdown calls.
func fakeNVML(gpus []fakeGPU, initRet nvml.Return, shutdowns *int) *mock.Interface {
	devs := make(map[string]*mock.Device)
	for _, g := range gpus {
		d := &mock.Device{}
		d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
			if len(g.links) == 0 {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			if link >= len(g.links) {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			if g.links[link] == "" {
				return nvml.FEATURE_DISABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		d.GetNvLinkRemoteDeviceTypeFunc = func(link int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			if g.links[link] == "switch" {
				return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
			}
			return nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS
		}
		d.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
			var info nvml.PciInfo
			for i, c := range []byte(g.links[link]) {
				info.BusId[i] = int8(c)
			}
			return info, nvml.SUCCESS
		}
		d.GetP2PStatusFunc = func(nvml.Device, nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			if g.noP2P {
				return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
			}
			return nvml.P2P_STATUS_OK, nvml.SUCCESS
		}
		devs[g.busID] = d
	}
	return &mock.Interface{
		InitFunc: func() nvml.Return { return initRet },
		ShutdownFunc: func() nvml.Return {
			*shutdowns++
			return nvml.SUCCESS
		},
		DeviceGetHandleByPciBusIdFunc: func(id string) (nvml.Device, nvml.Return) {
			if d, ok := devs[id]; ok {
				return d, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
	}
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
			var shutdowns int
			p := &NVMLProber{lib: fakeNVML(tt.gpus, nvml.SUCCESS, &shutdowns), path: "fake"}
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
			if shutdowns != 1 {
				t.Errorf("Shutdown called %d times, want 1", shutdowns)
			}
		})
	}
}

func TestNVMLProberErrors(t *testing.T) {
	tests := []struct {
		initRet     nvml.Return
		busIDs      []string
		unsupported bool
		shutdowns   int
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, nil, true, 0},
		{nvml.ERROR_DRIVER_NOT_LOADED, nil, true, 0},
		{nvml.ERROR_LIB_RM_VERSION_MISMATCH, nil, false, 0},
		{nvml.SUCCESS, []string{"0000:1b:00.0", "0000:ff:00.0"}, false, 1}, // unknown GPU
		{nvml.SUCCESS, []string{"not-a-bus-id"}, false, 1},
	}
	for _, tt := range tests {
		var shutdowns int
		p := &NVMLProber{lib: fakeNVML([]fakeGPU{{busID: "0000:1b:00.0"}}, tt.initRet, &shutdowns), path: "fake"}
		_, err := p.NVLinkPeers(t.Context(), tt.busIDs)
		if err == nil || errors.Is(err, ErrNotSupported) != tt.unsupported {
			t.Errorf("init %v, GPUs %v: error %v, want one (ErrNotSupported: %v)", tt.initRet, tt.busIDs, err, tt.unsupported)
		}
		if shutdowns != tt.shutdowns {
			t.Errorf("init %v: Shutdown called %d times, want %d", tt.initRet, shutdowns, tt.shutdowns)
		}
	}
}
