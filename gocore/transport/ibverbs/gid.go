package ibverbs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
)

// SelectGID picks the source GID for a port from its table (verbs'
// GIDTable: the valid entries only). The rule:
//
// InfiniBand: the lowest-index entry (index 0, the port GID: subnet prefix
// and port GUID). Traffic is routed by LID; the GID is used in a GRH only
// between different subnets.
//
// Ethernet (RoCE), best first:
//
//  1. RoCE v2 before RoCE v1 (v2 is routable UDP/IP, v1 is L2 only);
//  2. within a type: an IPv4-mapped GID (::ffff:a.b.c.d) on the port's own
//     netdev, then one on another netdev (a VLAN or macvlan over it), then a
//     global IPv6 GID on the port's netdev, then one elsewhere, and last the
//     link-local default GID (fe80::/10, derived from the MAC);
//  3. the lowest index among equals.
//
// IPv4 comes first because that is what RoCE fabrics are routed and
// configured for (ECN/PFC classification, ARP instead of ND); the port's own
// netdev first because a GID on a VLAN netdev carries that VLAN's tag, which
// only a VLAN-aware fabric configuration wants. portNetDev is the port's
// netdev ("" if unknown: then no GID counts as on it). Both ends apply the
// same rule, so they agree on type and family; Connect still checks.
//
// An explicit index (WithGIDIndex) overrides the rule; see PickGID.
func SelectGID(table []verbs.GIDEntry, ll verbs.LinkLayer, portNetDev string) (verbs.GIDEntry, error) {
	var best *verbs.GIDEntry
	bestRank := 1 << 30
	for i := range table {
		e := &table[i]
		if e.GID.IsZero() {
			continue
		}
		r := gidRank(e, ll, portNetDev)
		if r < 0 {
			continue
		}
		if r < bestRank || r == bestRank && e.Index < best.Index {
			best, bestRank = e, r
		}
	}
	if best == nil {
		if ll == verbs.LinkLayerEthernet {
			where := "the port's netdev"
			if portNetDev != "" {
				where = portNetDev
			}
			return verbs.GIDEntry{}, fmt.Errorf("no usable RoCE GID (assign an IP address to %s): %w", where, errNoGID)
		}
		return verbs.GIDEntry{}, fmt.Errorf("empty GID table: %w", errNoGID)
	}
	return *best, nil
}

var errNoGID = errors.New("no GID")

// gidRank orders candidates, lower is better; -1 excludes one.
func gidRank(e *verbs.GIDEntry, ll verbs.LinkLayer, portNetDev string) int {
	if ll != verbs.LinkLayerEthernet {
		if e.Type != verbs.GIDTypeIB {
			return -1
		}
		return 0
	}
	var typ int
	switch e.Type {
	case verbs.GIDTypeRoCEv2:
		typ = 0
	case verbs.GIDTypeRoCEv1:
		typ = 1
	default:
		return -1
	}
	onPort := portNetDev != "" && e.NetDev == portNetDev
	var addr int
	switch {
	case e.GID.IPv4Mapped() && onPort:
		addr = 0
	case e.GID.IPv4Mapped():
		addr = 1
	case !e.GID.LinkLocal() && onPort:
		addr = 2
	case !e.GID.LinkLocal():
		addr = 3
	default:
		addr = 4
	}
	return typ*10 + addr
}

// PickGID applies an explicit index (index >= 0) or SelectGID (index < 0).
func PickGID(table []verbs.GIDEntry, ll verbs.LinkLayer, portNetDev string, index int) (verbs.GIDEntry, error) {
	if index < 0 {
		return SelectGID(table, ll, portNetDev)
	}
	i := slices.IndexFunc(table, func(e verbs.GIDEntry) bool { return e.Index == index })
	if i < 0 {
		return verbs.GIDEntry{}, fmt.Errorf("GID index %d is not a valid entry of the port's table: %w", index, errNoGID)
	}
	return table[i], nil
}

// PortNetDev returns the netdev of a RoCE port from sysfs
// (class/infiniband/<dev>/device/net/<if>, the one whose dev_port is
// port-1 when the PCI function has several), or "" when it cannot tell.
func PortNetDev(sysfsRoot, dev string, port int) string {
	if sysfsRoot == "" {
		sysfsRoot = verbs.DefaultSysfsRoot
	}
	dir := filepath.Join(sysfsRoot, "class", "infiniband", dev, "device", "net")
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return ""
	}
	if len(entries) == 1 {
		return entries[0].Name()
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "dev_port"))
		if err != nil {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n == port-1 {
			return e.Name()
		}
	}
	return ""
}

// defaultGIDNetDev is the netdev of the port's link-local default GID with
// the lowest index: the kernel creates those on the port's own netdev.
func defaultGIDNetDev(table []verbs.GIDEntry) string {
	best := -1
	dev := ""
	for _, e := range table {
		if e.GID.LinkLocal() && e.NetDev != "" && (best < 0 || e.Index < best) {
			best, dev = e.Index, e.NetDev
		}
	}
	return dev
}

// compatibleGIDs checks that two RoCE ends can talk: same GID type and the
// same address family.
func compatibleGIDs(local, remote verbs.GID, lt, rt verbs.GIDType) error {
	if lt != rt {
		return fmt.Errorf("GID types differ: local %v (%s), remote %v (%s)", lt, local, rt, remote)
	}
	if local.IPv4Mapped() != remote.IPv4Mapped() {
		return fmt.Errorf("GID address families differ: local %s, remote %s", local, remote)
	}
	return nil
}
