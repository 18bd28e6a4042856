// Package coreinfo holds what both faces of libmkernel_core report about the
// control plane itself (its version, this machine's topology as JSON): the C
// ABI (gocore/capi) and the Python bindings (gocore/pyapi) each forward here,
// so neither depends on the other for it.
package coreinfo

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mkernel/mkernel/gocore/topology"
)

// Version is the control plane's version; the Python package checks it
// against its own at import, C callers read it through mk_get_version.
const Version = "0.1.0"

// TopologyJSON discovers this machine (or the sysfs tree at sysfsRoot, ""
// meaning /sys) and returns the topology with placements as JSON.
func TopologyJSON(ctx context.Context, sysfsRoot string) (string, error) {
	var opts []topology.Option
	if sysfsRoot != "" {
		opts = append(opts, topology.WithSysfsRoot(sysfsRoot))
	}
	t, err := topology.Discover(ctx, opts...)
	if err != nil {
		return "", fmt.Errorf("discover topology: %w", err)
	}
	b, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("encode topology: %w", err)
	}
	return string(b), nil
}
