//go:build !mkernel_faults

package transport

import (
	"fmt"
	"os"
	"strings"
)

// FaultInjectionBuilt says whether this build honours MKERNEL_NET_FAULTS (a test build).
const FaultInjectionBuilt = false

// FaultsFromEnv never turns fault injection on in a production build: with
// MKERNEL_NET_FAULTS unset it returns ok false; set, an error matching ErrInvalid
// that says which build honours it.
func FaultsFromEnv() (f Faults, ok bool, err error) {
	if v := strings.TrimSpace(os.Getenv(EnvNetFaults)); v != "" {
		return f, false, fmt.Errorf("%w: %s=%q is a test hook, honoured only by a test build of the "+
			"control plane (go build -tags mkernel_faults; make core CORE_TAGS=mkernel_faults); unset it",
			ErrInvalid, EnvNetFaults, v)
	}
	return f, false, nil
}
