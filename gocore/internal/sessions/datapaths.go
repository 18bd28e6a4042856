package sessions

import (
	"context"
	"errors"
	"fmt"

	"github.com/mkernel/mkernel/gocore/datapath"
	"github.com/mkernel/mkernel/gocore/logging"
	"github.com/mkernel/mkernel/gocore/topology"
	"github.com/mkernel/mkernel/gocore/transport"
)

// ErrUnknownDatapath is returned for a data path handle that is closed or never existed.
var ErrUnknownDatapath = errors.New("unknown or closed data path handle")

var datapaths = map[uint64]*datapath.Datapath{} // guarded by mu; handles share `next` with sessions

// PlacementOf discovers this host's topology and returns GPU gpu's placement (its NICs
// and proxy CPUs).
func PlacementOf(gpu int) (*topology.Placement, error) {
	t, err := topology.Discover(context.Background())
	if err != nil {
		return nil, fmt.Errorf("placement of GPU %d: %w", gpu, err)
	}
	if gpu < 0 || gpu >= len(t.Placements) {
		return nil, fmt.Errorf("placement of GPU %d: %w: the host has %d GPUs", gpu, transport.ErrInvalid, len(t.Placements))
	}
	p := t.Placements[gpu]
	return &p, nil
}

// OpenDatapath opens a rank's data path over the session behind handle (a collective:
// every rank of the session calls it) and returns the data path's handle.
func OpenDatapath(handle uint64, cfg datapath.Config) (uint64, error) {
	s, err := Session(handle)
	if err != nil {
		return 0, err
	}
	if cfg.Log == nil {
		cfg.Log = logging.Named("datapath")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = transport.DefaultTimeout
	}
	// Setup is bounded by the transport's own timeout plus the two all-gathers'.
	ctx, cancel := context.WithTimeout(context.Background(), 3*cfg.Timeout)
	defer cancel()
	dp, err := datapath.Open(ctx, s, cfg)
	if err != nil {
		return 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	h := next
	next++
	datapaths[h] = dp
	return h, nil
}

// Datapath returns the data path behind a handle.
func Datapath(h uint64) (*datapath.Datapath, error) {
	mu.Lock()
	defer mu.Unlock()
	dp := datapaths[h]
	if dp == nil {
		return nil, fmt.Errorf("data path %d: %w", h, ErrUnknownDatapath)
	}
	return dp, nil
}

// DestroyDatapath closes the data path and forgets its handle.
func DestroyDatapath(h uint64) error {
	mu.Lock()
	dp := datapaths[h]
	delete(datapaths, h)
	mu.Unlock()
	if dp == nil {
		return fmt.Errorf("data path %d: %w", h, ErrUnknownDatapath)
	}
	return dp.Close()
}

func closeDatapaths() {
	mu.Lock()
	ds := datapaths
	datapaths = map[uint64]*datapath.Datapath{}
	mu.Unlock()
	for _, dp := range ds {
		_ = dp.Close()
	}
}
