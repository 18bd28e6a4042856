//go:build !cgo

package topology

import (
	"context"
	"errors"
)

// NVMLProber is the NVLinkProber that asks NVML. This build has no cgo, so it
// cannot load NVML and always reports ErrNotSupported.
type NVMLProber struct {
	path string
}

// NewNVMLProber returns a prober for libnvidia-ml.so.1 (or the library named
// with WithNVMLLibrary).
func NewNVMLProber(opts ...NVMLOption) *NVMLProber {
	return &NVMLProber{path: newNVMLOptions(opts).path}
}

// NVLinkPeers returns an error matching ErrNotSupported.
func (p *NVMLProber) NVLinkPeers(ctx context.Context, busIDs []string) (map[string][]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, &UnsupportedError{Feature: "NVML", Err: errors.New("built without cgo, cannot load " + p.path)}
}
