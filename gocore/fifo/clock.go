package fifo

import (
	"time"

	"golang.org/x/sys/unix"
)

// The Go runtime reads CLOCK_MONOTONIC through the vDSO but exposes it only relative to
// an unknown base; one clock_gettime at start-up pins that base, so MonotonicNanos costs
// what time.Since costs and agrees with C producers' clock_gettime(CLOCK_MONOTONIC).
var (
	monoBase     = time.Now()
	monoBaseNano = func() int64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			return 0
		}
		return ts.Nano()
	}()
)

// MonotonicNanos returns CLOCK_MONOTONIC in nanoseconds (the ClockMonotonic domain).
func MonotonicNanos() uint64 { return uint64(monoBaseNano + int64(time.Since(monoBase))) }
