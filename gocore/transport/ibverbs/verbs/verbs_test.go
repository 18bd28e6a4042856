package verbs

import (
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNoLinkTimeVerbsDependency proves the package only dlopens rdma-core:
// the test binary (which links this package) must not need libibverbs or
// libefa, nor import any of their symbols, or it would not start on a host
// without them.
func TestNoLinkTimeVerbsDependency(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Skipf("test binary is not ELF: %v", err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range libs {
		if strings.Contains(l, "ibverbs") || strings.Contains(l, "efa") || strings.Contains(l, "mlx5") {
			t.Errorf("test binary links %s", l)
		}
	}
	syms, err := f.ImportedSymbols()
	if errors.Is(err, elf.ErrNoSymbols) {
		return // a static binary (CGO_ENABLED=0) imports nothing
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "ibv_") || strings.HasPrefix(s.Name, "_ibv_") || strings.HasPrefix(s.Name, "efadv_") {
			t.Errorf("test binary imports %s from %s", s.Name, s.Library)
		}
	}
}

func TestLoadMissingLibraryIsNotSupported(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "libibverbs.so.1"))
	if !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Load of a missing library: %v, want ErrNotSupported", err)
	}
	if !strings.Contains(err.Error(), "libibverbs.so.1") {
		t.Errorf("error %q does not name the library", err)
	}
}

func TestLoadWithoutHeadersIsNotSupported(t *testing.T) {
	if v, _ := Built(); v {
		t.Skip("built with rdma-core headers; the no-headers build is tested with -tags mkernel_nordma")
	}
	_, err := Load("")
	if !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Load without headers: %v, want ErrNotSupported", err)
	}
}

func TestLoadSystemLibrary(t *testing.T) {
	l, err := Load("")
	if err != nil {
		t.Skipf("no usable libibverbs here: %v", err)
	}
	again, err := Load(DefaultLibrary)
	if err != nil || again != l {
		t.Fatalf("second Load = %p, %v; want the same library %p", again, err, l)
	}
	devs, err := l.Devices()
	if err != nil {
		// No RDMA kernel support (no /sys/class/infiniband_verbs): the
		// library says ENOSYS, which must read as not supported.
		if !errors.Is(err, ErrNotSupported) {
			t.Fatalf("Devices: %v, want a device list or ErrNotSupported", err)
		}
		return
	}
	t.Logf("devices: %v", devs)
	if _, err := l.Open("no-such-device-xyz"); !errors.Is(err, ErrNotSupported) {
		t.Errorf("Open of an absent device: %v, want ErrNotSupported", err)
	}
}

func TestCallError(t *testing.T) {
	err := error(&CallError{Func: "ibv_reg_dmabuf_mr", Errno: syscall.EOPNOTSUPP})
	if !errors.Is(err, ErrNotSupported) || !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("%v: want ErrNotSupported and EOPNOTSUPP", err)
	}
	err = &CallError{Func: "ibv_reg_mr", Errno: syscall.ENOMEM}
	if errors.Is(err, ErrNotSupported) || !errors.Is(err, syscall.ENOMEM) {
		t.Errorf("%v: want ENOMEM only", err)
	}
	if got := err.Error(); got != "ibv_reg_mr: cannot allocate memory" {
		t.Errorf("Error() = %q", got)
	}
}

func TestParseGID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		v4   bool
		ll   bool
	}{
		{"fe80:0000:0000:0000:0202:c9ff:fe00:0001", "fe80::202:c9ff:fe00:1", false, true},
		{"0000:0000:0000:0000:0000:ffff:0a00:0001", "10.0.0.1", true, false},
		{"::ffff:192.168.1.7", "192.168.1.7", true, false},
		{"2001:db8::1", "2001:db8::1", false, false},
	} {
		g, err := ParseGID(tc.in)
		if err != nil {
			t.Errorf("ParseGID(%q): %v", tc.in, err)
			continue
		}
		if g.String() != tc.want || g.IPv4Mapped() != tc.v4 || g.LinkLocal() != tc.ll {
			t.Errorf("ParseGID(%q) = %s (v4 %v, link-local %v); want %s (%v, %v)", tc.in, g, g.IPv4Mapped(), g.LinkLocal(), tc.want, tc.v4, tc.ll)
		}
	}
	for _, bad := range []string{"", "fe80", "zz80:0000:0000:0000:0202:c9ff:fe00:0001", "1:2:3:4:5:6:7:8:9"} {
		if _, err := ParseGID(bad); err == nil {
			t.Errorf("ParseGID(%q) succeeded", bad)
		}
	}
}

// writeTree writes files (path → content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadSysfsGIDTable(t *testing.T) {
	root := t.TempDir()
	port := "class/infiniband/mlx5_0/ports/1/"
	zero := "0000:0000:0000:0000:0000:0000:0000:0000"
	writeTree(t, root, map[string]string{
		port + "link_layer":                          "Ethernet",
		port + "gids/0":                              "fe80:0000:0000:0000:0ac0:ebff:fe3a:1b2c",
		port + "gids/1":                              "fe80:0000:0000:0000:0ac0:ebff:fe3a:1b2c",
		port + "gids/2":                              "0000:0000:0000:0000:0000:ffff:0a00:0105",
		port + "gids/3":                              "0000:0000:0000:0000:0000:ffff:0a00:0105",
		port + "gids/4":                              zero,
		port + "gid_attrs/types/0":                   "IB/RoCE v1",
		port + "gid_attrs/types/1":                   "RoCE v2",
		port + "gid_attrs/types/2":                   "IB/RoCE v1",
		port + "gid_attrs/types/3":                   "RoCE v2",
		port + "gid_attrs/ndevs/0":                   "eth2",
		port + "gid_attrs/ndevs/1":                   "eth2",
		port + "gid_attrs/ndevs/2":                   "eth2",
		port + "gid_attrs/ndevs/3":                   "eth2",
		"class/infiniband/mlx5_1/ports/1/link_layer": "InfiniBand",
		"class/infiniband/mlx5_1/ports/1/gids/0":     "fe80:0000:0000:0000:a088:c203:0031:5f00",
	})
	got, err := ReadSysfsGIDTable(root, "mlx5_0", 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	mustGID := func(s string) GID {
		g, err := ParseGID(s)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	ll, v4 := mustGID("fe80::ac0:ebff:fe3a:1b2c"), mustGID("::ffff:10.0.1.5")
	want := []GIDEntry{
		{Index: 0, GID: ll, Type: GIDTypeRoCEv1, NetDev: "eth2"},
		{Index: 1, GID: ll, Type: GIDTypeRoCEv2, NetDev: "eth2"},
		{Index: 2, GID: v4, Type: GIDTypeRoCEv1, NetDev: "eth2"},
		{Index: 3, GID: v4, Type: GIDTypeRoCEv2, NetDev: "eth2"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("RoCE table (-want +got):\n%s", d)
	}
	got, err = ReadSysfsGIDTable(root, "mlx5_1", 1, 128)
	if err != nil {
		t.Fatal(err)
	}
	want = []GIDEntry{{Index: 0, GID: mustGID("fe80::a088:c203:31:5f00"), Type: GIDTypeIB}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("IB table (-want +got):\n%s", d)
	}
	writeTree(t, root, map[string]string{port + "gids/5": "nonsense"})
	if _, err := ReadSysfsGIDTable(root, "mlx5_0", 1, 8); err == nil || !strings.Contains(err.Error(), "GID 5 of mlx5_0 port 1") {
		t.Errorf("bad GID file: %v, want an error naming GID 5 of mlx5_0 port 1", err)
	}
}

func TestEnumStrings(t *testing.T) {
	if WCRetryExcErr.String() != "transport retry counter exceeded" || WCStatus(99).String() != "status 99" {
		t.Error("WCStatus names")
	}
	if MTU(5).Bytes() != 4096 || MTU(1).Bytes() != 256 || MTU(0).Bytes() != 0 {
		t.Error("MTU bytes")
	}
	if QPStateRTS.String() != "RTS" || PortActive.String() != "ACTIVE" || GIDTypeRoCEv2.String() != "RoCE v2" {
		t.Error("state names")
	}
	if !WCRecvRDMAWithImm.IsRecv() || WCRDMAWrite.IsRecv() {
		t.Error("IsRecv")
	}
}
