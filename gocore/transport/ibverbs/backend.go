package ibverbs

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/mkernel/mkernel/gocore/topology"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
)

// Name is the backend's registry name.
const Name = "ibverbs"

func init() { transport.Register(Backend{}) }

// Backend registers ibverbs with the transport registry.
type Backend struct{}

// Name implements transport.Backend.
func (Backend) Name() string { return Name }

// Priority implements transport.Backend: above tcp, below efa.
func (Backend) Priority() int { return 90 }

// Usable implements transport.Backend: the placement chose an ibverbs NIC
// and libibverbs loads.
func (Backend) Usable(p *topology.Placement) bool {
	ok, _ := AvailableFor(p)
	return ok
}

// Open implements transport.Backend.
func (Backend) Open(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
	return Open(ctx, cfg)
}

var sysLib struct {
	once sync.Once
	err  error
}

// libraryLoads reports whether the system libibverbs loads (once per process).
func libraryLoads() error {
	sysLib.once.Do(func() { _, sysLib.err = verbs.Load("") })
	return sysLib.err
}

// Available reports whether this backend can run on this host: the build has
// the rdma-core headers, libibverbs.so.1 loads, and topology finds a verbs
// NIC (not EFA) with an ACTIVE port under /sys/class/infiniband. reason says
// what is missing (or what was found).
func Available() (bool, string) { return available(verbs.DefaultSysfsRoot) }

func available(sysfsRoot string) (bool, string) {
	if err := libraryLoads(); err != nil {
		return false, err.Error()
	}
	found, down, err := topology.NICsOfKind(sysfsRoot, topology.KindIBVerbs)
	if err != nil {
		return false, err.Error()
	}
	switch {
	case len(found) > 0:
		return true, "ibverbs NICs with an ACTIVE port: " + strings.Join(found, ", ")
	case len(down) > 0:
		return false, "no ibverbs NIC port is ACTIVE (" + strings.Join(down, ", ") + ")"
	}
	return false, "no ibverbs NIC under " + sysfsRoot + "/class/infiniband"
}

// AvailableFor is Available for one placement: the placement chose an
// ibverbs NIC and libibverbs loads. It opens no device.
func AvailableFor(p *topology.Placement) (bool, string) {
	nic, ok := p.FirstNIC(topology.KindIBVerbs)
	if !ok {
		return false, "the placement chose no ibverbs NIC"
	}
	if err := libraryLoads(); err != nil {
		return false, err.Error()
	}
	return true, fmt.Sprintf("%s port %d", nic.Name, nic.Port)
}
