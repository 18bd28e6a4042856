package bootstrap

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Root is rank 0 before the rendezvous completes: it listens, authenticates the ranks that
// connect, and once all World-1 of them have joined, Accept returns rank 0's Session.
// After that the session relays every collective: each rank sends its contribution to
// rank 0, which sends the gathered result back to every rank.
type Root struct {
	o      options
	log    *zap.Logger
	world  int
	secret []byte
	id     ID
	ln     net.Listener
	sess   *Session

	mu      sync.Mutex
	phase   phase
	links   []*link // by rank while joined; [0] unused
	all     []*link // every link ever started, for Close
	joined  int     // including rank 0
	pending map[net.Conn]struct{}
	coll    gather
	stopped bool
	ready   chan struct{} // closed when every rank has joined
	stop    chan struct{} // closed when the root stops accepting

	hsWG      sync.WaitGroup // accept loop and handshakes
	accepting atomic.Bool
	closeOnce sync.Once
}

type phase uint8

const (
	phaseRendezvous phase = iota
	phaseRunning
	phaseDead
)

// gather is the collective in progress on the root.
type gather struct {
	seq   uint64 // 1-based
	op    opCode
	first int // first rank that contributed, for mismatch reports
	n     int
	have  []bool
	blobs [][]byte
	local chan [][]byte // rank 0's result
}

func newGather(world int, seq uint64) gather {
	return gather{seq: seq, have: make([]bool, world), blobs: make([][]byte, world), local: make(chan [][]byte, 1)}
}

var readyFrame = &frame{typ: msgReady}

// Listen starts the root of a job of world ranks (1..MaxWorld). It binds the listen address
// (WithListenAddr; by default from the environment, else loopback) and starts accepting at
// once; the rendezvous timeout starts with Accept. Publish ID() to the other ranks, then
// call Accept. ctx bounds only the bind.
func Listen(ctx context.Context, world int, opts ...Option) (*Root, error) {
	if world < 1 || world > MaxWorld {
		return nil, fmt.Errorf("bootstrap: listen: world size %d outside 1..%d", world, MaxWorld)
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	secret := o.secret
	if secret == nil {
		secret = make([]byte, SecretLen)
		if _, err := rand.Read(secret); err != nil {
			return nil, fmt.Errorf("bootstrap: listen: generate job secret: %w", err)
		}
	}
	addr := o.listenAddr
	if addr == "" {
		addr = defaultListenAddr()
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); (host == "" || ip != nil && ip.IsUnspecified()) && o.advertiseHost == "" && !o.listenAny {
		return nil, fmt.Errorf("bootstrap: listen address %q binds every interface: name one, or say with WithAdvertiseHost which address the other ranks should dial", addr)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: listen on %s: %w", addr, err)
	}
	bound := ln.Addr().(*net.TCPAddr)
	advertised := o.advertiseHost
	if advertised == "" {
		advertised = bound.IP.String()
	}
	id, err := NewID(net.JoinHostPort(advertised, strconv.Itoa(bound.Port)), secret)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("bootstrap: listen: %w", err)
	}
	log := o.log.Named("bootstrap").With(zap.Int("rank", 0), zap.Int("world", world))
	r := &Root{
		o:       o,
		log:     log,
		world:   world,
		secret:  secret,
		id:      id,
		ln:      ln,
		sess:    newSession(0, world, o, log),
		links:   make([]*link, world),
		joined:  1,
		pending: make(map[net.Conn]struct{}),
		coll:    newGather(world, 1),
		ready:   make(chan struct{}),
		stop:    make(chan struct{}),
	}
	r.sess.eng = r
	r.sess.secret, r.sess.rootAddr = secret, id.Addr()
	log.Info("root listening", zap.String("addr", bound.String()), zap.String("advertised", id.Addr()))
	r.mu.Lock()
	defer r.mu.Unlock()
	if world == 1 {
		r.completeLocked()
		return r, nil
	}
	r.hsWG.Add(1)
	go r.acceptLoop()
	return r, nil
}

// ID returns what the other ranks need to Join: the advertised address and the secret.
func (r *Root) ID() ID { return r.id }

// Accept waits until every rank has joined and returns rank 0's session. It waits at most
// the timeout (WithTimeout) and respects ctx. If it fails, it tells every rank that has
// joined why — the error names the ranks still missing ("timed out after 2s waiting for
// ranks [3 7] of 8 (joined 6)") — and closes the root. Call it once.
func (r *Root) Accept(ctx context.Context) (*Session, error) {
	if !r.accepting.CompareAndSwap(false, true) {
		return nil, errors.New("bootstrap: Accept called more than once")
	}
	start := time.Now()
	t := time.NewTimer(r.o.timeout)
	defer t.Stop()
	select {
	case <-r.ready:
	case <-r.sess.done:
	case <-t.C:
		r.mu.Lock()
		if r.phase == phaseRendezvous {
			r.failLocked(kindTimeout, r.explainLocked(kindTimeout, fmt.Sprintf("timed out after %v", r.o.timeout)), nil)
		}
		r.mu.Unlock()
	case <-ctx.Done():
		r.mu.Lock()
		if r.phase == phaseRendezvous {
			k, wk := ctxKind(ctx), kindPeerGone
			body := fmt.Sprintf("rank 0 abandoned the rendezvous: %v", ctx.Err())
			if k == kindTimeout {
				wk, body = kindTimeout, fmt.Sprintf("timed out after %v", time.Since(start).Round(time.Millisecond))
			}
			body = r.explainLocked(wk, body)
			r.failLocked(wk, body, newError(k, ctx.Err(), "bootstrap: %s", body))
		}
		r.mu.Unlock()
	}
	r.stopAccepting()
	select {
	case <-r.ready:
		r.log.Info("rendezvous complete", zap.Duration("elapsed", time.Since(start)))
		return r.sess, nil
	default:
	}
	err := r.sess.Err()
	r.sess.Close()
	return nil, err
}

// Close stops the root. Before the rendezvous completes it also tells the ranks that
// joined and releases everything; a session already returned by Accept is not affected
// (close that session instead). Idempotent; returns nil.
func (r *Root) Close() error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		if r.phase == phaseRendezvous {
			r.failLocked(kindPeerGone, "rank 0 closed the root before the rendezvous completed",
				newError(kindClosed, nil, "bootstrap: root closed"))
		}
		r.mu.Unlock()
		r.stopAccepting()
		if !r.accepting.Load() {
			r.sess.Close() // nobody else will
		}
	})
	return nil
}

func (r *Root) acceptLoop() {
	defer r.hsWG.Done()
	slots := make(chan struct{}, maxHandshakes)
	var backoff time.Duration
	for {
		select {
		case slots <- struct{}{}:
		case <-r.stop:
			return
		}
		c, err := r.ln.Accept()
		if err != nil {
			<-slots
			select {
			case <-r.stop:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			r.log.Warn("accept failed; retrying", zap.Error(err), zap.Duration("backoff", backoff))
			select {
			case <-time.After(backoff):
			case <-r.stop:
				return
			}
			continue
		}
		backoff = 0
		r.mu.Lock()
		if r.stopped {
			r.mu.Unlock()
			c.Close()
			return
		}
		r.pending[c] = struct{}{}
		r.hsWG.Add(1)
		r.mu.Unlock()
		go func() {
			defer r.hsWG.Done()
			defer func() { <-slots }()
			r.handshake(c)
		}()
	}
}

// stopAccepting closes the listener and the connections still in their handshake, and
// waits for the goroutines serving them.
func (r *Root) stopAccepting() {
	r.mu.Lock()
	r.stopLocked()
	r.mu.Unlock()
	r.hsWG.Wait()
}

func (r *Root) stopLocked() {
	if r.stopped {
		return
	}
	r.stopped = true
	close(r.stop)
	r.ln.Close()
	for c := range r.pending {
		c.Close()
	}
}

// handshake authenticates one connection and registers its rank. Anything wrong is logged
// and the connection closed; the root keeps waiting for the legitimate ranks.
func (r *Root) handshake(c net.Conn) {
	remote := c.RemoteAddr().String()
	kept := false
	defer func() {
		if !kept {
			r.mu.Lock()
			delete(r.pending, c)
			r.mu.Unlock()
			c.Close()
		}
	}()
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	rootNonce := make([]byte, nonceLen)
	rand.Read(rootNonce)
	if err := writeFrame(c, &frame{typ: msgChallenge, head: rootNonce}, nil); err != nil {
		r.log.Debug("connection lost before the challenge", zap.String("remote", remote), zap.Error(err))
		return
	}
	_, p, err := readFrame(c, nil, func(t msgType) (uint64, bool) { return helloLen, t == msgHello })
	var h hello
	if err == nil {
		h, err = decodeHello(p)
	}
	if err != nil {
		r.rejectBadFrame(c, remote, err)
		return
	}
	rank := int64(h.rank)
	switch {
	case !hmac.Equal(h.mac, authMAC(r.secret, rolePeer, rootNonce, h.rank, h.world, h.nonce)):
		r.reject(c, remote, rank, kindAuth, "authentication failed: the job secret differs")
		return
	case int64(h.world) != int64(r.world):
		r.reject(c, remote, rank, kindOther, fmt.Sprintf("world size %d does not match the root's %d", h.world, r.world))
		return
	case rank < 1 || rank >= int64(r.world):
		r.reject(c, remote, rank, kindOther, fmt.Sprintf("rank %d is outside 1..%d (rank 0 is the root)", rank, r.world-1))
		return
	}
	welcome := &frame{typ: msgWelcome, head: authMAC(r.secret, roleRoot, rootNonce, h.rank, h.world, h.nonce)}

	if reason := r.register(c, int(rank), remote, welcome); reason != "" {
		r.reject(c, remote, rank, kindOther, reason)
		return
	}
	kept = true
}

// register makes an authenticated connection rank's link, or says why it cannot.
func (r *Root) register(c net.Conn, rank int, remote string, welcome *frame) (reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.phase != phaseRendezvous:
		return "the rendezvous is over"
	case r.links[rank] != nil:
		return fmt.Sprintf("rank %d already joined from %s", rank, r.links[rank].conn.RemoteAddr())
	}
	delete(r.pending, c)
	c.SetDeadline(time.Time{})
	l := r.newPeerLink(c, rank)
	r.links[rank] = l
	r.all = append(r.all, l)
	r.joined++
	l.send(welcome)
	l.start()
	r.log.Debug("rank joined", zap.Int("peer", rank), zap.String("remote", remote), zap.Int("joined", r.joined))
	if r.joined == r.world {
		r.completeLocked()
	}
	return ""
}

// rejectBadFrame handles a connection whose first frame was unreadable.
func (r *Root) rejectBadFrame(c net.Conn, remote string, err error) {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF):
		r.log.Debug("connection closed before the hello", zap.String("remote", remote))
	case errors.Is(err, errBadMagic):
		r.log.Warn("rejected connection: not an mkernel bootstrap peer", zap.String("remote", remote))
	case errors.As(err, &ne) && ne.Timeout():
		r.log.Warn("rejected connection: no hello in time", zap.String("remote", remote), zap.Duration("timeout", handshakeTimeout))
	case errors.Is(err, ErrProtocol):
		r.reject(c, remote, -1, kindProtocol, err.Error())
	default:
		r.log.Warn("rejected connection", zap.String("remote", remote), zap.Error(err))
	}
}

// reject logs why a connection is refused and tells the other side; rank < 0: unknown.
func (r *Root) reject(c net.Conn, remote string, rank int64, k kind, reason string) {
	r.log.Warn("rejected connection", zap.String("remote", remote), zap.Int64("claimed_rank", rank), zap.String("reason", reason))
	writeFrame(c, errorFrame(k, reason), nil) // best effort; the handshake deadline bounds it
}

func (r *Root) newPeerLink(c net.Conn, rank int) *link {
	var l *link
	limit := func(t msgType) (uint64, bool) {
		switch t {
		case msgContrib:
			return collHeadLen + MaxBlobSize, true
		case msgError:
			return 1 + maxMsgLen, true
		case msgPing:
			return 0, true
		}
		return 0, false
	}
	l = newLink(c, r.o.hbInterval, r.o.hbTimeout, limit,
		func(t msgType, p []byte) error { return r.onFrame(l, rank, t, p) },
		func(err error) { r.onLinkDown(l, rank, err) })
	return l
}

func (r *Root) onFrame(l *link, rank int, t msgType, p []byte) error {
	switch t {
	case msgContrib:
		seq, op, blob, err := decodeCollHead(p)
		if err != nil {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.contributeLocked(rank, seq, op, blob)
	case msgError:
		k, msg := decodeError(p)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.peerAbortLocked(l, rank, k, msg)
		return nil
	}
	return fmt.Errorf("%w: unexpected %v frame", ErrProtocol, t)
}

func (r *Root) contributeLocked(rank int, seq uint64, op opCode, blob []byte) error {
	switch r.phase {
	case phaseDead:
		return nil // the session is over; the link is closing
	case phaseRendezvous:
		return fmt.Errorf("%w: contribution before the rendezvous completed", ErrProtocol)
	}
	g := &r.coll
	if seq != g.seq || g.have[rank] {
		return fmt.Errorf("%w: contribution to collective #%d while #%d is in progress", ErrProtocol, seq, g.seq)
	}
	if op == opBarrier && len(blob) != 0 {
		return fmt.Errorf("%w: barrier contribution with %d payload bytes", ErrProtocol, len(blob))
	}
	if !r.matchLocked(rank, op) {
		return nil
	}
	g.blobs[rank] = blob
	g.have[rank] = true
	g.n++
	if g.n == r.world {
		r.completeGatherLocked()
	}
	return nil
}

// matchLocked checks that rank calls the same collective as the ranks before it; on a
// mismatch it ends the session and reports false.
func (r *Root) matchLocked(rank int, op opCode) bool {
	g := &r.coll
	if g.n == 0 {
		g.op, g.first = op, rank
		return true
	}
	if g.op == op {
		return true
	}
	r.failLocked(kindOther, fmt.Sprintf("collective mismatch at #%d: rank %d called %v, rank %d called %v",
		g.seq, g.first, g.op, rank, op), nil)
	return false
}

// completeGatherLocked sends the result of the collective in progress to every rank.
func (r *Root) completeGatherLocked() {
	g := r.coll
	r.coll = newGather(r.world, g.seq+1)
	f := resultFrame(g.seq, g.op, g.blobs)
	for _, l := range r.links[1:] {
		l.send(f)
	}
	var res [][]byte
	if g.op == opAllGather {
		res = concat(g.blobs)
	}
	g.local <- res
}

// concat copies blobs into one buffer: rank 0 gets its own copy while the links are still
// sending the originals.
func concat(blobs [][]byte) [][]byte {
	total := 0
	for _, b := range blobs {
		total += len(b)
	}
	buf := make([]byte, 0, total)
	out := make([][]byte, len(blobs))
	for i, b := range blobs {
		off := len(buf)
		buf = append(buf, b...)
		out[i] = buf[off:len(buf):len(buf)]
	}
	return out
}

func (r *Root) peerAbortLocked(l *link, rank int, k kind, msg string) {
	switch r.phase {
	case phaseDead:
		return
	case phaseRendezvous:
		if k == kindTimeout {
			// A rank gave up waiting: end the rendezvous for everyone, saying who is missing.
			r.failLocked(kindTimeout, r.explainLocked(kindTimeout, msg), nil)
			return
		}
		r.log.Info("rank left the rendezvous; waiting for it to rejoin", zap.Int("peer", rank), zap.String("reason", msg))
		r.dropLocked(l, rank)
		l.finish(nil)
		return
	}
	r.failLocked(k, r.explainLocked(k, msg), nil)
}

func (r *Root) onLinkDown(l *link, rank int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.links[rank] != l {
		return
	}
	switch r.phase {
	case phaseRendezvous:
		r.log.Warn("rank disconnected before the rendezvous completed; waiting for it to rejoin", zap.Int("peer", rank), zap.Error(err))
		r.dropLocked(l, rank)
	case phaseRunning:
		if errors.Is(err, ErrProtocol) {
			r.failLocked(kindProtocol, fmt.Sprintf("rank %d broke the protocol: %v", rank, err), nil)
			return
		}
		r.failLocked(kindPeerGone, fmt.Sprintf("rank %d disconnected: %s", rank, describeLoss(err, r.o.hbTimeout)), nil)
	}
}

func (r *Root) dropLocked(l *link, rank int) {
	if r.links[rank] == l {
		r.links[rank] = nil
		r.joined--
	}
}

// waitingLocked describes who the rendezvous or the collective in progress waits for.
func (r *Root) waitingLocked() string {
	var missing []int
	switch r.phase {
	case phaseRendezvous:
		for i := 1; i < r.world; i++ {
			if r.links[i] == nil {
				missing = append(missing, i)
			}
		}
		return fmt.Sprintf("waiting for ranks %s of %d (joined %d)", formatRanks(missing), r.world, r.joined)
	case phaseRunning:
		if r.coll.n == 0 {
			return ""
		}
		for i, ok := range r.coll.have {
			if !ok {
				missing = append(missing, i)
			}
		}
		return fmt.Sprintf("waiting for ranks %s of %d", formatRanks(missing), r.world)
	}
	return ""
}

// explainLocked appends to msg who the rendezvous or collective was waiting for: "timed
// out after 2s waiting for ranks [3] of 4", "rank 2 left (waiting for ranks [3] of 4)".
func (r *Root) explainLocked(k kind, msg string) string {
	w := r.waitingLocked()
	switch {
	case w == "":
		return msg
	case k == kindTimeout:
		return msg + " " + w
	}
	return msg + " (" + w + ")"
}

// completeLocked ends the rendezvous: every rank has joined.
func (r *Root) completeLocked() {
	r.phase = phaseRunning
	r.stopLocked()
	for _, l := range r.links[1:] {
		l.send(readyFrame)
	}
	close(r.ready)
}

// failLocked ends the session on every rank: the ranks are told body and their links
// closed; rank 0's error is local, or "bootstrap: "+body.
func (r *Root) failLocked(k kind, body string, local *sessionError) {
	if r.phase == phaseDead {
		return
	}
	r.phase = phaseDead
	r.stopLocked()
	f := errorFrame(k, body)
	for _, l := range r.links {
		if l != nil {
			l.finish(f)
		}
	}
	if local == nil {
		local = newError(k, nil, "bootstrap: %s", body)
	}
	r.sess.setErr(local)
}

// Engine side: rank 0's collectives.

func (r *Root) collective(ctx context.Context, seq uint64, op opCode, blob []byte) ([][]byte, error) {
	r.mu.Lock()
	if r.phase != phaseRunning {
		r.mu.Unlock()
		return nil, r.sess.Err()
	}
	g := &r.coll
	if g.seq != seq {
		r.mu.Unlock()
		return nil, fmt.Errorf("bootstrap: internal error: rank 0 at collective #%d, root at #%d", seq, g.seq)
	}
	if !r.matchLocked(0, op) {
		r.mu.Unlock()
		return nil, r.sess.Err()
	}
	if op == opAllGather {
		g.blobs[0] = bytes.Clone(blob) // the caller may reuse blob once we return
	}
	g.have[0] = true
	g.n++
	ch := g.local
	if g.n == r.world {
		r.completeGatherLocked()
	}
	r.mu.Unlock()

	start := time.Now()
	return r.sess.await(ctx, ch,
		func() {
			r.giveUp(seq, kindTimeout, kindTimeout, nil, fmt.Sprintf("%v #%d timed out after %v", op, seq, r.o.timeout))
		},
		func() {
			if k := ctxKind(ctx); k == kindTimeout {
				r.giveUp(seq, kindTimeout, k, ctx.Err(), fmt.Sprintf("%v #%d timed out after %v", op, seq, time.Since(start).Round(time.Millisecond)))
			} else {
				r.giveUp(seq, kindPeerGone, k, ctx.Err(), fmt.Sprintf("rank 0 abandoned %v #%d: %v", op, seq, ctx.Err()))
			}
		})
}

// giveUp ends the session because rank 0 stopped waiting for collective seq, unless it
// completed meanwhile. The others learn body (of kind wk) and who was missing.
func (r *Root) giveUp(seq uint64, wk, lk kind, cause error, body string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase != phaseRunning || r.coll.seq != seq {
		return
	}
	body = r.explainLocked(wk, body)
	r.failLocked(wk, body, newError(lk, cause, "bootstrap: %s", body))
}

func (r *Root) abort(err *sessionError, k kind, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failLocked(k, msg, err)
}

func (r *Root) shutdown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failLocked(kindLeft, "rank 0 closed the session", newError(kindClosed, nil, "bootstrap: rank 0: session closed"))
}

func (r *Root) allLinks() []*link {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*link(nil), r.all...)
}

// describeLoss says why a link broke, in words for an error message.
func describeLoss(err error, idle time.Duration) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("silent for %v (heartbeat timeout)", idle)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	}
	return err.Error()
}
