package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// NUMANodes returns the nodes under devices/system/node, sorted by ID. A
// kernel without NUMA support has no such directory and no nodes.
func (f FS) NUMANodes() ([]NUMANode, error) {
	dir := f.path("devices", "system", "node")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []NUMANode{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list NUMA nodes: %w", err)
	}
	nodes := []NUMANode{}
	for _, e := range entries {
		suffix, ok := strings.CutPrefix(e.Name(), "node")
		if !ok {
			continue // has_cpu, online, possible, ...
		}
		id, err := strconv.Atoi(suffix)
		if err != nil || id < 0 {
			continue
		}
		s, err := readString(filepath.Join(dir, e.Name(), "cpulist"))
		if err != nil {
			return nil, fmt.Errorf("read cpulist of NUMA node %d: %w", id, err)
		}
		cpus, err := ParseCPUList(s)
		if err != nil {
			return nil, fmt.Errorf("parse cpulist of NUMA node %d: %w", id, err)
		}
		nodes = append(nodes, NUMANode{ID: id, CPUs: cpus})
	}
	slices.SortFunc(nodes, func(a, b NUMANode) int { return a.ID - b.ID })
	return nodes, nil
}

// OnlineCPUs returns devices/system/cpu/online.
func (f FS) OnlineCPUs() (CPUList, error) {
	s, err := readString(f.path("devices", "system", "cpu", "online"))
	if err != nil {
		return nil, fmt.Errorf("read online CPUs: %w", err)
	}
	cpus, err := ParseCPUList(s)
	if err != nil {
		return nil, fmt.Errorf("parse online CPUs: %w", err)
	}
	return cpus, nil
}
