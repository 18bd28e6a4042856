package topology

import "errors"

// ErrNotSupported is matched (with errors.Is) by errors that mean a feature
// cannot be used on this host, for example NVML when libnvidia-ml.so.1 or the
// NVIDIA driver is absent.
var ErrNotSupported = errors.New("not supported")

// UnsupportedError names the feature that is unavailable and why. It matches
// ErrNotSupported.
type UnsupportedError struct {
	// Feature is what was asked for, e.g. "NVML".
	Feature string
	// Err is the underlying cause; it may be nil.
	Err error
}

func (e *UnsupportedError) Error() string {
	if e.Err == nil {
		return e.Feature + " not supported"
	}
	return e.Feature + " not supported: " + e.Err.Error()
}

// Is reports whether target is ErrNotSupported.
func (e *UnsupportedError) Is(target error) bool { return target == ErrNotSupported }

// Unwrap returns the underlying cause.
func (e *UnsupportedError) Unwrap() error { return e.Err }
