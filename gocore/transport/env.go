package transport

import "os"

// The transport's documented overrides, read here and nowhere else.
const (
	// EnvNet forces one backend by name ("tcp", "loopback", "ibverbs", "efa"): no
	// fallback, Open fails if it does not open on every rank. Unset: automatic (the best
	// RDMA backend whose NICs topology found and that opens on every rank, else tcp).
	EnvNet = "MKERNEL_NET"
	// EnvNetPlugin is the path of a backend plugin binary (see gocore/transport/plugin); it
	// takes precedence over EnvNet.
	EnvNetPlugin = "MKERNEL_NET_PLUGIN"
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
