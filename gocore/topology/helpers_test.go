package topology_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/mkernel/mkernel/gocore/topology"
)

// sysfsRoot is the checked-in fake sysfs tree of a machine.
func sysfsRoot(machine string) string {
	return filepath.Join("testdata", "sysfs", machine)
}

// noNVML is a prober for a host without libnvidia-ml: NVLink unknown.
var noNVML = topology.NVLinkProberFunc(func(context.Context, []string) (map[string][]string, error) {
	return nil, &topology.UnsupportedError{
		Feature: "NVML",
		Err:     errors.New("load libnvidia-ml.so.1: ERROR_LIBRARY_NOT_FOUND"),
	}
})

// discoverAt runs Discover on a sysfs tree with a fixed hostname and the
// given prober, never the real NVML.
func discoverAt(t testing.TB, root string, prober topology.NVLinkProber, opts ...topology.Option) (*topology.Topology, error) {
	t.Helper()
	opts = append([]topology.Option{
		topology.WithSysfsRoot(root),
		topology.WithHostname(filepath.Base(root)),
		topology.WithNVLinkProber(prober),
	}, opts...)
	return topology.Discover(t.Context(), opts...)
}

// mustDiscover is discoverAt for a machine's checked-in tree, failing the
// test on error.
func mustDiscover(t testing.TB, machine string, prober topology.NVLinkProber, opts ...topology.Option) *topology.Topology {
	t.Helper()
	topo, err := discoverAt(t, sysfsRoot(machine), prober, opts...)
	if err != nil {
		t.Fatalf("Discover(%s): %v", machine, err)
	}
	return topo
}

// copyTree copies a machine's tree into a temporary directory, symlinks
// kept as symlinks, so a test can break it.
func copyTree(t testing.TB, machine string) string {
	t.Helper()
	src := sysfsRoot(machine)
	dst := filepath.Join(t.TempDir(), machine)
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
	return dst
}

// writeFile replaces a file of a copied tree; rel may go through symlinks.
func writeFile(t testing.TB, root, rel, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, rel), []byte(content+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// removeAll deletes a file or directory of a copied tree.
func removeAll(t testing.TB, root, rel string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if _, err := os.Lstat(p); err != nil {
		t.Fatalf("remove %s: %v", rel, err)
	}
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
}
