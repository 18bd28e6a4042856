package ibverbs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
)

func gid(t *testing.T, s string) verbs.GID {
	t.Helper()
	g, err := verbs.ParseGID(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestSelectGID(t *testing.T) {
	ll := gid(t, "fe80::ac0:ebff:fe3a:1b2c")
	v4 := gid(t, "::ffff:10.0.1.5")
	v4vlan := gid(t, "::ffff:192.168.7.5")
	v6 := gid(t, "2001:db8::5")
	ib := gid(t, "fe80::a088:c203:31:5f00")
	e := func(i int, g verbs.GID, typ verbs.GIDType, dev string) verbs.GIDEntry {
		return verbs.GIDEntry{Index: i, GID: g, Type: typ, NetDev: dev}
	}
	v1, v2 := verbs.GIDTypeRoCEv1, verbs.GIDTypeRoCEv2
	eth := verbs.LinkLayerEthernet
	for _, tc := range []struct {
		name   string
		table  []verbs.GIDEntry
		ll     verbs.LinkLayer
		netdev string
		want   int // index; -1: error
	}{
		{"kernel default layout picks v2 IPv4", []verbs.GIDEntry{e(0, ll, v1, "eth2"), e(1, ll, v2, "eth2"), e(2, v4, v1, "eth2"), e(3, v4, v2, "eth2")}, eth, "eth2", 3},
		{"v2 IPv4 on the port beats one on a VLAN", []verbs.GIDEntry{e(3, v4vlan, v2, "eth2.100"), e(5, v4, v2, "eth2")}, eth, "eth2", 5},
		{"a VLAN's v2 IPv4 beats the port's IPv6", []verbs.GIDEntry{e(1, v6, v2, "eth2"), e(4, v4vlan, v2, "eth2.100")}, eth, "eth2", 4},
		{"global IPv6 beats link-local", []verbs.GIDEntry{e(1, ll, v2, "eth2"), e(2, v6, v2, "eth2")}, eth, "eth2", 2},
		{"v2 link-local beats v1 IPv4", []verbs.GIDEntry{e(1, ll, v2, "eth2"), e(2, v4, v1, "eth2")}, eth, "eth2", 1},
		{"only v1", []verbs.GIDEntry{e(0, ll, v1, "eth2"), e(2, v4, v1, "eth2")}, eth, "eth2", 2},
		{"unknown netdev: still IPv4 first", []verbs.GIDEntry{e(1, ll, v2, ""), e(3, v4, v2, "eth9")}, eth, "", 3},
		{"lowest index among equals", []verbs.GIDEntry{e(7, v4, v2, "eth2"), e(3, v4, v2, "eth2")}, eth, "eth2", 3},
		{"zero GIDs skipped", []verbs.GIDEntry{e(0, verbs.GID{}, v2, "eth2"), e(1, ll, v2, "eth2")}, eth, "eth2", 1},
		{"IB types ignored on Ethernet", []verbs.GIDEntry{e(0, ib, verbs.GIDTypeIB, "")}, eth, "eth2", -1},
		{"no GID on Ethernet", nil, eth, "eth2", -1},
		{"InfiniBand: index 0", []verbs.GIDEntry{e(0, ib, verbs.GIDTypeIB, ""), e(1, gid(t, "fec0::1"), verbs.GIDTypeIB, "")}, verbs.LinkLayerInfiniBand, "", 0},
		{"InfiniBand: empty table", nil, verbs.LinkLayerInfiniBand, "", -1},
	} {
		got, err := SelectGID(tc.table, tc.ll, tc.netdev)
		switch {
		case tc.want < 0 && !errors.Is(err, errNoGID):
			t.Errorf("%s: got %+v, %v; want an error", tc.name, got, err)
		case tc.want >= 0 && (err != nil || got.Index != tc.want):
			t.Errorf("%s: got index %d (%v), want %d", tc.name, got.Index, err, tc.want)
		}
	}
	table := []verbs.GIDEntry{e(0, ll, v1, "eth2"), e(3, v4, v2, "eth2")}
	if got, err := PickGID(table, eth, "eth2", 0); err != nil || got.Index != 0 {
		t.Errorf("explicit index 0: %+v, %v", got, err)
	}
	if _, err := PickGID(table, eth, "eth2", 2); !errors.Is(err, errNoGID) {
		t.Errorf("explicit index of no valid entry: %v", err)
	}
	if got, _ := PickGID(table, eth, "eth2", -1); got.Index != 3 {
		t.Errorf("no override: index %d", got.Index)
	}
	if dev := defaultGIDNetDev([]verbs.GIDEntry{e(3, v4, v2, "eth2.5"), e(1, ll, v2, "eth2"), e(0, ll, v1, "eth2")}); dev != "eth2" {
		t.Errorf("defaultGIDNetDev = %q", dev)
	}
}

func TestCompatibleGIDs(t *testing.T) {
	v4a, v4b, v6 := gid(t, "::ffff:10.0.0.1"), gid(t, "::ffff:10.0.0.2"), gid(t, "2001:db8::2")
	if err := compatibleGIDs(v4a, v4b, verbs.GIDTypeRoCEv2, verbs.GIDTypeRoCEv2); err != nil {
		t.Error(err)
	}
	if err := compatibleGIDs(v4a, v4b, verbs.GIDTypeRoCEv2, verbs.GIDTypeRoCEv1); err == nil {
		t.Error("v2 to v1 accepted")
	}
	if err := compatibleGIDs(v4a, v6, verbs.GIDTypeRoCEv2, verbs.GIDTypeRoCEv2); err == nil {
		t.Error("IPv4 to IPv6 accepted")
	}
}

func TestPortNetDev(t *testing.T) {
	root := t.TempDir()
	mk := func(p, content string) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("class/infiniband/mlx5_0/device/net/ens1f0np0/dev_port", "0\n")
	mk("class/infiniband/mlx4_0/device/net/eth4/dev_port", "0\n")
	mk("class/infiniband/mlx4_0/device/net/eth5/dev_port", "1\n")
	if got := PortNetDev(root, "mlx5_0", 1); got != "ens1f0np0" {
		t.Errorf("single netdev: %q", got)
	}
	if got := PortNetDev(root, "mlx4_0", 2); got != "eth5" {
		t.Errorf("port 2 of a dual-port function: %q", got)
	}
	if got := PortNetDev(root, "mlx5_9", 1); got != "" {
		t.Errorf("missing device: %q", got)
	}
}
