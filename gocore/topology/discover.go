package topology

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
)

// Option configures Discover.
type Option func(*config)

type config struct {
	root      string
	prober    NVLinkProber
	proberSet bool
	hostname  string
	place     []PlaceOption
}

// WithSysfsRoot reads sysfs from root instead of /sys; tests point it at
// testdata/sysfs/<machine>.
func WithSysfsRoot(root string) Option {
	return func(c *config) { c.root = root }
}

// WithNVLinkProber replaces the default NVMLProber. nil skips probing, which
// leaves NVLink unknown.
func WithNVLinkProber(p NVLinkProber) Option {
	return func(c *config) { c.prober, c.proberSet = p, true }
}

// WithHostname sets Topology.Hostname instead of os.Hostname().
func WithHostname(name string) Option {
	return func(c *config) { c.hostname = name }
}

// WithPlaceOptions passes options to the Place call that fills
// Topology.Placements.
func WithPlaceOptions(opts ...PlaceOption) Option {
	return func(c *config) { c.place = append(c.place, opts...) }
}

// Discover reads the host's topology and places NICs and proxy CPUs for every
// GPU (Topology.Placements, as Place computes them).
//
// A missing GPU, NIC or NVML is not an error: the lists come back empty and
// NVLinkKnown false, with the reason among Warnings. Unreadable or malformed
// sysfs files are errors naming the file and device. Only ctx's cancellation
// interrupts NVLink probing; the sysfs reads are not blocking.
func Discover(ctx context.Context, opts ...Option) (*Topology, error) {
	c := config{root: DefaultSysfsRoot}
	for _, opt := range opts {
		opt(&c)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	fs, err := NewFS(c.root)
	if err != nil {
		return nil, err
	}
	t := &Topology{Hostname: c.hostname, Warnings: []string{}}
	if t.Hostname == "" {
		if t.Hostname, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("get hostname: %w", err)
		}
	}
	if t.OnlineCPUs, err = fs.OnlineCPUs(); err != nil {
		return nil, err
	}
	if t.NUMANodes, err = fs.NUMANodes(); err != nil {
		return nil, err
	}
	if t.GPUs, err = fs.GPUs(); err != nil {
		return nil, err
	}
	if t.NICs, err = fs.NICs(); err != nil {
		return nil, err
	}

	if !c.proberSet {
		c.prober = NewNVMLProber()
	}
	if err := probeNVLink(ctx, c.prober, t); err != nil {
		return nil, err
	}

	if t.Placements, err = Place(t, c.place...); err != nil {
		return nil, err
	}
	return t, nil
}

// probeNVLink fills GPU.NVLinkPeers and NVLinkKnown. A prober that fails
// leaves NVLink unknown with a warning; only ctx's errors are returned.
func probeNVLink(ctx context.Context, p NVLinkProber, t *Topology) error {
	if p == nil || len(t.GPUs) == 0 {
		return nil
	}
	busIDs := make([]string, len(t.GPUs))
	for i, g := range t.GPUs {
		busIDs[i] = g.BusID
	}
	peers, err := p.NVLinkPeers(ctx, busIDs)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			return fmt.Errorf("probe NVLink: %w", err)
		}
		t.Warnings = append(t.Warnings, fmt.Sprintf("NVLink peers unknown: %v", err))
		return nil
	}

	// Keep only peers that are other GPUs of this host, in sysfs form, and
	// make every link symmetric.
	known := make(map[string]bool, len(busIDs))
	for _, id := range busIDs {
		known[id] = true
	}
	linked := make(map[[2]string]bool)
	for from, tos := range peers {
		from, err := NormalizeBusID(from)
		if err != nil || !known[from] {
			continue
		}
		for _, to := range tos {
			to, err := NormalizeBusID(to)
			if err != nil || !known[to] || to == from {
				continue
			}
			linked[[2]string{from, to}] = true
			linked[[2]string{to, from}] = true
		}
	}
	for i := range t.GPUs {
		g := &t.GPUs[i]
		g.NVLinkPeers = []string{}
		for _, other := range busIDs {
			if linked[[2]string{g.BusID, other}] {
				g.NVLinkPeers = append(g.NVLinkPeers, other)
			}
		}
		slices.SortFunc(g.NVLinkPeers, compareBusID)
	}
	t.NVLinkKnown = true
	return nil
}
