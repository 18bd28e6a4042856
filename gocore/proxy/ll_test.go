package proxy_test

import (
	"testing"

	"github.com/mkernel/mkernel/gocore/fifo"
)

// The proxy end to end with LL-format FIFOs (MKERNEL_FIFO_LL=1: startCluster creates them):
// the same exactness checks as the default format.

func TestAllToAllExactLL(t *testing.T) {
	t.Setenv("MKERNEL_FIFO_LL", "1")
	TestAllToAllExact(t)
}

func TestBarrierLL(t *testing.T) {
	t.Setenv("MKERNEL_FIFO_LL", "1")
	TestBarrier(t)
}

func TestClusterUsesLL(t *testing.T) {
	t.Setenv("MKERNEL_FIFO_LL", "1")
	c := startCluster(t, backends()[0].open, 2)
	for r, n := range c.nodes {
		if n.ring.Format() != fifo.FormatLL {
			t.Fatalf("rank %d: FIFO format %v", r, n.ring.Format())
		}
		if f := n.p.Stats().FIFOFormat; f != "ll" {
			t.Fatalf("rank %d: stats say fifo_format %q", r, f)
		}
	}
}
