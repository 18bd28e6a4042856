package proxy

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mkernel/mkernel/gocore/transport"
)

// A failed transport fails every later op, whatever its destination: the FIFO's record must
// name the rank the transport lost, not the destination of the op that saw the failure.
func TestBlamedNamesTheLostRank(t *testing.T) {
	lost := fmt.Errorf("tcp: %w", &transport.RankLostError{Rank: 3, Seen: "test"})
	if got := blamed(lost, 1); got != 3 {
		t.Errorf("blamed(rank 3 lost, op to 1) = %d, want 3", got)
	}
	if got := blamed(errors.New("disk on fire"), 1); got != 1 {
		t.Errorf("blamed(other error, op to 1) = %d, want the fallback 1", got)
	}
	if got := blamed(transport.ErrClosed, -1); got != -1 {
		t.Errorf("blamed(closed, -1) = %d, want -1", got)
	}
}
