package bootstrap

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Join connects rank (1..world-1) to the root named by id and returns its session once
// every rank has joined. It retries connecting until the root listens, waits at most the
// timeout (WithTimeout) and respects ctx. Errors say which address was tried; if the root
// gives up first, the error is the root's, naming the missing ranks.
func Join(ctx context.Context, id ID, rank, world int, opts ...Option) (*Session, error) {
	if world < 1 || world > MaxWorld {
		return nil, fmt.Errorf("bootstrap: join: world size %d outside 1..%d", world, MaxWorld)
	}
	if rank < 1 || rank >= world {
		return nil, fmt.Errorf("bootstrap: join: rank %d outside 1..%d (rank 0 is the root: use Listen)", rank, world-1)
	}
	if err := id.validate(); err != nil {
		return nil, fmt.Errorf("bootstrap: join: invalid ID: %w", err)
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	log := o.log.Named("bootstrap").With(zap.Int("rank", rank), zap.Int("world", world))
	p := &peer{
		rank:    rank,
		world:   world,
		id:      id,
		o:       o,
		log:     log,
		ready:   make(chan struct{}),
		results: make(chan [][]byte, 1),
	}
	start := time.Now()
	deadline := start.Add(o.timeout)
	conn, err := p.dial(ctx, deadline)
	if err != nil {
		return nil, err
	}
	if err := p.handshake(ctx, conn, deadline); err != nil {
		conn.Close()
		return nil, err
	}
	s := newSession(rank, world, o, log)
	s.secret, s.rootAddr = []byte(id.secret), id.addr
	s.eng = p
	p.s = s
	p.l = newLink(conn, o.hbInterval, o.hbTimeout, p.limit, p.onFrame, p.onDown)
	p.l.start()
	log.Debug("authenticated; waiting for the other ranks", zap.String("root", id.Addr()))

	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-p.ready:
	case <-s.done:
	case <-t.C:
		p.giveUp(ctx, fmt.Sprintf("rank %d timed out after %v", rank, o.timeout))
	case <-ctx.Done():
		p.quit(ctx, "the rendezvous")
	}
	select {
	case <-p.ready:
		log.Info("joined", zap.String("root", id.Addr()), zap.Duration("elapsed", time.Since(start)))
		return s, nil
	default:
	}
	err = s.Err()
	s.Close()
	return nil, err
}

// peer is the engine of ranks 1..World-1: one link to the root.
type peer struct {
	rank, world int
	id          ID
	o           options
	log         *zap.Logger
	s           *Session
	l           *link

	ready    chan struct{} // closed on the root's ready
	gotReady bool          // reader only
	results  chan [][]byte

	mu     sync.Mutex
	want   uint64 // collective whose result is expected, 0: none
	wantOp opCode
}

// dial connects to the root, retrying (with jittered backoff) until deadline: ranks
// usually start before the root listens.
func (p *peer) dial(ctx context.Context, deadline time.Time) (net.Conn, error) {
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var d net.Dialer
	backoff := 20 * time.Millisecond
	attempts := 0
	var last error
	for {
		attempts++
		c, err := d.DialContext(dctx, "tcp", p.id.addr)
		if err == nil {
			return c, nil
		}
		// An attempt the deadline cut short says less than the one before it (e.g. "connection
		// refused"): keep that. The dialer's socket deadline can fire just before dctx reports
		// done, so a deadline error counts as cut short whatever dctx.Err() says yet.
		var ne net.Error
		cut := dctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) ||
			(errors.As(err, &ne) && ne.Timeout())
		if last == nil || !cut {
			last = err
		}
		if dctx.Err() == nil {
			p.log.Debug("root not reachable yet", zap.String("root", p.id.addr), zap.Error(err))
			t := time.NewTimer(backoff/2 + mrand.N(backoff))
			select {
			case <-t.C:
				backoff = min(2*backoff, time.Second)
				continue
			case <-dctx.Done():
				t.Stop()
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, newError(ctxKind(ctx), err, "bootstrap: rank %d: connect to root at %s: %v (last attempt: %v)", p.rank, p.id.addr, err, last)
		}
		return nil, newError(kindTimeout, last, "bootstrap: rank %d: timed out after %v connecting to root at %s (%d attempts): %v",
			p.rank, p.o.timeout, p.id.addr, attempts, last)
	}
}

// handshake authenticates both ends; the connection's deadline is the earlier of
// handshakeTimeout and the rendezvous deadline, and ctx cuts it short.
func (p *peer) handshake(ctx context.Context, c net.Conn, deadline time.Time) error {
	if hs := time.Now().Add(handshakeTimeout); hs.Before(deadline) {
		deadline = hs
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	err := p.authenticate(c)
	if !stop() {
		// ctx ended and has already (or is about to) set the deadline in the past.
		return newError(ctxKind(ctx), ctx.Err(), "bootstrap: rank %d: handshake with root at %s: %v", p.rank, p.id.addr, ctx.Err())
	}
	if err != nil {
		return err
	}
	c.SetDeadline(time.Time{})
	return nil
}

func (p *peer) authenticate(c net.Conn) error {
	limit := func(t msgType) (uint64, bool) {
		switch t {
		case msgChallenge, msgWelcome:
			return nonceLen, true
		case msgError:
			return 1 + maxMsgLen, true
		}
		return 0, false
	}
	t, b, err := readFrame(c, nil, limit)
	if err != nil {
		return p.handshakeError("waiting for the challenge", err)
	}
	if t != msgChallenge {
		return p.unexpected(t, b, "challenge")
	}
	rootNonce := b
	nonce := make([]byte, nonceLen)
	rand.Read(nonce)
	secret := []byte(p.id.secret)
	rank, world := uint32(p.rank), uint32(p.world)
	h := hello{rank: rank, world: world, nonce: nonce, mac: authMAC(secret, rolePeer, rootNonce, rank, world, nonce)}
	if err := writeFrame(c, &frame{typ: msgHello, head: encodeHello(h)}, nil); err != nil {
		return p.handshakeError("sending the hello", err)
	}
	if t, b, err = readFrame(c, nil, limit); err != nil {
		return p.handshakeError("waiting for the welcome", err)
	}
	if t != msgWelcome {
		return p.unexpected(t, b, "welcome")
	}
	if !hmac.Equal(b, authMAC(secret, roleRoot, rootNonce, rank, world, nonce)) {
		return newError(kindAuth, nil, "bootstrap: rank %d: root at %s could not prove it knows the job secret", p.rank, p.id.addr)
	}
	return nil
}

func (p *peer) handshakeError(stage string, err error) error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return newError(kindTimeout, err, "bootstrap: rank %d: handshake with root at %s: timed out %s", p.rank, p.id.addr, stage)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return newError(kindPeerGone, err, "bootstrap: rank %d: handshake with root at %s: connection closed %s", p.rank, p.id.addr, stage)
	}
	return newError(kindOf(err), err, "bootstrap: rank %d: handshake with root at %s: %s: %v", p.rank, p.id.addr, stage, err)
}

// unexpected reports a rejection (an error frame) or a frame of the wrong kind.
func (p *peer) unexpected(t msgType, b []byte, want string) error {
	if t == msgError {
		k, msg := decodeError(b)
		return newError(k, nil, "bootstrap: rank %d: root at %s rejected this rank: %s", p.rank, p.id.addr, msg)
	}
	return newError(kindProtocol, nil, "bootstrap: rank %d: root at %s sent a %v instead of a %s", p.rank, p.id.addr, t, want)
}

func (p *peer) limit(t msgType) (uint64, bool) {
	switch t {
	case msgReady, msgPing:
		return 0, true
	case msgResult:
		return resultLimit(p.world), true
	case msgError:
		return 1 + maxMsgLen, true
	}
	return 0, false
}

func (p *peer) onFrame(t msgType, b []byte) error {
	switch t {
	case msgReady:
		if p.gotReady {
			return fmt.Errorf("%w: second ready", ErrProtocol)
		}
		p.gotReady = true
		close(p.ready)
	case msgResult:
		seq, op, blobs, err := decodeResult(b, p.world)
		if err != nil {
			return err
		}
		p.mu.Lock()
		ok := p.gotReady && seq == p.want && op == p.wantOp
		p.want = 0
		p.mu.Unlock()
		if !ok {
			return fmt.Errorf("%w: unexpected result of %v #%d", ErrProtocol, op, seq)
		}
		p.results <- blobs // cannot block: one result per contribution, and it was expected
	case msgError:
		k, msg := decodeError(b)
		p.fail(newError(k, nil, "bootstrap: rank %d: %s", p.rank, msg), nil)
	default:
		return fmt.Errorf("%w: unexpected %v frame", ErrProtocol, t)
	}
	return nil
}

func (p *peer) onDown(err error) {
	k := kindPeerGone
	if errors.Is(err, ErrProtocol) {
		k = kindProtocol
	}
	p.fail(newError(k, err, "bootstrap: rank %d: lost the connection to root at %s: %s", p.rank, p.id.addr, describeLoss(err, p.o.hbTimeout)), nil)
}

// fail ends the session with err and closes the link after farewell (nil: none).
func (p *peer) fail(err *sessionError, farewell *frame) {
	if p.s.setErr(err) {
		p.l.finish(farewell)
	}
}

// giveUp handles this rank's own timeout: it tells the root, which ends the session for
// everyone with a message naming who was missing, and waits briefly for that verdict so
// that this rank reports the same; without one it fails on its own.
func (p *peer) giveUp(ctx context.Context, msg string) {
	p.l.send(errorFrame(kindTimeout, msg))
	t := time.NewTimer(abortGrace)
	defer t.Stop()
	select {
	case <-p.s.done:
		return
	case <-t.C:
	case <-ctx.Done():
	}
	p.fail(newError(kindTimeout, nil, "bootstrap: %s (no answer from root at %s)", msg, p.id.addr), nil)
}

// quit handles ctx ending: this rank leaves, and tells the root why.
func (p *peer) quit(ctx context.Context, what string) {
	k, wk := ctxKind(ctx), kindPeerGone
	if k == kindTimeout {
		wk = kindTimeout
	}
	msg := fmt.Sprintf("rank %d abandoned %s: %v", p.rank, what, ctx.Err())
	p.fail(newError(k, ctx.Err(), "bootstrap: %s", msg), errorFrame(wk, msg))
}

func (p *peer) collective(ctx context.Context, seq uint64, op opCode, blob []byte) ([][]byte, error) {
	p.mu.Lock()
	p.want, p.wantOp = seq, op
	p.mu.Unlock()
	f := &frame{typ: msgContrib, head: collHead(seq, op, 0)}
	if op == opAllGather {
		f.parts = [][]byte{bytes.Clone(blob)} // the writer may still hold it if we return early
	}
	p.l.send(f) // if the link is broken, the session is ending and await returns its error
	return p.s.await(ctx, p.results,
		func() {
			p.giveUp(ctx, fmt.Sprintf("rank %d timed out after %v in %v #%d", p.rank, p.o.timeout, op, seq))
		},
		func() { p.quit(ctx, fmt.Sprintf("%v #%d", op, seq)) })
}

func (p *peer) abort(err *sessionError, k kind, msg string) { p.fail(err, errorFrame(k, msg)) }

func (p *peer) shutdown() {
	p.fail(newError(kindClosed, nil, "bootstrap: rank %d: session closed", p.rank),
		errorFrame(kindLeft, fmt.Sprintf("rank %d closed its session", p.rank)))
}

func (p *peer) allLinks() []*link { return []*link{p.l} }
