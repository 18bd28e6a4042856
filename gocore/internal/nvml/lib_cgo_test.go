//go:build cgo

package nvml_test

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mkernel/mkernel/gocore/internal/nvml"
)

// fakeLibrary compiles testdata/fakenvml.c into a libnvidia-ml.so.1 of its
// own and returns its path; it skips the test without a C compiler.
func fakeLibrary(t *testing.T, cflags ...string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler to build the fake NVML: %v", err)
	}
	out := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	args := append([]string{"-shared", "-fPIC", "-Wall", "-Werror", "-o", out}, cflags...)
	args = append(args, filepath.Join("testdata", "fakenvml.c"))
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, b)
	}
	return out
}

// TestNoUndefinedNVMLSymbols checks that this test binary, which links the
// package, leaves no NVML symbol for the dynamic linker: it must load with
// RTLD_NOW (as CPython loads extension modules) where NVML is absent.
func TestNoUndefinedNVMLSymbols(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Skipf("test binary is not ELF: %v", err)
	}
	defer f.Close()
	syms, err := f.ImportedSymbols()
	if err != nil {
		t.Fatalf("imported symbols of %s: %v", exe, err)
	}
	sawDlopen := false
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "nvml") {
			t.Errorf("%s imports %s (from %q)", exe, s.Name, s.Library)
		}
		sawDlopen = sawDlopen || s.Name == "dlopen"
	}
	if !sawDlopen {
		t.Errorf("%s does not import dlopen; is this check reading the right table?", exe)
	}
}

func TestFakeLibrary(t *testing.T) {
	lib := nvml.New(fakeLibrary(t))
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := lib.Shutdown(); err != nil {
			t.Error(err)
		}
	}()

	n, err := lib.DeviceCount()
	if err != nil || n != 2 {
		t.Fatalf("DeviceCount = %d, %v; want 2", n, err)
	}
	gpu0, err := lib.DeviceByIndex(0)
	if err != nil {
		t.Fatal(err)
	}
	pci, err := gpu0.PCIInfo()
	if err != nil {
		t.Fatal(err)
	}
	// Every field read back checks the nvmlPciInfo_t layout.
	want := nvml.PCIInfo{BusID: "00000000:1B:00.0", Bus: 0x1b, PCIDeviceID: 0x233510de, PCISubSystemID: 0x18be10de}
	if diff := cmp.Diff(want, pci); diff != "" {
		t.Errorf("PCIInfo (-want +got):\n%s", diff)
	}
	if _, err := lib.DeviceByIndex(2); !errors.Is(err, nvml.ErrInvalidArgument) {
		t.Errorf("DeviceByIndex(2) = %v, want ErrInvalidArgument", err)
	}

	gpu1, err := lib.DeviceByPCIBusID("0000:43:00.0")
	if err != nil {
		t.Fatal(err)
	}
	_, err = lib.DeviceByPCIBusID("0000:99:00.0")
	var ce *nvml.CallError
	if !errors.As(err, &ce) || ce.Return != nvml.ErrNotFound || ce.Func != "nvmlDeviceGetHandleByPciBusId_v2" || ce.Text != "Not Found" {
		t.Errorf("DeviceByPCIBusID(unknown) = %v, want the CallError of nvmlDeviceGetHandleByPciBusId_v2 with NVML's text", err)
	}

	type link struct {
		Active bool
		Kind   nvml.NVLinkDeviceType
		Remote string
	}
	var got []link
	for i := range nvml.MaxNVLinks {
		active, err := gpu1.NVLinkActive(i)
		if errors.Is(err, nvml.ErrInvalidArgument) {
			break
		}
		if err != nil {
			t.Fatalf("link %d: %v", i, err)
		}
		kind, err := gpu1.NVLinkRemoteDeviceType(i)
		if err != nil {
			t.Fatalf("link %d: %v", i, err)
		}
		remote, err := gpu1.NVLinkRemotePCIInfo(i)
		if err != nil {
			t.Fatalf("link %d: %v", i, err)
		}
		got = append(got, link{active, kind, remote.BusID})
	}
	wantLinks := []link{
		{true, nvml.NVLinkDeviceTypeGPU, "00000000:1B:00.0"},
		{true, nvml.NVLinkDeviceTypeGPU, "00000000:1B:00.0"},
		{false, nvml.NVLinkDeviceTypeGPU, "00000000:1B:00.0"},
		{true, nvml.NVLinkDeviceTypeSwitch, "00000000:05:00.0"},
	}
	if diff := cmp.Diff(wantLinks, got); diff != "" {
		t.Errorf("links of GPU 1 (-want +got):\n%s", diff)
	}
	if _, err := gpu1.NVLinkActive(-1); !errors.Is(err, nvml.ErrInvalidArgument) {
		t.Errorf("NVLinkActive(-1) = %v, want ErrInvalidArgument", err)
	}

	for _, tt := range []struct {
		a, b  nvml.Device
		index nvml.P2PCapsIndex
		want  nvml.P2PStatus
	}{
		{gpu0, gpu1, nvml.P2PCapsIndexNVLink, nvml.P2PStatusOK},
		{gpu1, gpu0, nvml.P2PCapsIndexNVLink, nvml.P2PStatusOK},
		{gpu0, gpu0, nvml.P2PCapsIndexNVLink, nvml.P2PStatusNotSupported},
		{gpu0, gpu1, nvml.P2PCapsIndexPCI, nvml.P2PStatusNotSupported},
	} {
		if got, err := tt.a.P2PStatus(tt.b, tt.index); err != nil || got != tt.want {
			t.Errorf("P2PStatus(index %d) = %d, %v; want %d", tt.index, got, err, tt.want)
		}
	}
	if _, err := gpu0.P2PStatus(nil, nvml.P2PCapsIndexNVLink); !errors.Is(err, nvml.ErrInvalidArgument) {
		t.Errorf("P2PStatus(nil) = %v, want ErrInvalidArgument", err)
	}
}

func TestFakeLibraryRefcount(t *testing.T) {
	lib := nvml.New(fakeLibrary(t))
	for range 2 {
		if err := lib.Init(); err != nil {
			t.Fatal(err)
		}
	}
	gpu, err := lib.DeviceByIndex(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := lib.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// One Init left: NVML's own count too (the fake fails calls at 0).
	if _, err := gpu.NVLinkActive(0); err != nil {
		t.Errorf("NVLinkActive after 2 Inits, 1 Shutdown: %v", err)
	}
	if err := lib.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// Closed: calls fail without reaching the unloaded library.
	if _, err := gpu.NVLinkActive(0); !errors.Is(err, nvml.ErrUninitialized) {
		t.Errorf("NVLinkActive after the last Shutdown = %v, want ErrUninitialized", err)
	}
	if _, err := lib.DeviceCount(); !errors.Is(err, nvml.ErrUninitialized) {
		t.Errorf("DeviceCount after the last Shutdown = %v, want ErrUninitialized", err)
	}
	if err := lib.Shutdown(); !errors.Is(err, nvml.ErrUninitialized) {
		t.Errorf("third Shutdown = %v, want ErrUninitialized", err)
	}

	// Reopened: the old handle stays stale, new ones work.
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	defer lib.Shutdown()
	if _, err := gpu.PCIInfo(); !errors.Is(err, nvml.ErrUninitialized) {
		t.Errorf("PCIInfo of a handle from before reopening = %v, want ErrUninitialized", err)
	}
	fresh, err := lib.DeviceByIndex(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.P2PStatus(gpu, nvml.P2PCapsIndexNVLink); !errors.Is(err, nvml.ErrInvalidArgument) {
		t.Errorf("P2PStatus with a stale peer = %v, want ErrInvalidArgument", err)
	}
	if _, err := fresh.PCIInfo(); err != nil {
		t.Errorf("PCIInfo after reopening: %v", err)
	}
}

func TestFakeLibraryInitFails(t *testing.T) {
	lib := nvml.New(fakeLibrary(t))
	t.Setenv("FAKE_NVML_INIT_RETURN", "9") // NVML_ERROR_DRIVER_NOT_LOADED
	err := lib.Init()
	var ce *nvml.CallError
	if !errors.Is(err, nvml.ErrDriverNotLoaded) || !errors.As(err, &ce) || ce.Func != "nvmlInit_v2" || ce.Text != "Driver Not Loaded" {
		t.Fatalf("Init = %v, want nvmlInit_v2's ErrDriverNotLoaded with NVML's text", err)
	}
	if err := lib.Shutdown(); !errors.Is(err, nvml.ErrUninitialized) {
		t.Errorf("Shutdown after failed Init = %v, want ErrUninitialized", err)
	}
	os.Unsetenv("FAKE_NVML_INIT_RETURN")
	if err := lib.Init(); err != nil {
		t.Fatalf("Init once the driver is back: %v", err)
	}
	if err := lib.Shutdown(); err != nil {
		t.Error(err)
	}
}

func TestFakeLibraryMissingSymbol(t *testing.T) {
	lib := nvml.New(fakeLibrary(t, "-DFAKE_NVML_NO_P2P"))
	err := lib.Init()
	if !errors.Is(err, nvml.ErrFunctionNotFound) || !strings.Contains(err.Error(), "nvmlDeviceGetP2PStatus") {
		t.Fatalf("Init = %v, want ErrFunctionNotFound naming nvmlDeviceGetP2PStatus", err)
	}
	if _, err := lib.DeviceCount(); !errors.Is(err, nvml.ErrUninitialized) {
		t.Errorf("DeviceCount after failed Init = %v, want ErrUninitialized", err)
	}
}

// TestFakeLibraryConcurrent runs sessions in parallel on one Library; run
// with -race.
func TestFakeLibraryConcurrent(t *testing.T) {
	lib := nvml.New(fakeLibrary(t))
	var wg sync.WaitGroup
	errs := make(chan error, 8*50)
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if err := lib.Init(); err != nil {
					errs <- err
					return
				}
				gpu, err := lib.DeviceByPCIBusID("00000000:1B:00.0")
				if err == nil {
					_, err = gpu.NVLinkActive(0)
				}
				if err != nil {
					errs <- err
				}
				if err := lib.Shutdown(); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := lib.Shutdown(); !errors.Is(err, nvml.ErrUninitialized) {
		t.Errorf("Shutdown after balanced sessions = %v, want ErrUninitialized", err)
	}
}

// TestRealLibrary asks this host's NVML, if any, about every GPU.
func TestRealLibrary(t *testing.T) {
	lib := nvml.New("")
	if err := lib.Init(); err != nil {
		if errors.Is(err, nvml.ErrLibraryNotFound) || errors.Is(err, nvml.ErrDriverNotLoaded) {
			t.Skipf("no NVML here: %v", err)
		}
		t.Fatal(err)
	}
	defer func() {
		if err := lib.Shutdown(); err != nil {
			t.Error(err)
		}
	}()
	n, err := lib.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	var devs []nvml.Device
	for i := range n {
		dev, err := lib.DeviceByIndex(i)
		if err != nil {
			t.Fatal(err)
		}
		pci, err := dev.PCIInfo()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("GPU %d: %+v", i, pci)
		byBus, err := lib.DeviceByPCIBusID(pci.BusID)
		if err != nil {
			t.Fatalf("GPU %d by its bus ID %q: %v", i, pci.BusID, err)
		}
		if back, err := byBus.PCIInfo(); err != nil || back != pci {
			t.Errorf("GPU %d found by bus ID is %+v, %v", i, back, err)
		}
		for link := range nvml.MaxNVLinks {
			active, err := dev.NVLinkActive(link)
			if errors.Is(err, nvml.ErrInvalidArgument) || errors.Is(err, nvml.ErrNotSupported) {
				t.Logf("GPU %d: %d links (%v)", i, link, err)
				break
			}
			if err != nil || !active {
				t.Logf("GPU %d link %d: active %v, %v", i, link, active, err)
				continue
			}
			kind, kerr := dev.NVLinkRemoteDeviceType(link)
			remote, rerr := dev.NVLinkRemotePCIInfo(link)
			t.Logf("GPU %d link %d: remote type %d (%v), remote %s (%v)", i, link, kind, kerr, remote.BusID, rerr)
		}
		devs = append(devs, dev)
	}
	for i, a := range devs {
		for j, b := range devs {
			if i != j {
				status, err := a.P2PStatus(b, nvml.P2PCapsIndexNVLink)
				t.Logf("NVLink P2P %d->%d: %d (%v)", i, j, status, err)
			}
		}
	}
}
