// Package sessions is the process-wide table of bootstrap sessions and
// pending rendezvous roots, shared by the two front doors of the Go core —
// the C ABI (gocore/capi) and the Python bindings (gocore/pyapi) — so a
// session opened from Python is the same object C++ reaches by its handle.
package sessions

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/mkernel/mkernel/gocore/bootstrap"
	"github.com/mkernel/mkernel/gocore/logging"
)

// verdictGrace is how long past its own timeout a joining rank waits for
// rank 0's explanation of a failed rendezvous.
const verdictGrace = 5 * time.Second

// ErrUnknownHandle is returned for a handle that is closed or never existed.
var ErrUnknownHandle = errors.New("unknown or closed session handle")

type entry struct {
	s        *bootstrap.Session
	mu       sync.Mutex // serialises collectives on one session
	gathered [][]byte   // result of the last AllGather
}

var (
	mu      sync.Mutex
	next    uint64 = 1
	entries        = map[uint64]*entry{}
	roots          = map[string]*bootstrap.Root{} // by ID text, until rank 0 creates its session
)

// Timeout converts a millisecond count from the ABI (<= 0: default).
func Timeout(ms int64) time.Duration {
	if ms <= 0 {
		return bootstrap.DefaultTimeout
	}
	return time.Duration(ms) * time.Millisecond
}

// Listen starts the rendezvous root of a job of world ranks on host
// ("" = loopback, port chosen by the OS) and returns the job's ID text.
func Listen(host string, world int) (string, error) {
	if host == "" {
		host = "127.0.0.1"
	}
	opts := []bootstrap.Option{
		bootstrap.WithListenAddr(net.JoinHostPort(host, "0")),
		bootstrap.WithLogger(logging.Named("bootstrap")),
	}
	r, err := bootstrap.Listen(context.Background(), world, opts...)
	if err != nil {
		return "", err
	}
	id := r.ID().String()
	mu.Lock()
	roots[id] = r
	mu.Unlock()
	return id, nil
}

// Create joins the job named by id as rank of world and returns a handle.
// Rank 0 must run in the process that called Listen for that id.
func Create(id string, rank, world int, timeout time.Duration) (uint64, error) {
	// The joiners' own timer (WithTimeout) must fire before their context
	// does: on it they ask rank 0 for the verdict naming the missing ranks,
	// while a cancelled context just abandons. Rank 0's deadline is the context.
	ctx, cancel := context.WithTimeout(context.Background(), timeout+verdictGrace)
	if rank == 0 {
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), timeout)
	}
	defer cancel()
	var (
		s   *bootstrap.Session
		err error
	)
	if rank == 0 {
		mu.Lock()
		r := roots[id]
		delete(roots, id)
		mu.Unlock()
		if r == nil {
			return 0, fmt.Errorf("rank 0 must create its session in the process that called Listen for this id")
		}
		s, err = r.Accept(ctx)
		if err != nil {
			_ = r.Close()
		}
	} else {
		var parsed bootstrap.ID
		if parsed, err = bootstrap.ParseID(id); err != nil {
			return 0, err
		}
		s, err = bootstrap.Join(ctx, parsed, rank, world, bootstrap.WithTimeout(timeout),
			bootstrap.WithLogger(logging.Named("bootstrap")))
	}
	if err != nil {
		return 0, err
	}
	return add(s), nil
}

// CreateFromEnv runs the standalone rendezvous configured by the
// environment (bootstrap.ConfigFromEnv).
func CreateFromEnv(timeout time.Duration) (uint64, error) {
	cfg, err := bootstrap.ConfigFromEnv()
	if err != nil {
		return 0, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	s, err := bootstrap.New(ctx, cfg, bootstrap.WithLogger(logging.Named("bootstrap")))
	if err != nil {
		return 0, err
	}
	return add(s), nil
}

func add(s *bootstrap.Session) uint64 {
	mu.Lock()
	defer mu.Unlock()
	h := next
	next++
	entries[h] = &entry{s: s}
	return h
}

func get(h uint64) (*entry, error) {
	mu.Lock()
	defer mu.Unlock()
	e := entries[h]
	if e == nil {
		return nil, fmt.Errorf("session %d: %w", h, ErrUnknownHandle)
	}
	return e, nil
}

// Session returns the session behind a handle.
func Session(h uint64) (*bootstrap.Session, error) {
	e, err := get(h)
	if err != nil {
		return nil, err
	}
	return e.s, nil
}

// AllGather runs one all-gather on the session and keeps its result for Gathered.
func AllGather(h uint64, blob []byte, timeout time.Duration) ([][]byte, error) {
	e, err := get(h)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := e.s.AllGather(ctx, blob)
	if err != nil {
		return nil, err
	}
	e.gathered = out
	return out, nil
}

// Gathered returns the result of the session's last AllGather.
func Gathered(h uint64) ([][]byte, error) {
	e, err := get(h)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gathered == nil {
		return nil, fmt.Errorf("session %d has run no all-gather yet", h)
	}
	return e.gathered, nil
}

// Barrier waits for every rank of the session.
func Barrier(h uint64, timeout time.Duration) error {
	e, err := get(h)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return e.s.Barrier(ctx)
}

// Destroy closes the session and forgets its handle.
func Destroy(h uint64) error {
	mu.Lock()
	e := entries[h]
	delete(entries, h)
	mu.Unlock()
	if e == nil {
		return fmt.Errorf("session %d: %w", h, ErrUnknownHandle)
	}
	return e.s.Close()
}

// CloseAll closes every session and pending root (process exit).
func CloseAll() {
	mu.Lock()
	es, rs := entries, roots
	entries, roots = map[uint64]*entry{}, map[string]*bootstrap.Root{}
	mu.Unlock()
	closeDatapaths() // before their sessions
	for _, e := range es {
		_ = e.s.Close()
	}
	for _, r := range rs {
		_ = r.Close()
	}
}
