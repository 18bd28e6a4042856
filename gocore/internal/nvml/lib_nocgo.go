//go:build !cgo

package nvml

import "fmt"

// Library is NVML loaded from a shared library. This build has no cgo, so
// it cannot load one: Init always fails with ErrLibraryNotFound.
type Library struct {
	path string
}

// New returns a Library for the shared library at path (DefaultLibrary
// when path is "").
func New(path string) *Library {
	if path == "" {
		path = DefaultLibrary
	}
	return &Library{path: path}
}

// Init returns an error matching ErrLibraryNotFound.
func (l *Library) Init() error {
	return fmt.Errorf("load %s: built without cgo: %w", l.path, ErrLibraryNotFound)
}

// Shutdown returns an error matching ErrUninitialized.
func (l *Library) Shutdown() error {
	return fmt.Errorf("shutdown %s without init: %w", l.path, ErrUninitialized)
}

// DeviceCount returns an error matching ErrUninitialized.
func (l *Library) DeviceCount() (int, error) {
	return 0, &CallError{Func: "nvmlDeviceGetCount_v2", Return: ErrUninitialized}
}

// DeviceByIndex returns an error matching ErrUninitialized.
func (l *Library) DeviceByIndex(int) (Device, error) {
	return nil, &CallError{Func: "nvmlDeviceGetHandleByIndex_v2", Return: ErrUninitialized}
}

// DeviceByPCIBusID returns an error matching ErrUninitialized.
func (l *Library) DeviceByPCIBusID(string) (Device, error) {
	return nil, &CallError{Func: "nvmlDeviceGetHandleByPciBusId_v2", Return: ErrUninitialized}
}
