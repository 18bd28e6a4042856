package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// childEnv selects the child role of the test binary (see process_test.go).
const childEnv = "MKERNEL_BOOTSTRAP_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(childMain(mode))
	}
	os.Exit(m.Run())
}

// checkLeaks fails the test if goroutines started during it are still running shortly
// after it ends (sessions must release everything on Close).
func checkLeaks(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				t.Errorf("%d goroutines leaked:\n%s", runtime.NumGoroutine()-before, buf[:n])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// observed returns a logger that records entries at Debug and above.
func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.DebugLevel)
	return zap.New(core), logs
}

func hasLog(logs *observer.ObservedLogs, msg, substr string) bool {
	for _, e := range logs.FilterMessage(msg).All() {
		if substr == "" || strings.Contains(fmt.Sprint(e.ContextMap()), substr) {
			return true
		}
	}
	return false
}

// listenLocal starts a root on a free loopback port.
func listenLocal(t *testing.T, world int, opts ...Option) *Root {
	t.Helper()
	r, err := Listen(context.Background(), world, append([]Option{WithListenAddr("127.0.0.1:0")}, opts...)...)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// startJob brings up world in-process ranks through Listen/Join and returns their sessions
// by rank; they are closed when the test ends.
func startJob(t *testing.T, world int, opts ...Option) []*Session {
	t.Helper()
	root := listenLocal(t, world, opts...)
	ss := make([]*Session, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := 1; r < world; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ss[r], errs[r] = Join(context.Background(), root.ID(), r, world, opts...)
		}()
	}
	ss[0], errs[0] = root.Accept(context.Background())
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() { closeAll(ss) })
	return ss
}

func closeAll(ss []*Session) {
	for _, s := range ss {
		if s != nil {
			s.Close()
		}
	}
}

// runRanks runs fn for every session concurrently and fails the test with every rank's
// error; a hang longer than limit fails it with all goroutine stacks.
func runRanks(t *testing.T, ss []*Session, limit time.Duration, fn func(s *Session) error) []error {
	t.Helper()
	errs := make([]error, len(ss))
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(s)
		}()
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("ranks still running after %v:\n%s", limit, buf[:n])
	}
	return errs
}

func requireNoErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// blobSize gives ragged sizes: in round 0 rank 0 sends nothing and rank 1 sends 1 MiB;
// otherwise sizes are pseudo-random up to 64 KiB, with a zero now and then.
func blobSize(rank, round int) int {
	switch {
	case round == 0 && rank == 0:
		return 0
	case round == 0 && rank == 1:
		return 1 << 20
	}
	r := rand.New(rand.NewPCG(uint64(rank), uint64(round)))
	if r.IntN(5) == 0 {
		return 0
	}
	return r.IntN(64 << 10)
}

// makeBlob is rank's contribution to round: every process can recompute anyone's.
func makeBlob(rank, round int) []byte {
	b := make([]byte, blobSize(rank, round))
	r := rand.New(rand.NewPCG(uint64(rank)<<32|uint64(round), 0x6d6b))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// checkGather verifies an all-gather result against independently regenerated blobs.
func checkGather(res [][]byte, world, round int) error {
	if len(res) != world {
		return fmt.Errorf("round %d: %d blobs, want %d", round, len(res), world)
	}
	for r := range world {
		if want := makeBlob(r, round); !bytes.Equal(res[r], want) {
			return fmt.Errorf("round %d: blob of rank %d differs (%d bytes, want %d)", round, r, len(res[r]), len(want))
		}
	}
	return nil
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func testSecret() []byte {
	s := make([]byte, SecretLen)
	for i := range s {
		s[i] = byte(i*7 + 1)
	}
	return s
}

func expectErr(t *testing.T, who string, err error, target error, substrs ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %v", who, target)
		return
	}
	if target != nil && !errors.Is(err, target) {
		t.Errorf("%s: error %q does not match %v", who, err, target)
	}
	for _, s := range substrs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: error %q does not contain %q", who, err, s)
		}
	}
}
