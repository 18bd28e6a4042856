package topology

import (
	"context"
	"slices"
)

// NVLinkProber finds which GPUs reach each other over NVLink.
//
// NVLinkPeers gets the bus IDs of the host's GPUs (sysfs form,
// "0000:18:00.0") and returns, for each, the bus IDs of the others it reaches
// over NVLink, directly or through NVSwitch. IDs missing from the map have no
// peers. An error matching ErrNotSupported means the prober cannot tell on
// this host (no NVML); Discover then reports NVLink as unknown.
type NVLinkProber interface {
	NVLinkPeers(ctx context.Context, busIDs []string) (map[string][]string, error)
}

// NVLinkProberFunc adapts a function to NVLinkProber.
type NVLinkProberFunc func(ctx context.Context, busIDs []string) (map[string][]string, error)

// NVLinkPeers calls fn.
func (fn NVLinkProberFunc) NVLinkPeers(ctx context.Context, busIDs []string) (map[string][]string, error) {
	return fn(ctx, busIDs)
}

// StaticNVLink is an NVLinkProber that answers from a fixed table of bus ID
// to peer bus IDs, for tests and for hosts whose NVLink layout is known
// without NVML. Links are taken as symmetric; bus IDs may be in sysfs or NVML
// form. StaticNVLink(nil) means "no NVLink at all", which is known, unlike a
// missing prober.
type StaticNVLink map[string][]string

// NVLinkPeers returns the table's peers for busIDs.
func (s StaticNVLink) NVLinkPeers(ctx context.Context, busIDs []string) (map[string][]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	links := make(map[[2]string]bool)
	for from, tos := range s {
		for _, to := range tos {
			from, to := normalizeOrKeep(from), normalizeOrKeep(to)
			links[[2]string{from, to}] = true
			links[[2]string{to, from}] = true
		}
	}
	out := make(map[string][]string, len(busIDs))
	for _, a := range busIDs {
		peers := []string{}
		for _, b := range busIDs {
			if a != b && links[[2]string{normalizeOrKeep(a), normalizeOrKeep(b)}] {
				peers = append(peers, b)
			}
		}
		out[a] = peers
	}
	return out, nil
}

// normalizeOrKeep is NormalizeBusID, or s itself when s does not parse.
func normalizeOrKeep(s string) string {
	if n, err := NormalizeBusID(s); err == nil {
		return n
	}
	return s
}

// MeshNVLink returns an NVLinkProber that reports every GPU reaching every
// other one, as on an HGX board where all GPUs hang off NVSwitches.
func MeshNVLink() NVLinkProber {
	return NVLinkProberFunc(func(ctx context.Context, busIDs []string) (map[string][]string, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out := make(map[string][]string, len(busIDs))
		for _, a := range busIDs {
			out[a] = slices.DeleteFunc(slices.Clone(busIDs), func(b string) bool { return b == a })
		}
		return out, nil
	})
}

// Compile-time checks that the fakes still fit the interface.
var (
	_ NVLinkProber = StaticNVLink(nil)
	_ NVLinkProber = NVLinkProberFunc(nil)
)
