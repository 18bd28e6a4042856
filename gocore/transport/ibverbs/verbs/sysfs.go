package verbs

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultSysfsRoot is where sysfs is mounted.
const DefaultSysfsRoot = "/sys"

// ReadSysfsGIDTable reads the valid entries among the first n of a port's
// GID table from sysfs (class/infiniband/<dev>/ports/<port>/gids/<i>, with
// gid_attrs/types/<i> and gid_attrs/ndevs/<i>), the way libibverbs does
// without a kernel that answers the GID-table ioctl. root "" is /sys. A
// "IB/RoCE v1" entry is an IB GID on an InfiniBand port and RoCE v1 on an
// Ethernet one, so the port's link_layer file is read too.
func ReadSysfsGIDTable(root, dev string, port, n int) ([]GIDEntry, error) {
	if root == "" {
		root = DefaultSysfsRoot
	}
	dir := filepath.Join(root, "class", "infiniband", dev, "ports", strconv.Itoa(port))
	ll, err := os.ReadFile(filepath.Join(dir, "link_layer"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read GID table of %s port %d: %w", dev, port, err)
	}
	ethernet := strings.TrimSpace(string(ll)) == "Ethernet"
	var out []GIDEntry
	for i := range n {
		raw, err := os.ReadFile(filepath.Join(dir, "gids", strconv.Itoa(i)))
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read GID %d of %s port %d: %w", i, dev, port, err)
		}
		gid, err := ParseGID(strings.TrimSpace(string(raw)))
		if err != nil {
			return nil, fmt.Errorf("GID %d of %s port %d: %w", i, dev, port, err)
		}
		if gid.IsZero() {
			continue
		}
		e := GIDEntry{Index: i, GID: gid, Type: GIDTypeIB}
		// Unused entries make these reads fail with EINVAL; a missing
		// gid_attrs directory (old kernels) means IB/RoCE v1.
		if t, err := os.ReadFile(filepath.Join(dir, "gid_attrs", "types", strconv.Itoa(i))); err == nil {
			switch strings.TrimSpace(string(t)) {
			case "RoCE v2":
				e.Type = GIDTypeRoCEv2
			case "IB/RoCE v1":
				if ethernet {
					e.Type = GIDTypeRoCEv1
				}
			default:
				return nil, fmt.Errorf("GID %d of %s port %d: unknown type %q", i, dev, port, strings.TrimSpace(string(t)))
			}
		} else if ethernet {
			e.Type = GIDTypeRoCEv1
		}
		if nd, err := os.ReadFile(filepath.Join(dir, "gid_attrs", "ndevs", strconv.Itoa(i))); err == nil {
			e.NetDev = strings.TrimSpace(string(nd))
		}
		out = append(out, e)
	}
	return out, nil
}

// ParseGID reads a GID as sysfs prints it, eight groups of four hex digits
// ("fe80:0000:0000:0000:0202:c9ff:fe00:0001"), or in any form net.ParseIP
// accepts ("::ffff:10.0.0.1").
func ParseGID(s string) (GID, error) {
	var g GID
	groups := strings.Split(s, ":")
	if len(groups) == 8 {
		ok := true
		for i, grp := range groups {
			v, err := strconv.ParseUint(grp, 16, 16)
			if err != nil || len(grp) != 4 {
				ok = false
				break
			}
			g[2*i], g[2*i+1] = byte(v>>8), byte(v)
		}
		if ok {
			return g, nil
		}
	}
	ip := net.ParseIP(s).To16()
	if ip == nil {
		return GID{}, fmt.Errorf("bad GID %q", s)
	}
	copy(g[:], ip)
	return g, nil
}
