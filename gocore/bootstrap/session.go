package bootstrap

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Session is one rank's membership in a bootstrap job of World ranks. It is returned by
// Root.Accept (rank 0), Join (ranks 1..World-1) or New, once every rank has joined.
//
// A session is all-or-nothing: when any rank closes, dies, times out or misuses a
// collective, the session ends on every rank with an error naming that rank — Done is
// closed, Err says why, and every pending or later collective returns that error. Close
// always has to be called to release the connections.
type Session struct {
	rank, world int
	secret      []byte // the job secret, for DeriveKey
	rootAddr    string // the root's address as ranks dial it
	o           options
	log         *zap.Logger
	eng         engine

	sem chan struct{} // serializes collectives; seq is guarded by it
	seq uint64        // number of the last collective started

	done      chan struct{}
	mu        sync.Mutex
	err       error
	closeOnce sync.Once
}

// engine is the root's or a rank's side of the protocol.
type engine interface {
	// collective contributes blob to collective number seq and waits for the result.
	collective(ctx context.Context, seq uint64, op opCode, blob []byte) ([][]byte, error)
	// abort ends the session on every rank because of a local error: err is returned
	// here, msg is what the other ranks learn.
	abort(err *sessionError, k kind, msg string)
	// shutdown ends the session because its owner closes it.
	shutdown()
	// allLinks lists every link the engine ever started, for Close to wait on.
	allLinks() []*link
}

func newSession(rank, world int, o options, log *zap.Logger) *Session {
	return &Session{
		rank:  rank,
		world: world,
		o:     o,
		log:   log,
		sem:   make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
}

// Rank returns this rank, 0..World-1.
func (s *Session) Rank() int { return s.rank }

// World returns the number of ranks.
func (s *Session) World() int { return s.world }

// RootAddr returns rank 0's "host:port", the address every rank reached the job through;
// a good RouteTo for picking the interface data connections use.
func (s *Session) RootAddr() string { return s.rootAddr }

// DeriveKey returns a 32-byte key for label derived from the job secret (HMAC-SHA256),
// the same on every rank of the job and useless for recovering the secret: what other
// layers (transports) authenticate their own connections with, so the secret itself
// never leaves the bootstrap.
func (s *Session) DeriveKey(label string) []byte {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte("mkernel derived key v1\x00"))
	m.Write([]byte(label))
	return m.Sum(nil)
}

// Done is closed when the session ends, for whatever reason: Close, or a failure here or
// on any other rank.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns nil while the session is alive, then why it ended (ErrClosed after Close).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// setErr ends the session with err; the first call wins.
func (s *Session) setErr(err *sessionError) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	s.err = err
	close(s.done)
	switch err.kind {
	case kindClosed:
		s.log.Debug("session closed")
	case kindLeft:
		s.log.Info("session ended: another rank closed it", zap.Error(err))
	default:
		s.log.Error("session failed", zap.Error(err))
	}
	return true
}

// AllGather contributes blob (0..MaxBlobSize bytes; sizes may differ between ranks) and
// returns every rank's blob, indexed by rank. It is a collective: every rank calls it, in
// the same order relative to the other collectives. It waits at most the session's timeout
// and respects ctx; if it gives up, the session ends on every rank, and the error names the
// ranks that had not contributed. The returned slices belong to the caller (they may share
// one backing array; each is capped to its length).
func (s *Session) AllGather(ctx context.Context, blob []byte) ([][]byte, error) {
	return s.collective(ctx, opAllGather, blob)
}

// Barrier returns once every rank has called Barrier. It is a collective like AllGather.
func (s *Session) Barrier(ctx context.Context) error {
	_, err := s.collective(ctx, opBarrier, nil)
	return err
}

func (s *Session) collective(ctx context.Context, op opCode, blob []byte) ([][]byte, error) {
	// A call that ends before it contributes leaves the session intact.
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, newError(ctxKind(ctx), ctx.Err(), "bootstrap: rank %d: %v not started: %v", s.rank, op, ctx.Err())
	case <-s.done:
		return nil, s.Err()
	}
	defer func() { <-s.sem }()
	if err := s.Err(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, newError(ctxKind(ctx), err, "bootstrap: rank %d: %v not started: %v", s.rank, op, err)
	}
	s.seq++
	if len(blob) > MaxBlobSize {
		msg := fmt.Sprintf("rank %d passed a %d-byte blob to %v #%d; the limit is %d bytes (MaxBlobSize)",
			s.rank, len(blob), op, s.seq, MaxBlobSize)
		err := newError(kindTooLarge, nil, "bootstrap: %s", msg)
		s.eng.abort(err, kindTooLarge, msg)
		return nil, err
	}
	return s.eng.collective(ctx, s.seq, op, blob)
}

// Close ends the session (on every rank: the others see ErrPeerGone naming this one) and
// releases its connections and goroutines. It waits at most a few seconds for farewells to
// flush, then cuts the connections. It is idempotent and returns nil; the error is there
// for io.Closer.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		s.eng.shutdown()
		if n := waitLinks(s.eng.allLinks(), closeTimeout); n > 0 {
			s.log.Warn("close: cut connections that did not shut down in time", zap.Int("connections", n), zap.Duration("after", closeTimeout))
		}
	})
	return nil
}

// await waits for a collective's result on ch, preferring a result that raced with the end
// of the session. onTimeout and onCtx run when the timer or ctx fires first and must end
// the session (or find the result already there).
func (s *Session) await(ctx context.Context, ch <-chan [][]byte, onTimeout, onCtx func()) ([][]byte, error) {
	t := time.NewTimer(s.o.timeout)
	defer t.Stop()
	select {
	case res := <-ch:
		return res, nil
	case <-s.done:
	case <-t.C:
		onTimeout()
	case <-ctx.Done():
		onCtx()
	}
	select {
	case res := <-ch:
		return res, nil
	default:
		return nil, s.Err()
	}
}
