// Package session is the life of a verbs endpoint that the RC (ibverbs) and
// SRD (efa) backends share, from Connect to Close: the locks that order the
// control calls and the data path, the checks before Connect, the wait for
// every peer's handshake, Close's run-once teardown and the release of the
// device objects every endpoint holds.
package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
)

// Gate holds an endpoint's two locks and closes it once. The zero value is
// ready.
type Gate struct {
	Ctl sync.Mutex // control calls: Register, Address, Connect, Close
	DP  sync.Mutex // the data path: Post, Poll, Connect's handshake, Close
	// Closing is set, under DP, once Close has begun: Poll returns at once.
	Closing bool

	closeOnce sync.Once
	closeErr  error
}

// Close runs the endpoint's Close the first time: stop (which fails the
// transport, so a running Post or Poll returns soon), then, once the data
// path and the control calls are idle, release. It returns release's error;
// later calls return nil.
func (g *Gate) Close(stop func(), release func() error) error {
	first := false
	g.closeOnce.Do(func() {
		first = true
		stop()
		g.DP.Lock()
		g.Closing = true
		g.DP.Unlock()
		g.Ctl.Lock()
		defer g.Ctl.Unlock()
		g.closeErr = release()
	})
	if !first {
		return nil
	}
	return g.closeErr
}

// CheckConnect says why Connect may not run: the endpoint was closed
// (f's error), it is connected already, Address was not called
// (addressed), or blobs is not one blob per rank of world. The errors
// match ErrInvalid, or are f's.
func CheckConnect(f *transport.Failure, connected, addressed bool, blobs, world int) error {
	switch {
	case f.Closed():
		return f.Err()
	case connected:
		return fmt.Errorf("%w: called twice", transport.ErrInvalid)
	case !addressed:
		return fmt.Errorf("%w: Address was not called", transport.ErrInvalid)
	case blobs != world:
		return fmt.Errorf("%w: %d blobs for %d ranks", transport.ErrInvalid, blobs, world)
	}
	return nil
}

// WaitHandshake runs Connect's handshake to its end: it calls poll (which
// reads completions and returns how many it read) until pending reports no
// rank whose handshake is unfinished. It fails with poll's or pending's
// error, the context's, or ErrTimeout after timeout, naming the ranks still
// pending.
func WaitHandshake(ctx context.Context, timeout time.Duration, poll func() (int, error), pending func() ([]int, error)) error {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for {
		n, err := poll()
		if err != nil {
			return err
		}
		missing, err := pending()
		if len(missing) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("handshake with rank %s: %w", ranks(missing), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: no handshake from rank %s within %v", transport.ErrTimeout, ranks(missing), timeout)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// Handshaker is a peer as WaitHandshake's callers see it: its rank, and
// whether its handshake went both ways.
type Handshaker interface {
	comparable
	Handshake() (rank int, done bool)
}

// Unheard lists the ranks of the peers whose handshake is unfinished, in
// order; zero (nil) entries are not peers.
func Unheard[P Handshaker](peers []P) []int {
	var none P
	var missing []int
	for _, p := range peers {
		if p == none {
			continue
		}
		if r, done := p.Handshake(); !done {
			missing = append(missing, r)
		}
	}
	return missing
}

func ranks(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprint(r)
	}
	return strings.Join(s, ", ")
}

// Teardown collects the failures of an endpoint's release, each named by
// what was being destroyed.
type Teardown struct{ errs []error }

// Note records err, if any, as the failure to do what.
func (d *Teardown) Note(what string, err error) {
	if err != nil {
		d.errs = append(d.errs, fmt.Errorf("%s: %w", what, err))
	}
}

// Add records err, if any, as it is (it names what failed already).
func (d *Teardown) Add(err error) {
	if err != nil {
		d.errs = append(d.errs, err)
	}
}

// Device destroys what every endpoint opens first, last: the CQ, the PD and
// the device context (those that exist), in that order.
func (d *Teardown) Device(cq *verbs.CQ, pd *verbs.PD, ctx *verbs.Context) {
	if cq != nil {
		d.Note("destroy CQ", cq.Close())
	}
	if pd != nil {
		d.Note("deallocate PD", pd.Close())
	}
	if ctx != nil {
		d.Note("close device", ctx.Close())
	}
}

// Err joins the failures, nil where there were none.
func (d *Teardown) Err() error { return errors.Join(d.errs...) }
