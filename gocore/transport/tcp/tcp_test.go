package tcp_test

import (
	"context"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/tcp"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Suite{Open: func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
		return tcp.Open(ctx, cfg)
	}})
}

func TestConformanceFaults(t *testing.T) {
	transporttest.Run(t, transporttest.Suite{Light: true, Allocates: true, Open: func(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
		return tcp.Open(ctx, cfg, tcp.WithFaults(uint64(cfg.Rank)+3, 300*time.Microsecond))
	}})
}
