package nvml_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mkernel/mkernel/gocore/internal/nvml"
)

func TestReturnError(t *testing.T) {
	for r, want := range map[nvml.Return]string{
		nvml.ErrNotFound:        "NVML_ERROR_NOT_FOUND",
		nvml.ErrLibraryNotFound: "NVML_ERROR_LIBRARY_NOT_FOUND",
		nvml.ErrUnknown:         "NVML_ERROR_UNKNOWN",
		nvml.Return(31):         "NVML error 31",
	} {
		if got := r.Error(); got != want {
			t.Errorf("Return(%d).Error() = %q, want %q", int(r), got, want)
		}
	}
}

func TestCallError(t *testing.T) {
	err := fmt.Errorf("get GPU: %w", &nvml.CallError{Func: "nvmlDeviceGetHandleByPciBusId_v2", Return: nvml.ErrNotFound, Text: "Not Found"})
	if !errors.Is(err, nvml.ErrNotFound) || errors.Is(err, nvml.ErrNotSupported) {
		t.Errorf("errors.Is(%v): want ErrNotFound only", err)
	}
	if want := "get GPU: nvmlDeviceGetHandleByPciBusId_v2: Not Found (NVML_ERROR_NOT_FOUND)"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	bare := &nvml.CallError{Func: "nvmlShutdown", Return: nvml.ErrUninitialized}
	if want := "nvmlShutdown: NVML_ERROR_UNINITIALIZED"; bare.Error() != want {
		t.Errorf("Error() = %q, want %q", bare, want)
	}
}

// TestMissingLibrary holds with and without cgo.
func TestMissingLibrary(t *testing.T) {
	lib := nvml.New("/nonexistent/libnvidia-ml.so.1")
	err := lib.Init()
	if !errors.Is(err, nvml.ErrLibraryNotFound) {
		t.Fatalf("Init = %v, want ErrLibraryNotFound", err)
	}
	t.Logf("Init: %v", err)
	if err := lib.Shutdown(); !errors.Is(err, nvml.ErrUninitialized) {
		t.Errorf("Shutdown after failed Init = %v, want ErrUninitialized", err)
	}
	if _, err := lib.DeviceCount(); !errors.Is(err, nvml.ErrUninitialized) {
		t.Errorf("DeviceCount after failed Init = %v, want ErrUninitialized", err)
	}
	if _, err := lib.DeviceByPCIBusID("0000:1b:00.0"); !errors.Is(err, nvml.ErrUninitialized) {
		t.Errorf("DeviceByPCIBusID after failed Init = %v, want ErrUninitialized", err)
	}
}
