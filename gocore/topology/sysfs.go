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

// DefaultSysfsRoot is where sysfs is mounted.
const DefaultSysfsRoot = "/sys"

// FS reads topology from a sysfs tree, like procfs' sysfs.FS: the real one at
// /sys, or a fake one under testdata.
type FS struct {
	root string
}

// NewFS returns an FS reading the sysfs tree mounted at root. It fails if root
// is not a directory.
func NewFS(root string) (FS, error) {
	info, err := os.Stat(root)
	if err != nil {
		return FS{}, fmt.Errorf("sysfs root: %w", err)
	}
	if !info.IsDir() {
		return FS{}, fmt.Errorf("sysfs root %s: not a directory", root)
	}
	return FS{root: root}, nil
}

// Root returns the directory the FS reads.
func (f FS) Root() string { return f.root }

func (f FS) path(elem ...string) string {
	return filepath.Join(append([]string{f.root}, elem...)...)
}

// readString returns the file's content without surrounding white space.
func readString(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// readOptional is readString, but returns "", false, nil for a missing file.
func readOptional(path string) (string, bool, error) {
	s, err := readString(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return s, true, nil
}

// readNUMANode reads a device's numa_node; a missing file (kernel without
// NUMA) is -1, like the kernel's "don't know".
func readNUMANode(dir string) (int, error) {
	s, ok, err := readOptional(filepath.Join(dir, "numa_node"))
	if err != nil || !ok {
		return -1, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < -1 {
		return -1, fmt.Errorf("bad numa_node %q", s)
	}
	return n, nil
}

// devicePath resolves a sysfs entry that links (possibly through several
// symlinks) into the device tree, and returns the path below devices/: for
// bus/pci/devices/0000:18:00.0 that is ["pci0000:17", "0000:17:00.0",
// "0000:18:00.0"]. An entry that does not resolve into devices/ (a fake
// tree without links) yields just its own name.
func (f FS) devicePath(entry string) ([]string, error) {
	resolved, err := filepath.EvalSymlinks(entry)
	if err != nil {
		return nil, err
	}
	root, err := filepath.EvalSymlinks(f.root)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(filepath.Join(root, "devices"), resolved)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return []string{filepath.Base(resolved)}, nil
	}
	return strings.Split(filepath.ToSlash(rel), "/"), nil
}

// naturalLess orders names with embedded numbers by value: "mlx5_2" before
// "mlx5_10", "rdmap79s0" before "rdmap113s0".
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digitPrefix(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

func naturalCompare(a, b string) int {
	switch {
	case naturalLess(a, b):
		return -1
	case naturalLess(b, a):
		return 1
	}
	return strings.Compare(a, b)
}

// sortedNames returns the names of the entries in dir, in natural order.
func sortedNames(entries []os.DirEntry) []string {
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.SortFunc(names, naturalCompare)
	return names
}
