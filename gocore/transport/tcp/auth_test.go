package tcp_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/tcp"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

func openPair(t *testing.T, keyB []byte) (a, b *tcp.Transport) {
	t.Helper()
	ctx := context.Background()
	cfg := transport.Config{World: 2, Key: transporttest.TestKey, BindHost: "127.0.0.1", Timeout: time.Second}
	var err error
	if a, err = tcp.Open(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	cfg.Rank, cfg.Key = 1, keyB
	if b, err = tcp.Open(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b
}

func connectPair(a, b *tcp.Transport) (errA, errB error) {
	ba, _ := a.Address()
	bb, _ := b.Address()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); errA = a.Connect(context.Background(), [][]byte{ba, bb}) }()
	go func() { defer wg.Done(); errB = b.Connect(context.Background(), [][]byte{ba, bb}) }()
	wg.Wait()
	return errA, errB
}

// hello builds the dialer's first message as rank `from` of `world` to rank `to`.
func hello(world, from, to uint32) []byte {
	b := make([]byte, 40)
	binary.LittleEndian.PutUint32(b[0:], 0x43544b4d)
	binary.LittleEndian.PutUint32(b[4:], 1)
	binary.LittleEndian.PutUint32(b[8:], world)
	binary.LittleEndian.PutUint32(b[12:], from)
	binary.LittleEndian.PutUint32(b[16:], to)
	return b
}

// TestRejectsStrangers sends the acceptor (rank 1) garbage, foreign hellos and a hello
// without the key before the real rank 0 connects: all are dropped, the job connects.
func TestRejectsStrangers(t *testing.T) {
	a, b := openPair(t, transporttest.TestKey)
	addr := b.ListenAddr().String()
	attempts := map[string][]byte{
		"garbage":       []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
		"wrong world":   hello(3, 0, 1),
		"wrong target":  hello(2, 0, 0),
		"higher rank":   hello(2, 5, 1),
		"no proof":      hello(2, 0, 1),
		"forged proof":  append(hello(2, 0, 1), make([]byte, 32)...),
		"empty":         nil,
		"wrong version": func() []byte { h := hello(2, 0, 1); h[4] = 9; return h }(),
	}
	var wg sync.WaitGroup
	closed := make(chan string, len(attempts))
	for name, msg := range attempts {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			if msg != nil {
				c.Write(msg)
			}
			if name == "empty" {
				c.(*net.TCPConn).CloseWrite()
			}
			if name == "forged proof" {
				// read the acceptor's reply first, then the refusal
				io.ReadFull(c, make([]byte, 48))
			}
			c.SetReadDeadline(time.Now().Add(15 * time.Second))
			buf := make([]byte, 64)
			for {
				n, err := c.Read(buf)
				if n > 0 && name != "no proof" && name != "forged proof" {
					closed <- name + ": got a reply"
					return
				}
				if err != nil {
					if errors.Is(err, io.EOF) || strings.Contains(err.Error(), "reset") {
						closed <- ""
					} else {
						closed <- name + ": " + err.Error()
					}
					return
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	errA, errB := connectPair(a, b)
	if errA != nil || errB != nil {
		t.Fatalf("the real ranks did not connect: %v / %v", errA, errB)
	}
	wg.Wait()
	close(closed)
	for msg := range closed {
		if msg != "" {
			t.Error(msg)
		}
	}
	if got := b.Rejected(); got < int64(len(attempts))-1 { // "no proof" may still be waiting when Connect ends
		t.Errorf("%d connections rejected, want at least %d", got, len(attempts)-1)
	}
	// The port is released once connected.
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("the listener still accepts after Connect")
	}
}

func TestWrongKeyFails(t *testing.T) {
	a, b := openPair(t, []byte("another job's key, 32 bytes long"))
	errA, errB := connectPair(a, b)
	if errA == nil || errB == nil {
		t.Fatalf("ranks with different keys connected: %v / %v", errA, errB)
	}
	if !errors.Is(errA, transport.ErrAuth) {
		t.Errorf("the dialer's error %v does not match ErrAuth", errA)
	}
	if !errors.Is(errB, transport.ErrTimeout) || !strings.Contains(errB.Error(), "ranks [0]") || !strings.Contains(errB.Error(), "1 rejected") {
		t.Errorf("the acceptor's error %q should be a timeout naming rank 0 and one rejection", errB)
	}
}

func TestBindsOnlyTheChosenAddress(t *testing.T) {
	ctx := context.Background()
	cfg := transport.Config{World: 2, Key: transporttest.TestKey}
	for _, host := range []string{"0.0.0.0", "::", "no-such-interface0"} {
		cfg.BindHost = host
		if tr, err := tcp.Open(ctx, cfg); err == nil {
			tr.Close()
			t.Errorf("BindHost %q accepted", host)
		} else if !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("BindHost %q: %v, want ErrInvalid", host, err)
		}
	}
	for host, want := range map[string]string{"": "127.0.0.1", "lo": "127.0.0.1", "127.0.0.1": "127.0.0.1"} {
		cfg.BindHost = host
		tr, err := tcp.Open(ctx, cfg)
		if err != nil {
			t.Fatalf("BindHost %q: %v", host, err)
		}
		if got := tr.ListenAddr().(*net.TCPAddr).IP.String(); got != want {
			t.Errorf("BindHost %q listens on %s, want %s", host, got, want)
		}
		tr.Close()
	}
	cfg.BindHost, cfg.RouteTo = "", "127.0.0.1:29500"
	tr, err := tcp.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if got := tr.ListenAddr().(*net.TCPAddr).IP.String(); got != "127.0.0.1" {
		t.Errorf("route to loopback listens on %s", got)
	}
	cfg.Key = []byte("short")
	if _, err := tcp.Open(ctx, cfg); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("a 5-byte key: %v, want ErrInvalid", err)
	}
}
