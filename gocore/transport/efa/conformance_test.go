package efa_test

import (
	"context"
	"testing"

	"github.com/mkernel/mkernel/gocore/topology"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/efa"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs/verbstest"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

// TestConformance runs the transport suite on this host's first EFA device.
// No machine available to this project has one, so here it skips, saying
// why.
func TestConformance(t *testing.T) {
	verbstest.RunOnDevice(t, topology.KindEFA, efa.Available, func(dev string, port int) transporttest.OpenFunc {
		return func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
			return efa.Open(ctx, cfg, efa.WithDevice(dev, port))
		}
	})
}

// fakeOpen opens endpoints on the fake provider's EFA device (verbstest),
// which delivers SRD work requests in random order.
func fakeOpen(t *testing.T, opts ...efa.Option) transporttest.OpenFunc {
	t.Setenv("FAKEVERBS_DEVICES", "rdmap0:efa")
	lib := verbstest.Build(t)
	opts = append([]efa.Option{efa.WithLibrary(lib), efa.WithEFALibrary(lib), efa.WithDevice("rdmap0", 1)}, opts...)
	return func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
		return efa.Open(ctx, cfg, opts...)
	}
}

// TestConformanceFake runs the suite against the fake provider's EFA
// device: SRD QPs through efadv_create_qp_ex and ibv_qp_ex, with writes,
// immediates and descriptors delivered out of order.
func TestConformanceFake(t *testing.T) {
	transporttest.Run(t, transporttest.Suite{Open: fakeOpen(t)})
}
