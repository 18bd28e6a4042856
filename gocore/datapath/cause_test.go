package datapath

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mkernel/mkernel/gocore/transport"
)

func TestCauseFirstLeadsWithTheLostRank(t *testing.T) {
	session := errors.New("bootstrap: rank 1: rank 4 disconnected: connection closed")
	cascade := &transport.RankLostError{Rank: 4, Seen: "tcp, seen by rank 1: rank 3 closed its transport after losing it"}
	direct := &transport.RankLostError{Rank: 4, Seen: "tcp, seen by rank 1: connection closed without goodbye", Err: errors.New("EOF")}
	closed := &transport.RankLostError{Rank: 3, Closed: true, Seen: "loopback, seen by rank 1: it closed its transport"}
	for _, c := range []struct {
		name    string
		err     error
		session error
		lead    string
		has     []string
	}{
		{"cascade named by tcp", fmt.Errorf("proxy: rank 1: write to rank 3 (ticket 7, FIFO slot 2) failed: %w", cascade), session,
			"rank 4 is gone (tcp, seen by rank 1: rank 3 closed its transport after losing it); proxy: rank 1: write to rank 3",
			[]string{"(the job's session reports: bootstrap: rank 1: rank 4 disconnected"}},
		{"direct loss", fmt.Errorf("proxy: rank 1: %w", direct), nil,
			"rank 4 is gone (tcp, seen by rank 1: connection closed without goodbye): EOF", nil},
		{"a neighbour closed: the session knows why", fmt.Errorf("proxy: rank 1: %w", closed), session,
			"the job's session reports: bootstrap: rank 1: rank 4 disconnected: connection closed; proxy: rank 1: rank 3 is gone",
			nil},
	} {
		got := causeFirst(c.err, c.session)
		if !strings.HasPrefix(got.Error(), c.lead) {
			t.Errorf("%s:\n got %q\nwant prefix %q", c.name, got, c.lead)
		}
		for _, h := range c.has {
			if !strings.Contains(got.Error(), h) {
				t.Errorf("%s: %q lacks %q", c.name, got, h)
			}
		}
		if c.name == "direct loss" && got.Error() != c.lead {
			t.Errorf("%s: the bare proxy prefix should go: %q", c.name, got)
		}
		if !errors.Is(got, transport.ErrPeerGone) {
			t.Errorf("%s: %v does not match ErrPeerGone", c.name, got)
		}
		if rl, ok := transport.LostRank(got); !ok || rl.Rank != func() int { r, _ := transport.LostRank(c.err); return r.Rank }() {
			t.Errorf("%s: LostRank lost through the rewrite", c.name)
		}
	}
	plain := fmt.Errorf("proxy: rank 1: %w", closed)
	if got := causeFirst(plain, nil); got != plain {
		t.Errorf("no better cause known: the error must stay as it is, got %q", got)
	}
}
