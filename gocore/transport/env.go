package transport

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// The transport's documented overrides, read here and nowhere else.
const (
	// EnvNet forces one backend by name ("tcp", "loopback", "ibverbs", "efa"): no
	// fallback, Open fails if it does not open on every rank. Unset: automatic (the best
	// RDMA backend whose NICs topology found and that opens on every rank, else tcp).
	EnvNet = "MKERNEL_NET"
	// EnvNetPlugin is the path of a backend plugin binary (see gocore/transport/plugin); it
	// takes precedence over EnvNet.
	EnvNetPlugin = "MKERNEL_NET_PLUGIN"
	// EnvNetFaults (tests only) turns on the fault injection of the backends that have one
	// (tcp: WithFaults, loopback: WithReorder): "SEED:MAXDELAY", e.g. "7:200us" — every
	// op is held back for a random time below MAXDELAY (a Go duration) and due ops are
	// applied in random order, seeded by SEED plus the rank. Results must stay exact.
	// Only a test build (-tags mkernel_faults, `make core CORE_TAGS=mkernel_faults`)
	// honours it; a production library refuses to open a transport while it is set, so a
	// stray variable can neither slow a job down nor go unnoticed.
	EnvNetFaults = "MKERNEL_NET_FAULTS"
)

// PluginBackendName is the name of backends loaded from plugin binaries.
const PluginBackendName = "plugin"

// Selection is the user's explicit backend choice; the zero value means automatic.
type Selection struct {
	Name   string // MKERNEL_NET
	Plugin string // MKERNEL_NET_PLUGIN
}

// SelectionFromEnv reads MKERNEL_NET and MKERNEL_NET_PLUGIN.
func SelectionFromEnv() Selection {
	return Selection{Name: os.Getenv(EnvNet), Plugin: os.Getenv(EnvNetPlugin)}
}

// Faults is the test-only fault injection asked for by MKERNEL_NET_FAULTS.
type Faults struct {
	Seed     uint64
	MaxDelay time.Duration
}

// parseFaults reads a MKERNEL_NET_FAULTS value: ok is false when it is empty; a malformed
// value is an error matching ErrInvalid.
func parseFaults(v string) (f Faults, ok bool, err error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return f, false, nil
	}
	seed, delay, found := strings.Cut(v, ":")
	if f.Seed, err = strconv.ParseUint(seed, 10, 64); err == nil && found {
		f.MaxDelay, err = time.ParseDuration(delay)
	}
	if err != nil || !found || f.MaxDelay < 0 {
		return Faults{}, false, fmt.Errorf("%w: %s=%q: want SEED:MAXDELAY, e.g. 7:200us", ErrInvalid, EnvNetFaults, v)
	}
	return f, true, nil
}
