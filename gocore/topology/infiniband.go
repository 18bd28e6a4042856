package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// NICs returns the RDMA devices under class/infiniband, sorted by name. A
// tree without class/infiniband (no RDMA driver loaded) has none.
func (f FS) NICs() ([]NIC, error) {
	dir := f.path("class", "infiniband")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []NIC{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list RDMA devices: %w", err)
	}
	nics := []NIC{}
	for _, name := range sortedNames(entries) {
		nic, err := f.readNIC(filepath.Join(dir, name), name)
		if err != nil {
			return nil, err
		}
		nics = append(nics, nic)
	}
	return nics, nil
}

func (f FS) readNIC(dir, name string) (NIC, error) {
	nic := NIC{Name: name, NUMANode: -1, Ports: []Port{}}
	var err error
	if nic.NodeGUID, _, err = readOptional(filepath.Join(dir, "node_guid")); err != nil {
		return NIC{}, fmt.Errorf("read node_guid of %s: %w", name, err)
	}

	// Software devices (rxe, siw) have no "device" link: no PCI locality.
	pciDir := filepath.Join(dir, "device")
	if _, err := os.Lstat(pciDir); err == nil {
		if nic.PCIPath, err = f.devicePath(pciDir); err != nil {
			return NIC{}, fmt.Errorf("resolve PCI device of %s: %w", name, err)
		}
		nic.BusID = nic.PCIPath[len(nic.PCIPath)-1]
		if nic.NUMANode, err = readNUMANode(pciDir); err != nil {
			return NIC{}, fmt.Errorf("read numa_node of %s (%s): %w", name, nic.BusID, err)
		}
		driver, err := os.Readlink(filepath.Join(pciDir, "driver"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return NIC{}, fmt.Errorf("read driver of %s (%s): %w", name, nic.BusID, err)
		}
		if driver != "" {
			nic.Driver = filepath.Base(driver)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return NIC{}, fmt.Errorf("stat device of %s: %w", name, err)
	}
	nic.Kind = nicKind(name, nic.Driver)

	portsDir := filepath.Join(dir, "ports")
	entries, err := os.ReadDir(portsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return NIC{}, fmt.Errorf("list ports of %s: %w", name, err)
	}
	for _, portName := range sortedNames(entries) {
		num, err := strconv.Atoi(portName)
		if err != nil || num < 1 {
			continue // not a port directory
		}
		port, err := readPort(filepath.Join(portsDir, portName), num)
		if err != nil {
			return NIC{}, fmt.Errorf("%s port %d: %w", name, num, err)
		}
		nic.Ports = append(nic.Ports, port)
	}
	slices.SortFunc(nic.Ports, func(a, b Port) int { return a.Port - b.Port })
	return nic, nil
}

// nicKind tells EFA devices (driver efa; named efa_N or rdmapNsM) from verbs
// devices.
func nicKind(name, driver string) NICKind {
	if driver == "efa" || strings.HasPrefix(name, "efa") || strings.HasPrefix(name, "rdmap") {
		return KindEFA
	}
	return KindIBVerbs
}

func readPort(dir string, num int) (Port, error) {
	p := Port{Port: num}
	state, err := readString(filepath.Join(dir, "state"))
	if err != nil {
		return Port{}, fmt.Errorf("read state: %w", err)
	}
	if p.State, err = stripStateNumber(state); err != nil {
		return Port{}, fmt.Errorf("parse state: %w", err)
	}
	phys, ok, err := readOptional(filepath.Join(dir, "phys_state"))
	if err != nil {
		return Port{}, fmt.Errorf("read phys_state: %w", err)
	}
	if ok {
		if p.PhysState, err = stripStateNumber(phys); err != nil {
			return Port{}, fmt.Errorf("parse phys_state: %w", err)
		}
	}
	if p.LinkLayer, _, err = readOptional(filepath.Join(dir, "link_layer")); err != nil {
		return Port{}, fmt.Errorf("read link_layer: %w", err)
	}
	if p.Rate, err = readString(filepath.Join(dir, "rate")); err != nil {
		return Port{}, fmt.Errorf("read rate: %w", err)
	}
	if p.RateGbps, err = ParseRate(p.Rate); err != nil {
		return Port{}, fmt.Errorf("parse rate: %w", err)
	}
	return p, nil
}

// stripStateNumber turns the kernel's "4: ACTIVE" into "ACTIVE".
func stripStateNumber(s string) (string, error) {
	num, name, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return "", fmt.Errorf("%q is not \"<number>: <name>\"", s)
	}
	if _, err := strconv.Atoi(strings.TrimSpace(num)); err != nil {
		return "", fmt.Errorf("%q is not \"<number>: <name>\"", s)
	}
	return name, nil
}

// ParseRate reads a port's rate file, "400 Gb/sec (4X NDR)" or
// "2.5 Gb/sec (1X SDR)", and returns the rate in Gbit/s.
func ParseRate(s string) (float64, error) {
	fields := strings.Fields(s)
	if len(fields) < 2 || fields[1] != "Gb/sec" {
		return 0, fmt.Errorf("rate %q is not \"<number> Gb/sec ...\"", s)
	}
	gbps, err := strconv.ParseFloat(fields[0], 64)
	if err != nil || !(gbps >= 0) || math.IsInf(gbps, 0) {
		return 0, fmt.Errorf("rate %q is not \"<number> Gb/sec ...\"", s)
	}
	return gbps, nil
}

// NICsOfKind lists the RDMA devices of kind in the sysfs tree mounted at
// root, by name: those with an ACTIVE port, and the others.
func NICsOfKind(root string, kind NICKind) (active, inactive []string, err error) {
	f, err := NewFS(root)
	if err != nil {
		return nil, nil, fmt.Errorf("read sysfs: %w", err)
	}
	nics, err := f.NICs()
	if err != nil {
		return nil, nil, fmt.Errorf("list RDMA NICs: %w", err)
	}
	for _, n := range nics {
		switch {
		case n.Kind != kind:
		case n.Active():
			active = append(active, n.Name)
		default:
			inactive = append(inactive, n.Name)
		}
	}
	return active, inactive, nil
}
