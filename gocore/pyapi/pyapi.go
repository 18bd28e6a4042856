package pyapi

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/mkernel/mkernel/gocore/logging"
	"github.com/mkernel/mkernel/gocore/topology"
)

// version is the control plane's version; the Python package checks it
// against its own at import.
const version = "0.1.0"

var coreAPIAddress atomic.Uint64

// Version returns the control plane's version string.
func Version() string { return version }

// SetCoreAPIAddress is called once by the C ABI layer (gocore/capi) at load
// time with the address of its mk_api_v1 table.
func SetCoreAPIAddress(addr uint64) { coreAPIAddress.Store(addr) }

// CoreAPIAddress returns the address of the C ABI table (mk_api_v1) of the
// library this module lives in, for the torch extension to bind to. Zero
// means the library was built without the C ABI (a bug).
func CoreAPIAddress() int64 { return int64(coreAPIAddress.Load()) }

// SetLogLevel sets the level of every mkernel logger (Go and Python):
// debug, info, warn or error.
func SetLogLevel(level string) error { return logging.SetLevel(level) }

// LogLevel returns the current level's name.
func LogLevel() string { return logging.Level() }

// SetLogFormat switches the log format: console or json.
func SetLogFormat(format string) error { return logging.SetFormat(format) }

// Log writes one Python record through the Go logger.
func Log(level, logger, msg string) error { return logging.Emit(level, logger, msg) }

// TopologyJSON discovers this machine (or the sysfs tree at sysfsRoot, ""
// meaning /sys) and returns the topology with placements as JSON.
func TopologyJSON(sysfsRoot string) (string, error) {
	var opts []topology.Option
	if sysfsRoot != "" {
		opts = append(opts, topology.WithSysfsRoot(sysfsRoot))
	}
	t, err := topology.Discover(context.Background(), opts...)
	if err != nil {
		return "", fmt.Errorf("discover topology: %w", err)
	}
	b, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("encode topology: %w", err)
	}
	return string(b), nil
}
