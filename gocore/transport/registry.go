package transport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/mkernel/mkernel/gocore/topology"
)

// Backend opens transports of one kind. Backend packages register one in their init
// function (transport.Register(tcp.Backend{})); importing gocore/transport/backends pulls
// in every backend the build has.
type Backend interface {
	// Name is the name MKERNEL_NET selects it by.
	Name() string
	// Priority orders automatic selection: higher first. RDMA backends use 100 (efa) and
	// 90 (ibverbs), tcp 10; backends that must be asked for by name (loopback) return 0.
	Priority() int
	// Usable reports, cheaply and without opening anything, whether the backend could work
	// with this placement (ibverbs: an ibverbs NIC was chosen; tcp: always).
	Usable(p *topology.Placement) bool
	// Open creates this rank's endpoint. It returns an error matching ErrNotSupported
	// when the backend cannot run here (library missing, device absent or failing to open).
	Open(ctx context.Context, cfg Config) (Transport, error)
}

var (
	regMu        sync.Mutex
	backends     = map[string]Backend{}
	pluginLoader func(path string) Backend
)

// RegisterPluginLoader installs the function that makes a Backend for a plugin binary
// (gocore/transport/plugin does, in its init function).
func RegisterPluginLoader(f func(path string) Backend) {
	regMu.Lock()
	defer regMu.Unlock()
	pluginLoader = f
}

// Register adds a backend. Registering a name twice panics (it is a programming error in
// an init function).
func Register(b Backend) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := backends[b.Name()]; dup {
		panic("transport: backend " + b.Name() + " registered twice")
	}
	backends[b.Name()] = b
}

// Lookup returns the registered backend of that name.
func Lookup(name string) (Backend, bool) {
	regMu.Lock()
	defer regMu.Unlock()
	b, ok := backends[name]
	return b, ok
}

// Names lists the registered backends, sorted.
func Names() []string {
	regMu.Lock()
	defer regMu.Unlock()
	names := make([]string, 0, len(backends))
	for n := range backends {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Candidates lists the backends Open would try for placement p, best first: the one named
// by sel.Name (from MKERNEL_NET) or sel.Plugin (MKERNEL_NET_PLUGIN) alone when set, else
// every Usable backend with a positive priority, by priority.
func Candidates(sel Selection, p *topology.Placement) ([]Backend, error) {
	if sel.Plugin != "" {
		regMu.Lock()
		load := pluginLoader
		regMu.Unlock()
		if load == nil {
			return nil, fmt.Errorf("transport: %s=%s: %w: no plugin loader in this build (import gocore/transport/backends)",
				EnvNetPlugin, sel.Plugin, ErrNotSupported)
		}
		return []Backend{load(sel.Plugin)}, nil
	}
	if sel.Name != "" {
		b, ok := Lookup(sel.Name)
		if !ok {
			return nil, fmt.Errorf("transport: %s=%s: %w: unknown backend (have %s)",
				EnvNet, sel.Name, ErrNotSupported, strings.Join(Names(), ", "))
		}
		return []Backend{b}, nil
	}
	regMu.Lock()
	var out []Backend
	for _, b := range backends {
		if b.Priority() > 0 && b.Usable(p) {
			out = append(out, b)
		}
	}
	regMu.Unlock()
	slices.SortFunc(out, func(a, b Backend) int {
		if a.Priority() != b.Priority() {
			return b.Priority() - a.Priority()
		}
		return strings.Compare(a.Name(), b.Name())
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("transport: %w: no usable backend registered (have %s)", ErrNotSupported, strings.Join(Names(), ", "))
	}
	return out, nil
}

// Open picks a backend and opens this rank's endpoint, agreeing with every other rank
// over ex so that all ranks use the same backend: each rank opens its candidates
// (Candidates), all-gathers which ones opened, and every rank keeps the best backend that
// opened everywhere (ranks may see different NICs). A backend that fails to open with
// ErrNotSupported is logged and skipped; any other error fails Open.
//
// Open is a collective over ex (one AllGather); ex may be nil for a world of one rank.
// The selection comes from the environment (MKERNEL_NET, MKERNEL_NET_PLUGIN).
func Open(ctx context.Context, ex Exchanger, cfg Config) (Transport, error) {
	return OpenSelected(ctx, ex, cfg, SelectionFromEnv())
}

// OpenSelected is Open with an explicit selection (the zero Selection: automatic).
func OpenSelected(ctx context.Context, ex Exchanger, cfg Config, sel Selection) (Transport, error) {
	cands, err := Candidates(sel, cfg.Placement)
	if err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	opened := make([]Transport, len(cands))
	closeAll := func(keep int) {
		for i, t := range opened {
			if t != nil && i != keep {
				_ = t.Close()
			}
		}
	}
	var names []string
	for i, b := range cands {
		t, err := b.Open(ctx, cfg)
		switch {
		case err == nil:
			opened[i] = t
			names = append(names, b.Name())
		case errors.Is(err, ErrNotSupported) && len(cands) > 1:
			log.Info("transport backend not usable here", zap.String("backend", b.Name()), zap.Error(err))
		default:
			closeAll(-1)
			return nil, fmt.Errorf("transport: open %s: %w", b.Name(), err)
		}
	}
	if ex == nil || ex.World() == 1 {
		for i, t := range opened {
			if t != nil {
				closeAll(i)
				return t, nil
			}
		}
		return nil, fmt.Errorf("transport: %w: no backend opened", ErrNotSupported)
	}
	all, err := ex.AllGather(ctx, []byte(strings.Join(names, ",")))
	if err != nil {
		closeAll(-1)
		return nil, fmt.Errorf("transport: agree on a backend: %w", err)
	}
	for i, t := range opened {
		if t == nil {
			continue
		}
		everywhere := true
		for _, other := range all {
			if !slices.Contains(strings.Split(string(other), ","), cands[i].Name()) {
				everywhere = false
				break
			}
		}
		if everywhere {
			closeAll(i)
			log.Info("transport backend chosen", zap.String("backend", t.Name()))
			return t, nil
		}
	}
	closeAll(-1)
	var per []string
	for r, other := range all {
		per = append(per, fmt.Sprintf("rank %d: [%s]", r, other))
	}
	return nil, fmt.Errorf("transport: %w: no backend opened on every rank (%s)", ErrNotSupported, strings.Join(per, "; "))
}

func errorf(format string, args ...any) error { return fmt.Errorf("transport: "+format, args...) }
