package topology

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const (
	pciVendorNVIDIA = 0x10de
	// PCI base class 0x03 (display), subclasses VGA (0x00) and 3D (0x02);
	// the class file holds class<<16 | subclass<<8 | prog-if.
	pciClassVGA = 0x0300
	pciClass3D  = 0x0302
)

// GPUs returns the NVIDIA GPUs under bus/pci/devices, sorted by bus ID, with
// Index set. Other NVIDIA functions (NVSwitch bridges, HDMI audio) are
// skipped. A tree without bus/pci has no GPUs.
func (f FS) GPUs() ([]GPU, error) {
	dir := f.path("bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []GPU{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list PCI devices: %w", err)
	}
	gpus := []GPU{}
	for _, e := range entries {
		busID := e.Name()
		devDir := filepath.Join(dir, busID)
		isGPU, err := isNVIDIAGPU(devDir)
		if err != nil {
			return nil, fmt.Errorf("PCI device %s: %w", busID, err)
		}
		if !isGPU {
			continue
		}
		gpu, err := f.readGPU(devDir, busID)
		if err != nil {
			return nil, err
		}
		gpus = append(gpus, gpu)
	}
	slices.SortFunc(gpus, func(a, b GPU) int { return compareBusID(a.BusID, b.BusID) })
	for i := range gpus {
		gpus[i].Index = i
	}
	return gpus, nil
}

func isNVIDIAGPU(devDir string) (bool, error) {
	vendor, err := readHex(filepath.Join(devDir, "vendor"))
	if err != nil {
		return false, fmt.Errorf("read vendor: %w", err)
	}
	if vendor != pciVendorNVIDIA {
		return false, nil
	}
	class, err := readHex(filepath.Join(devDir, "class"))
	if err != nil {
		return false, fmt.Errorf("read class: %w", err)
	}
	sub := class >> 8
	return sub == pciClassVGA || sub == pciClass3D, nil
}

func (f FS) readGPU(devDir, busID string) (GPU, error) {
	gpu := GPU{BusID: busID}
	deviceID, _, err := readOptional(filepath.Join(devDir, "device"))
	if err != nil {
		return GPU{}, fmt.Errorf("read device of %s: %w", busID, err)
	}
	gpu.DeviceID = deviceID
	if gpu.NUMANode, err = readNUMANode(devDir); err != nil {
		return GPU{}, fmt.Errorf("read numa_node of %s: %w", busID, err)
	}
	local, _, err := readOptional(filepath.Join(devDir, "local_cpulist"))
	if err != nil {
		return GPU{}, fmt.Errorf("read local_cpulist of %s: %w", busID, err)
	}
	if gpu.LocalCPUs, err = ParseCPUList(local); err != nil {
		return GPU{}, fmt.Errorf("parse local_cpulist of %s: %w", busID, err)
	}
	if gpu.PCIPath, err = f.devicePath(devDir); err != nil {
		return GPU{}, fmt.Errorf("resolve PCI path of %s: %w", busID, err)
	}
	return gpu, nil
}

// readHex reads a sysfs number written as "0x10de".
func readHex(path string) (uint64, error) {
	s, err := readString(path)
	if err != nil {
		return 0, err
	}
	digits, ok := strings.CutPrefix(s, "0x")
	if !ok {
		return 0, fmt.Errorf("%q is not 0x-prefixed hex", s)
	}
	n, err := strconv.ParseUint(digits, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is not 0x-prefixed hex", s)
	}
	return n, nil
}

// pciAddr is a parsed PCI address domain:bus:device.function.
type pciAddr struct {
	domain, bus, device, function uint64
}

// parseBusID parses "0000:18:00.0" and NVML's "00000000:18:00.0", in either
// case.
func parseBusID(s string) (pciAddr, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return pciAddr{}, fmt.Errorf("bad PCI bus ID %q", s)
	}
	dev, fn, ok := strings.Cut(parts[2], ".")
	if !ok {
		return pciAddr{}, fmt.Errorf("bad PCI bus ID %q", s)
	}
	var a pciAddr
	for _, field := range []struct {
		s    string
		bits int
		dst  *uint64
	}{{parts[0], 32, &a.domain}, {parts[1], 8, &a.bus}, {dev, 5, &a.device}, {fn, 3, &a.function}} {
		n, err := strconv.ParseUint(field.s, 16, field.bits)
		if err != nil {
			return pciAddr{}, fmt.Errorf("bad PCI bus ID %q", s)
		}
		*field.dst = n
	}
	return a, nil
}

// String formats a as sysfs does: "0000:18:00.0".
func (a pciAddr) String() string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", a.domain, a.bus, a.device, a.function)
}

// NormalizeBusID rewrites a PCI bus ID in sysfs form, lower case with a
// four-digit domain: NVML's "00000000:1B:00.0" becomes "0000:1b:00.0".
func NormalizeBusID(s string) (string, error) {
	a, err := parseBusID(s)
	if err != nil {
		return "", err
	}
	return a.String(), nil
}

// compareBusID orders bus IDs numerically, falling back to text for IDs
// that do not parse.
func compareBusID(x, y string) int {
	a, errA := parseBusID(x)
	b, errB := parseBusID(y)
	if errA != nil || errB != nil {
		return strings.Compare(x, y)
	}
	return cmp.Or(cmp.Compare(a.domain, b.domain), cmp.Compare(a.bus, b.bus),
		cmp.Compare(a.device, b.device), cmp.Compare(a.function, b.function))
}
