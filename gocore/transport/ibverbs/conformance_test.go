package ibverbs_test

import (
	"context"
	"testing"

	"github.com/mkernel/mkernel/gocore/topology"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs/verbstest"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

// TestConformance runs the transport suite on this host's first ibverbs NIC
// with an ACTIVE port. No machine available to this project has one (and
// none has soft-RoCE), so here it skips, saying why.
func TestConformance(t *testing.T) {
	verbstest.RunOnDevice(t, topology.KindIBVerbs, ibverbs.Available, func(dev string, port int) transporttest.OpenFunc {
		return func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
			return ibverbs.Open(ctx, cfg, ibverbs.WithDevice(dev, port))
		}
	})
}

// fakeOpen opens endpoints on the fake provider's device (verbstest), every
// rank of a job on the same emulated fabric.
func fakeOpen(t *testing.T, devices, dev string, opts ...ibverbs.Option) transporttest.OpenFunc {
	t.Setenv("FAKEVERBS_DEVICES", devices)
	lib := verbstest.Build(t)
	opts = append([]ibverbs.Option{ibverbs.WithLibrary(lib), ibverbs.WithDevice(dev, 1)}, opts...)
	return func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
		return ibverbs.Open(ctx, cfg, opts...)
	}
}

// TestConformanceFakeRoCE runs the suite against the fake provider: the Go
// code, the C shim and the provider ops it calls run for real, on an
// emulated RoCE device.
func TestConformanceFakeRoCE(t *testing.T) {
	transporttest.Run(t, transporttest.Suite{Open: fakeOpen(t, "mlx5_0:roce", "mlx5_0")})
}

// TestConformanceFakeIB: an InfiniBand port (LID routing, no GRH).
func TestConformanceFakeIB(t *testing.T) {
	transporttest.Run(t, transporttest.Suite{Open: fakeOpen(t, "mlx5_1:ib", "mlx5_1")})
}

// TestConformanceFakeNoInline: a provider that refuses inline data, so flag
// values are sent from registered memory.
func TestConformanceFakeNoInline(t *testing.T) {
	t.Setenv("FAKEVERBS_NO_INLINE", "1")
	transporttest.Run(t, transporttest.Suite{Open: fakeOpen(t, "mlx5_0:roce", "mlx5_0")})
}

// TestConformanceFakeRelaxedOrdering: data MRs with relaxed ordering, flag
// writes through the second, strict MR of each region.
func TestConformanceFakeRelaxedOrdering(t *testing.T) {
	transporttest.Run(t, transporttest.Suite{Open: fakeOpen(t, "mlx5_0:roce", "mlx5_0", ibverbs.WithRelaxedOrdering(true))})
}
