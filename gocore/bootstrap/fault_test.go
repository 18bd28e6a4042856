package bootstrap

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

func TestWrongSecretIsRejected(t *testing.T) {
	checkLeaks(t)
	log, logs := observed()
	const world = 3
	root := listenLocal(t, world, WithLogger(log), WithTimeout(20*time.Second))
	bad, err := NewID(root.ID().Addr(), bytes.Repeat([]byte{0xaa}, SecretLen))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Join(context.Background(), bad, 1, world, WithTimeout(5*time.Second))
	expectErr(t, "impostor", err, ErrAuth, root.ID().Addr())
	if time.Since(start) > 3*time.Second {
		t.Errorf("impostor took %v to be rejected", time.Since(start))
	}
	if !hasLog(logs, "rejected connection", "job secret differs") {
		t.Errorf("root did not log the rejection; logs: %v", logs.All())
	}

	// The legitimate ranks, including the rank the impostor claimed, still get in.
	ss := make([]*Session, world)
	t.Cleanup(func() { closeAll(ss) })
	var wg sync.WaitGroup
	errs := make([]error, world)
	for r := 1; r < world; r++ {
		wg.Add(1)
		go func() { defer wg.Done(); ss[r], errs[r] = Join(context.Background(), root.ID(), r, world) }()
	}
	ss[0], errs[0] = root.Accept(context.Background())
	wg.Wait()
	requireNoErrors(t, errs)
	if t.Failed() {
		return
	}
	requireNoErrors(t, runRanks(t, ss, 20*time.Second, func(s *Session) error {
		res, err := s.AllGather(context.Background(), makeBlob(s.Rank(), 1))
		if err != nil {
			return err
		}
		return checkGather(res, world, 1)
	}))
}

// A rank that never comes: the root and every rank that did come fail within the timeout,
// all naming exactly that rank.
func TestMissingRankIsNamedEverywhere(t *testing.T) {
	checkLeaks(t)
	const world, timeout = 4, 1500 * time.Millisecond
	root := listenLocal(t, world, WithTimeout(timeout))
	errs := make([]error, world-1)
	var wg sync.WaitGroup
	start := time.Now()
	for r := 1; r < world-1; r++ { // rank 3 never comes
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Join(context.Background(), root.ID(), r, world, WithTimeout(timeout))
			if s != nil {
				s.Close()
			}
			errs[r] = err
		}()
	}
	s, err := root.Accept(context.Background())
	if s != nil {
		s.Close()
	}
	errs[0] = err
	wg.Wait()
	elapsed := time.Since(start)
	for r, err := range errs {
		expectErr(t, fmt.Sprintf("rank %d", r), err, ErrTimeout, "waiting for ranks [3] of 4 (joined 3)")
	}
	if elapsed > timeout+abortGrace+time.Second {
		t.Errorf("failing took %v with a %v timeout", elapsed, timeout)
	}
	t.Logf("root: %v", errs[0])
	t.Logf("rank 1: %v", errs[1])
}

func TestUnreachableRootNamesTheAddress(t *testing.T) {
	checkLeaks(t)
	addr := freeAddr(t) // closed again: nothing listens there
	id, err := NewID(addr, testSecret())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Join(context.Background(), id, 1, 2, WithTimeout(300*time.Millisecond))
	expectErr(t, "join", err, ErrTimeout, "connecting to root at "+addr, "refused")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = Join(ctx, id, 1, 2)
	expectErr(t, "join with canceled ctx", err, context.Canceled, addr)
}

// rawConn opens a plain TCP connection to the root and reads its challenge.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// expectDropped checks that the root closes c within a few seconds, and returns any error
// message it sent first.
func expectDropped(t *testing.T, what string, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var msg string
	for {
		typ, p, err := readFrame(c, nil, func(msgType) (uint64, bool) { return 1 << 16, true })
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("%s: root kept the connection open", what)
			}
			return msg
		}
		if typ == msgError {
			_, msg = decodeError(p)
		}
	}
}

func rawHeader(version uint8, typ msgType, length uint64) []byte {
	h := make([]byte, headerLen)
	binary.BigEndian.PutUint32(h, wireMagic)
	h[4] = version
	h[5] = byte(typ)
	binary.BigEndian.PutUint64(h[8:], length)
	return h
}

func TestGarbageIsRejectedAndRootContinues(t *testing.T) {
	checkLeaks(t)
	log, logs := observed()
	root := listenLocal(t, 2, WithLogger(log), WithTimeout(20*time.Second))
	addr := root.ID().Addr()

	silent := rawConn(t, addr) // connects and says nothing: must not block anyone

	c := rawConn(t, addr)
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	expectDropped(t, "http", c)

	c = rawConn(t, addr)
	c.Write(rawHeader(wireVersion, msgHello, 1<<40))
	if msg := expectDropped(t, "oversized", c); !bytes.Contains([]byte(msg), []byte("exceeds the limit")) {
		t.Errorf("oversized frame: root said %q", msg)
	}

	c = rawConn(t, addr)
	c.Write(rawHeader(wireVersion+1, msgHello, helloLen))
	if msg := expectDropped(t, "wrong version", c); !bytes.Contains([]byte(msg), []byte("protocol version 2")) {
		t.Errorf("wrong version: root said %q", msg)
	}

	c = rawConn(t, addr)
	c.Write(append(rawHeader(wireVersion, msgHello, 5), 1, 2, 3, 4, 5))
	if msg := expectDropped(t, "short hello", c); !bytes.Contains([]byte(msg), []byte("hello of 5 bytes")) {
		t.Errorf("short hello: root said %q", msg)
	}

	c = rawConn(t, addr)
	c.Write(rawHeader(wireVersion, msgContrib, 0))
	expectDropped(t, "contribution before hello", c)

	if !hasLog(logs, "rejected connection: not an mkernel bootstrap peer", "") {
		t.Errorf("garbage not logged; logs: %v", logs.All())
	}

	// The real rank still joins while the silent connection hangs around.
	ss := make([]*Session, 2)
	t.Cleanup(func() { closeAll(ss) })
	var joinErr error
	joined := make(chan struct{})
	go func() { ss[1], joinErr = Join(context.Background(), root.ID(), 1, 2); close(joined) }()
	s, err := root.Accept(context.Background())
	ss[0] = s
	<-joined
	if err != nil || joinErr != nil {
		t.Fatalf("accept: %v, join: %v", err, joinErr)
	}
	requireNoErrors(t, runRanks(t, ss, 10*time.Second, func(s *Session) error {
		res, err := s.AllGather(context.Background(), makeBlob(s.Rank(), 2))
		if err != nil {
			return err
		}
		return checkGather(res, 2, 2)
	}))
	// The rendezvous is over: the silent connection is dropped, the port closed.
	expectDropped(t, "silent", silent)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("root still listening after the rendezvous")
	}
}

// fakeRank authenticates as any rank/world claim with the given secret, bypassing Join's
// checks, and returns the connection and the root's verdict.
func fakeRank(t *testing.T, addr string, secret []byte, rank, world int) (net.Conn, error) {
	t.Helper()
	c := rawConn(t, addr)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	id := ID{addr: addr, secret: string(secret)}
	p := &peer{rank: rank, world: world, id: id}
	err := p.authenticate(c)
	c.SetDeadline(time.Time{})
	return c, err
}

func TestBadClaimsAreRejected(t *testing.T) {
	checkLeaks(t)
	log, logs := observed()
	const world = 4
	root := listenLocal(t, world, WithLogger(log), WithSecret(testSecret()))
	addr := root.ID().Addr()

	for _, tc := range []struct {
		name        string
		rank, world int
		want        string
	}{
		{"wrong world", 1, 5, "world size 5 does not match the root's 4"},
		{"rank too large", 4, 4, "rank 4 is outside 1..3"},
		{"rank 0", 0, 4, "rank 0 is outside 1..3"},
	} {
		_, err := fakeRank(t, addr, testSecret(), tc.rank, tc.world)
		expectErr(t, tc.name, err, nil, "rejected this rank", tc.want)
		if !hasLog(logs, "rejected connection", tc.want) {
			t.Errorf("%s: not logged", tc.name)
		}
	}

	// A duplicate rank is refused while the first holder keeps its place.
	first, err := fakeRank(t, addr, testSecret(), 2, world)
	if err != nil {
		t.Fatalf("first rank 2: %v", err)
	}
	_, err = fakeRank(t, addr, testSecret(), 2, world)
	expectErr(t, "duplicate", err, nil, "rank 2 already joined from")

	// The rendezvous can still complete with the first rank 2.
	ss := make([]*Session, world)
	t.Cleanup(func() { closeAll(ss) })
	var wg sync.WaitGroup
	for _, r := range []int{1, 3} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if ss[r], err = Join(context.Background(), root.ID(), r, world); err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}()
	}
	ss[0], err = root.Accept(context.Background())
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	typ, _, err := readFrame(first, nil, (&peer{world: world}).limit)
	if err != nil || typ != msgReady {
		t.Fatalf("fake rank 2: got %v, %v; want ready", typ, err)
	}
	first.Close()
}

// A rank that vanishes without closing its socket is found by the heartbeat timeout.
func TestSilentPeerIsDetected(t *testing.T) {
	checkLeaks(t)
	const world = 3
	hb := WithHeartbeat(100*time.Millisecond, time.Second)
	root := listenLocal(t, world, hb, WithSecret(testSecret()))
	silent, err := fakeRank(t, root.ID().Addr(), testSecret(), 2, world) // never pings
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ss := make([]*Session, 2)
	t.Cleanup(func() { closeAll(ss) })
	joined := make(chan error)
	go func() {
		var err error
		ss[1], err = Join(context.Background(), root.ID(), 1, world, hb)
		joined <- err
	}()
	ss[0], err = root.Accept(context.Background())
	if jerr := <-joined; err != nil || jerr != nil {
		t.Fatalf("accept: %v, join: %v", err, jerr)
	}
	start := time.Now()
	errs := runRanks(t, ss, 10*time.Second, func(s *Session) error {
		_, err := s.AllGather(context.Background(), []byte{1})
		return err
	})
	for r, err := range errs {
		expectErr(t, fmt.Sprintf("rank %d", r), err, ErrPeerGone, "rank 2 disconnected: silent for 1s (heartbeat timeout)")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v to notice", d)
	}
}

func TestPeerDisconnectFailsCollectiveEverywhere(t *testing.T) {
	checkLeaks(t)
	const world = 4
	ss := startJob(t, world)
	var wg sync.WaitGroup
	errs := make([]error, world)
	for _, r := range []int{0, 1, 3} {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[r] = ss[r].AllGather(context.Background(), []byte("x")) }()
	}
	time.Sleep(50 * time.Millisecond)
	ss[2].eng.(*peer).l.kill() // rank 2's connection drops as if its process died
	wg.Wait()
	for _, r := range []int{0, 1, 3} {
		expectErr(t, fmt.Sprintf("rank %d", r), errs[r], ErrPeerGone, "rank 2 disconnected")
		select {
		case <-ss[r].Done():
		default:
			t.Errorf("rank %d: Done not closed", r)
		}
	}
	select {
	case <-ss[2].Done():
	case <-time.After(5 * time.Second):
		t.Errorf("rank 2: Done not closed after losing its connection")
	}
	expectErr(t, "rank 2", ss[2].Err(), ErrPeerGone, "lost the connection to root at")
}

func TestCollectiveTimeoutNamesMissingRank(t *testing.T) {
	checkLeaks(t)
	const world = 3
	ss := startJob(t, world, WithTimeout(time.Second))
	start := time.Now()
	errs := runRanks(t, ss[:2], 10*time.Second, func(s *Session) error { // rank 2 never calls
		if err := s.Barrier(context.Background()); err != nil {
			return err
		}
		return nil
	})
	for r, err := range errs {
		expectErr(t, fmt.Sprintf("rank %d", r), err, ErrTimeout, "barrier #1", "waiting for ranks [2] of 3")
	}
	if d := time.Since(start); d > time.Second+abortGrace+time.Second {
		t.Errorf("took %v", d)
	}
	select {
	case <-ss[2].Done():
	case <-time.After(5 * time.Second):
		t.Fatal("rank 2: Done not closed")
	}
	expectErr(t, "rank 2", ss[2].Err(), ErrTimeout, "waiting for ranks [2] of 3")
}

func TestCanceledCollectiveEndsTheSession(t *testing.T) {
	checkLeaks(t)
	ss := startJob(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	errs := runRanks(t, ss[:2], 10*time.Second, func(s *Session) error {
		c := context.Background()
		if s.Rank() == 1 {
			c = ctx
		}
		_, err := s.AllGather(c, []byte("x"))
		return err
	})
	expectErr(t, "rank 1", errs[1], context.Canceled, "rank 1 abandoned all-gather #1")
	expectErr(t, "rank 0", errs[0], ErrPeerGone, "rank 1 abandoned all-gather #1", "waiting for ranks [2] of 3")

	// A context that is over before the call starts leaves a session alone.
	ss2 := startJob(t, 2)
	_, err := ss2[1].AllGather(ctx, nil)
	expectErr(t, "pre-canceled", err, context.Canceled, "not started")
	if err := ss2[1].Err(); err != nil {
		t.Errorf("session ended by a call that never started: %v", err)
	}
}

func TestDeadlineCollectiveIsATimeout(t *testing.T) {
	checkLeaks(t)
	ss := startJob(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := ss[0].AllGather(ctx, []byte("x"))
	expectErr(t, "rank 0", err, ErrTimeout, "all-gather #1 timed out", "waiting for ranks [1] of 2")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v does not match context.DeadlineExceeded", err)
	}
	<-ss[1].Done()
	expectErr(t, "rank 1", ss[1].Err(), ErrTimeout, "waiting for ranks [1] of 2")
}

func TestTooLargeBlob(t *testing.T) {
	checkLeaks(t)
	ss := startJob(t, 3)
	big := make([]byte, MaxBlobSize+1)
	errs := runRanks(t, ss, 10*time.Second, func(s *Session) error {
		blob := []byte("fine")
		if s.Rank() == 2 {
			blob = big
		}
		_, err := s.AllGather(context.Background(), blob)
		return err
	})
	for r, err := range errs {
		expectErr(t, fmt.Sprintf("rank %d", r), err, ErrTooLarge, "rank 2 passed a 16777217-byte blob to all-gather #1")
	}

	// Exactly MaxBlobSize is fine.
	ss = startJob(t, 2)
	requireNoErrors(t, runRanks(t, ss, 20*time.Second, func(s *Session) error {
		res, err := s.AllGather(context.Background(), big[:MaxBlobSize])
		if err == nil && (len(res[0]) != MaxBlobSize || len(res[1]) != MaxBlobSize) {
			err = fmt.Errorf("sizes %d %d", len(res[0]), len(res[1]))
		}
		return err
	}))
}

func TestCollectiveMismatch(t *testing.T) {
	checkLeaks(t)
	ss := startJob(t, 2)
	errs := runRanks(t, ss, 10*time.Second, func(s *Session) error {
		if s.Rank() == 0 {
			return s.Barrier(context.Background())
		}
		_, err := s.AllGather(context.Background(), nil)
		return err
	})
	for r, err := range errs {
		expectErr(t, fmt.Sprintf("rank %d", r), err, nil, "collective mismatch at #1")
	}
}

func TestAcceptCancelTellsJoinedRanks(t *testing.T) {
	checkLeaks(t)
	root := listenLocal(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	joined := make(chan error)
	go func() {
		s, err := Join(context.Background(), root.ID(), 1, 3)
		if s != nil {
			s.Close()
		}
		joined <- err
	}()
	go func() { // cancel once rank 1 is in
		for {
			root.mu.Lock()
			n := root.joined
			root.mu.Unlock()
			if n == 2 {
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, err := root.Accept(ctx)
	expectErr(t, "root", err, context.Canceled, "rank 0 abandoned the rendezvous", "waiting for ranks [2] of 3")
	expectErr(t, "rank 1", <-joined, ErrPeerGone, "rank 0 abandoned the rendezvous")
	if _, err := root.Accept(context.Background()); err == nil {
		t.Error("second Accept succeeded")
	}
}

func TestReadFrameLimits(t *testing.T) {
	// feed returns the reading end of a pipe whose writer sends chunks, then closes.
	feed := func(chunks ...[]byte) net.Conn {
		a, b := net.Pipe()
		t.Cleanup(func() { b.Close() })
		go func() {
			for _, c := range chunks {
				a.Write(c)
			}
			a.Close()
		}()
		return b
	}
	any := func(max uint64) limitFunc { return func(msgType) (uint64, bool) { return max, true } }

	a, b := net.Pipe()
	defer b.Close()
	go func() {
		writeFrame(a, &frame{typ: msgContrib, head: collHead(7, opAllGather, 0), parts: [][]byte{bytes.Repeat([]byte{1}, 3*ioChunk+5)}}, nil)
		a.Close()
	}()
	typ, p, err := readFrame(b, nil, func(t msgType) (uint64, bool) { return collHeadLen + MaxBlobSize, t == msgContrib })
	if err != nil || typ != msgContrib || len(p) != collHeadLen+3*ioChunk+5 {
		t.Fatalf("large frame: %v %d %v", typ, len(p), err)
	}
	seq, op, blob, err := decodeCollHead(p)
	if err != nil || seq != 7 || op != opAllGather || len(blob) != 3*ioChunk+5 {
		t.Fatalf("decode: %d %v %d %v", seq, op, len(blob), err)
	}

	_, _, err = readFrame(feed(rawHeader(wireVersion, msgPing, 1)), nil, any(0))
	expectErr(t, "ping with payload", err, ErrProtocol, "exceeds the limit")

	_, _, err = readFrame(feed(rawHeader(wireVersion, msgPing, 0)), nil, func(t msgType) (uint64, bool) { return 0, t == msgResult })
	expectErr(t, "unexpected type", err, ErrProtocol, "unexpected ping frame")

	flagged := rawHeader(wireVersion, msgPing, 0)
	flagged[7] = 1
	_, _, err = readFrame(feed(flagged), nil, any(0))
	expectErr(t, "reserved flags", err, ErrProtocol, "reserved flags")

	_, _, err = readFrame(feed([]byte("not a frame at all")), nil, any(0))
	if !errors.Is(err, errBadMagic) {
		t.Errorf("garbage: %v", err)
	}

	_, _, err = readFrame(feed(rawHeader(wireVersion, msgResult, 100), make([]byte, 10)), nil, any(1000))
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated frame: %v", err)
	}
}

func TestDecodeResultRejectsInconsistentLengths(t *testing.T) {
	f := resultFrame(3, opAllGather, [][]byte{[]byte("ab"), nil, []byte("cde")})
	var p []byte
	p = append(p, f.head...)
	for _, part := range f.parts {
		p = append(p, part...)
	}
	seq, op, blobs, err := decodeResult(p, 3)
	if err != nil || seq != 3 || op != opAllGather || string(blobs[0]) != "ab" || len(blobs[1]) != 0 || string(blobs[2]) != "cde" {
		t.Fatalf("round trip: %d %v %q %v", seq, op, blobs, err)
	}
	if _, _, _, err := decodeResult(p[:len(p)-1], 3); !errors.Is(err, ErrProtocol) {
		t.Errorf("short data: %v", err)
	}
	if _, _, _, err := decodeResult(append(p, 0), 3); !errors.Is(err, ErrProtocol) {
		t.Errorf("trailing data: %v", err)
	}
	if _, _, _, err := decodeResult(p, 4); !errors.Is(err, ErrProtocol) {
		t.Errorf("wrong world: %v", err)
	}
}

// A root that does not know the secret cannot pass itself off as the root, and what a rank
// sends during the handshake does not contain the secret.
func TestImpostorRootIsDetected(t *testing.T) {
	checkLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sent := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		writeFrame(c, &frame{typ: msgChallenge, head: make([]byte, nonceLen)}, nil)
		_, hello, _ := readFrame(c, nil, func(msgType) (uint64, bool) { return 1 << 10, true })
		sent <- hello
		writeFrame(c, &frame{typ: msgWelcome, head: make([]byte, macLen)}, nil) // a guess
		io.Copy(io.Discard, c)
	}()
	id, err := NewID(ln.Addr().String(), testSecret())
	if err != nil {
		t.Fatal(err)
	}
	_, err = Join(context.Background(), id, 1, 2, WithTimeout(5*time.Second))
	expectErr(t, "join", err, ErrAuth, "could not prove it knows the job secret", ln.Addr().String())
	if hello := <-sent; len(hello) != helloLen || bytes.Contains(hello, testSecret()[:8]) {
		t.Errorf("hello of %d bytes carries the secret: %x", len(hello), hello)
	}
}
