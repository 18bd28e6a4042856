package pyapi

import (
	"context"

	"github.com/mkernel/mkernel/gocore/capi"
	"github.com/mkernel/mkernel/gocore/internal/coreinfo"
	"github.com/mkernel/mkernel/gocore/logging"
	"github.com/mkernel/mkernel/gocore/transport"
)

// Version returns the control plane's version string.
func Version() string { return coreinfo.Version }

// CoreAPIAddress returns the address of the C ABI table (mk_api_v1) of the
// library this module lives in, for the torch extension to bind to: the
// Python side reaches the C ABI through this table, never the reverse.
func CoreAPIAddress() int64 { return int64(capi.TableAddress()) }

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
	return coreinfo.TopologyJSON(context.Background(), sysfsRoot)
}

// FaultInjectionBuilt reports whether this library is a test build that honours
// MKERNEL_NET_FAULTS (go build -tags mkernel_faults); a production build refuses
// to open a transport while that variable is set.
func FaultInjectionBuilt() bool { return transport.FaultInjectionBuilt }
