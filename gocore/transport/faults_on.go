//go:build mkernel_faults

package transport

import "os"

// FaultInjectionBuilt says whether this build honours MKERNEL_NET_FAULTS (a test build).
const FaultInjectionBuilt = true

// FaultsFromEnv reads MKERNEL_NET_FAULTS: ok is false when it is unset or empty; a
// malformed value is an error matching ErrInvalid.
func FaultsFromEnv() (f Faults, ok bool, err error) {
	return parseFaults(os.Getenv(EnvNetFaults))
}
