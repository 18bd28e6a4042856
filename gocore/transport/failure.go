package transport

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Failure is a backend's first-failure latch: the first error given to Fail
// sticks and is what Err returns; Done closes on the first Fail. Embedded in
// a backend, it provides the interface's Err and Done. The zero value is ready.
type Failure struct {
	err       atomic.Pointer[error]
	initOnce  sync.Once
	closeOnce sync.Once
	done      chan struct{}
}

func (f *Failure) channel() chan struct{} {
	f.initOnce.Do(func() { f.done = make(chan struct{}) })
	return f.done
}

// Fail records err if nothing failed before, closes Done, and reports whether
// err was the first failure (the one to log).
func (f *Failure) Fail(err error) bool {
	first := f.err.CompareAndSwap(nil, &err)
	done := f.channel()
	f.closeOnce.Do(func() { close(done) })
	return first
}

// Err returns the first failure, nil while there is none.
func (f *Failure) Err() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Done is closed by the first Fail.
func (f *Failure) Done() <-chan struct{} { return f.channel() }

// Closed reports whether the backend stopped because it was closed (its
// first failure is ErrClosed) rather than because something broke.
func (f *Failure) Closed() bool {
	select {
	case <-f.channel():
		return errors.Is(f.Err(), ErrClosed)
	default:
		return false
	}
}

// RankLostError is a failure caused by a rank leaving the job. Its message leads with that
// rank ("rank 4 is gone (...)"), which need not be the peer that reported the loss: a peer
// that closed its transport because it lost rank 4 names rank 4, not itself. It matches
// ErrPeerGone (or Kind, when set: ErrTimeout for a peer that stopped answering).
type RankLostError struct {
	Rank int   // the rank that is gone
	Kind error // ErrPeerGone (nil) or ErrTimeout
	// How it was seen, e.g. "tcp, seen by rank 0: connection closed without goodbye".
	Seen string
	// Closed: the rank closed its transport cleanly without saying why, so the loss may
	// be a consequence of another rank's (the job's session may know which).
	Closed bool
	Err    error // what the backend saw, if anything
}

func (e *RankLostError) Error() string {
	msg := fmt.Sprintf("rank %d is gone (%s)", e.Rank, e.Seen)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches the error's kind (ErrPeerGone unless Kind says otherwise).
func (e *RankLostError) Is(target error) bool {
	if e.Kind != nil {
		return target == e.Kind
	}
	return target == ErrPeerGone
}

func (e *RankLostError) Unwrap() error { return e.Err }

// LostRank returns the rank whose loss caused err, if err says (a RankLostError in its chain).
func LostRank(err error) (*RankLostError, bool) {
	var rl *RankLostError
	if errors.As(err, &rl) {
		return rl, true
	}
	return nil, false
}
