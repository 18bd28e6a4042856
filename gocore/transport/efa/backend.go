package efa

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
const Name = "efa"

func init() { transport.Register(Backend{}) }

// Backend registers efa with the transport registry.
type Backend struct{}

// Name implements transport.Backend.
func (Backend) Name() string { return Name }

// Priority implements transport.Backend: the first choice where the
// placement has EFA devices.
func (Backend) Priority() int { return 100 }

// Usable implements transport.Backend: the placement chose an EFA NIC and
// libibverbs and libefa load.
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

// librariesLoad reports whether the system libibverbs and libefa load (once
// per process).
func librariesLoad() error {
	sysLib.once.Do(func() {
		lib, err := verbs.Load("")
		if err == nil {
			err = lib.LoadEFA("")
		}
		sysLib.err = err
	})
	return sysLib.err
}

// Available reports whether this backend can run on this host: the build has
// the rdma-core headers, libibverbs.so.1 and
// libefa.so.1 load, and topology finds an EFA device under
// /sys/class/infiniband. Whether the device can do RDMA write is known only
// once it is opened (Open fails with ErrNotSupported if not).
func Available() (bool, string) { return available(verbs.DefaultSysfsRoot) }

func available(sysfsRoot string) (bool, string) {
	if err := librariesLoad(); err != nil {
		return false, err.Error()
	}
	found, _, err := topology.NICsOfKind(sysfsRoot, topology.KindEFA)
	if err != nil {
		return false, err.Error()
	}
	if len(found) == 0 {
		return false, "no EFA device with an ACTIVE port under " + sysfsRoot + "/class/infiniband"
	}
	return true, "EFA devices: " + strings.Join(found, ", ")
}

// AvailableFor is Available for one placement: it chose an EFA NIC and the
// libraries load. It opens no device.
func AvailableFor(p *topology.Placement) (bool, string) {
	nic, ok := p.FirstNIC(topology.KindEFA)
	if !ok {
		return false, "the placement chose no EFA NIC"
	}
	if err := librariesLoad(); err != nil {
		return false, err.Error()
	}
	return true, fmt.Sprintf("%s port %d", nic.Name, nic.Port)
}
