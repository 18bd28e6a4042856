package transport

import (
	"errors"
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
