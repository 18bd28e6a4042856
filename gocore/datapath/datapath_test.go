package datapath_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/bootstrap"
	"github.com/mkernel/mkernel/gocore/datapath"
	"github.com/mkernel/mkernel/gocore/fifo"
	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/loopback"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

const childEnv = "MKERNEL_DATAPATH_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// localSession is an in-process Session over a LocalGroup.
type localSession struct{ transport.Exchanger }

func (localSession) DeriveKey(string) []byte { return transporttest.TestKey }
func (localSession) RootAddr() string        { return "127.0.0.1:1" }

const (
	bufData = 1
	bufSrc  = 2
	size    = 1 << 20
)

func openAll(t *testing.T, world int, net string, node []int) []*datapath.Datapath {
	t.Helper()
	return openGroup(t, world, func(int) datapath.Config {
		return datapath.Config{
			Buffers: []datapath.Buffer{{ID: bufData, Bytes: size}, {ID: bufSrc, Bytes: size}},
			Node:    node, Net: transport.Selection{Name: net}, Timeout: 5 * time.Second, BindHost: "127.0.0.1",
		}
	})
}

// openGroup opens one datapath per rank of a local group at once (each Open waits for its
// peers), with rank r's configuration from cfg(r); every datapath is closed at the end of tb.
func openGroup(tb testing.TB, world int, cfg func(r int) datapath.Config) []*datapath.Datapath {
	tb.Helper()
	g := transporttest.NewLocalGroup(world)
	dps := make([]*datapath.Datapath, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dps[r], errs[r] = datapath.Open(context.Background(), localSession{g.Exchanger(r)}, cfg(r))
			if errs[r] != nil {
				g.Fail(errs[r])
			}
		}()
	}
	wg.Wait()
	for _, dp := range dps {
		if dp != nil {
			tb.Cleanup(func() { dp.Close() })
		}
	}
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	return dps
}

// TestEmulatedNodes: 4 ranks in 2 emulated nodes; each rank writes to the ranks of the
// other node only (ranks of one node are not connected).
func TestEmulatedNodes(t *testing.T) {
	for _, net := range []string{"loopback", "tcp"} {
		t.Run(net, func(t *testing.T) {
			node := []int{0, 0, 1, 1}
			dps := openAll(t, 4, net, node)
			for r, dp := range dps {
				src := dp.Buffer(bufSrc)
				for i := range src {
					src[i] = byte(i + r)
				}
				for p := range 4 {
					if node[p] == node[r] {
						continue
					}
					ring := dp.Ring()
					if _, err := ring.Push(&fifo.Cmd{Kind: fifo.KindWriteSignal, Peer: uint16(p), LocalBuf: bufSrc, RemoteBuf: bufData,
						RemoteOff: uint64(r * 1000), Bytes: 999, ArrivalSlot: uint32(r), ArrivalSeq: 1}, time.Second); err != nil {
						t.Fatal(err)
					}
				}
			}
			for r, dp := range dps {
				for p := range 4 {
					if node[p] == node[r] {
						continue
					}
					if err := fifo.WaitFlag(dp.Flag(p), 1, 10*time.Second); err != nil {
						t.Fatalf("rank %d from %d: %v", r, p, err)
					}
					if got, want := dp.Buffer(bufData)[p*1000:p*1000+999], dps[p].Buffer(bufSrc)[:999]; !bytes.Equal(got, want) {
						t.Errorf("rank %d: data from rank %d differs", r, p)
					}
				}
				// Same node: not connected, so a command to it is a malformed command.
				if st := dp.Stats(); st.Err != "" {
					t.Errorf("rank %d: %s", r, st.Err)
				}
			}
			if _, err := dps[0].Ring().Push(&fifo.Cmd{Kind: fifo.KindWrite, Peer: 1, LocalBuf: bufSrc, RemoteBuf: bufData, Bytes: 8}, time.Second); err != nil {
				t.Fatal(err)
			}
			select {
			case <-dps[0].Done():
				if err := dps[0].Err(); err == nil || !strings.Contains(err.Error(), "rank 1") {
					t.Errorf("write to an unconnected same-node rank: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("a write to an unconnected rank did not fail the proxy")
			}
		})
	}
}

func TestInvalidBuffers(t *testing.T) {
	g := transporttest.NewLocalGroup(1)
	for _, bufs := range [][]datapath.Buffer{{{ID: 0, Bytes: 10}}, {{ID: 1, Bytes: 0}}, {{ID: 1, Bytes: 8}, {ID: 1, Bytes: 8}}} {
		if dp, err := datapath.Open(context.Background(), localSession{g.Exchanger(0)}, datapath.Config{Buffers: bufs}); !errors.Is(err, transport.ErrInvalid) {
			if dp != nil {
				dp.Close()
			}
			t.Errorf("buffers %v: %v", bufs, err)
		}
	}
}

// ---- a peer process killed mid-transfer ----

// childMain is one rank of TestPeerKilled: it joins the job, then passes data around the
// ring of ranks until its data path fails, and prints why.
func childMain() int {
	cfg, err := bootstrap.ConfigFromEnv()
	if err != nil {
		fmt.Println("FAILED:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess, err := bootstrap.New(ctx, cfg, bootstrap.WithTimeout(20*time.Second))
	if err != nil {
		fmt.Println("FAILED:", err)
		return 2
	}
	defer sess.Close()
	dp, err := datapath.Open(ctx, sess, datapath.Config{
		Buffers:  []datapath.Buffer{{ID: bufData, Bytes: size}, {ID: bufSrc, Bytes: size}},
		AllPeers: true, Net: transport.Selection{Name: os.Getenv("TEST_NET")}, Timeout: 3 * time.Second,
	})
	if err != nil {
		fmt.Println("FAILED:", err)
		return 2
	}
	defer dp.Close()
	r, w := sess.Rank(), sess.World()
	next, prev := (r+1)%w, (r+w-1)%w
	for round := uint64(1); ; round++ {
		for k := range 8 {
			cmd := fifo.Cmd{Kind: fifo.KindWrite, Peer: uint16(next), LocalBuf: bufSrc, RemoteBuf: bufData,
				LocalOff: uint64(k) << 17, RemoteOff: uint64(k) << 17, Bytes: 1 << 17}
			if k == 7 {
				cmd.Kind, cmd.ArrivalSlot, cmd.ArrivalSeq = fifo.KindWriteSignal, 1, round
			}
			if _, err := dp.Ring().Push(&cmd, 10*time.Second); err != nil {
				fmt.Println("FAILED:", dp.Err(), err)
				return 3
			}
		}
		for atomicLoad(dp.Flag(1)) < round {
			select {
			case <-dp.Done():
				fmt.Println("FAILED:", dp.Err())
				return 3
			case <-time.After(50 * time.Microsecond):
			}
		}
		if round == 3 {
			fmt.Println("READY", prev)
		}
	}
}

func atomicLoad(p *uint64) uint64 { return fifoLoad(p) }

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestPeerKilled(t *testing.T) {
	for _, netName := range []string{"tcp", "loopback"} {
		t.Run(netName, func(t *testing.T) {
			const world, victim = 3, 1
			port := freePort(t)
			secret := hex.EncodeToString([]byte("peer-killed test secret 32 bytes"))
			cmds := make([]*exec.Cmd, world)
			outs := make([]*bytes.Buffer, world)
			ready := make(chan int, world)
			var mu sync.Mutex
			for r := range world {
				c := exec.Command(os.Args[0], "-test.run=^$")
				c.Env = append(os.Environ(), childEnv+"=1", "TEST_NET="+netName,
					"MKERNEL_RANK="+strconv.Itoa(r), "MKERNEL_WORLD_SIZE="+strconv.Itoa(world),
					"MKERNEL_BOOTSTRAP_ADDR=127.0.0.1:"+strconv.Itoa(port), "MKERNEL_JOB_SECRET="+secret)
				c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no orphans if the test dies
				stdout, err := c.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				outs[r] = &bytes.Buffer{}
				c.Stderr = &lockedWriter{mu: &mu, b: outs[r]}
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[r] = c
				go func() {
					sc := bufio.NewScanner(stdout)
					for sc.Scan() {
						mu.Lock()
						outs[r].WriteString(sc.Text() + "\n")
						mu.Unlock()
						if strings.HasPrefix(sc.Text(), "READY") {
							ready <- r
						}
					}
				}()
			}
			t.Cleanup(func() {
				for _, c := range cmds {
					c.Process.Kill()
				}
			})
			for range world {
				select {
				case <-ready:
				case <-time.After(30 * time.Second):
					mu.Lock()
					defer mu.Unlock()
					t.Fatalf("ranks did not start: %q %q %q", outs[0], outs[1], outs[2])
				}
			}
			// Mid-transfer: every rank is streaming 1 MiB rounds around the ring.
			if err := cmds[victim].Process.Kill(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			for r, c := range cmds {
				done := make(chan error, 1)
				go func() { done <- c.Wait() }()
				select {
				case err := <-done:
					if r == victim {
						continue
					}
					mu.Lock()
					out := outs[r].String()
					mu.Unlock()
					var ee *exec.ExitError
					if !errors.As(err, &ee) || ee.ExitCode() != 3 {
						t.Errorf("rank %d: exit %v, want 3\n%s", r, err, out)
					}
					if !strings.Contains(out, "FAILED") || !strings.Contains(out, "rank "+strconv.Itoa(victim)) {
						t.Errorf("rank %d's failure does not name rank %d:\n%s", r, victim, out)
					}
					for _, line := range strings.Split(out, "\n") {
						if strings.HasPrefix(line, "FAILED") {
							t.Logf("rank %d: %s", r, line)
						}
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("rank %d still running 20 s after rank %d was killed (hang)", r, victim)
				}
			}
			t.Logf("%s: survivors failed within %v", netName, time.Since(start))
		})
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestDeviceBufferFallsBackToStaging: GPU memory offered to a transport that cannot
// register it (tcp, loopback) becomes host staging of the same size on every rank, data
// moves through it, and the FIFO keeps the requested clock domain.
func TestDeviceBufferFallsBackToStaging(t *testing.T) {
	for _, net := range []string{"loopback", "tcp"} {
		t.Run(net, func(t *testing.T) {
			dps := openGroup(t, 2, func(int) datapath.Config {
				return datapath.Config{
					Buffers: []datapath.Buffer{{ID: bufSrc, Bytes: 4096}},
					Device: []datapath.DeviceBuffer{{ID: 7, Region: transport.DeviceRegion{
						GPU: 0, Ptr: 0xdead0000, Len: 1 << 16, DMABufFD: -1}}},
					Clock: fifo.ClockGlobaltimer,
					Node:  []int{0, 1}, Net: transport.Selection{Name: net}, Timeout: 5 * time.Second, BindHost: "127.0.0.1",
				}
			})
			for r, dp := range dps {
				kind, host, _, ok := dp.BufferInfo(7)
				if !ok || kind != datapath.BufferHost || len(host) != 1<<16 {
					t.Fatalf("rank %d: buffer 7 is kind %d with %d host bytes (ok %v), want host staging of 65536", r, kind, len(host), ok)
				}
				if dp.Ring().Clock() != fifo.ClockGlobaltimer {
					t.Fatalf("rank %d: FIFO clock %d", r, dp.Ring().Clock())
				}
			}
			copy(dps[0].Buffer(7)[100:], "staged bytes")
			if _, err := dps[0].Ring().Push(&fifo.Cmd{Kind: fifo.KindWriteSignal, Peer: 1, LocalBuf: 7, LocalOff: 100, RemoteBuf: 7,
				RemoteOff: 200, Bytes: 12, ArrivalSlot: 0, ArrivalSeq: 1}, time.Second); err != nil {
				t.Fatal(err)
			}
			if err := fifo.WaitFlag(dps[1].Flag(0), 1, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if got := string(dps[1].Buffer(7)[200:212]); got != "staged bytes" {
				t.Fatalf("rank 1 got %q", got)
			}
		})
	}
}

// TestEmulatedNodesLL: the same exchange through LL-format FIFOs, the default (EnvFIFOLL
// unset) and MKERNEL_FIFO_LL=1.
func TestEmulatedNodesLL(t *testing.T) {
	for _, v := range []string{"", "1"} {
		t.Setenv(datapath.EnvFIFOLL, v)
		if f := openAll(t, 2, "loopback", []int{0, 1})[0].Ring().Format(); f != fifo.FormatLL {
			t.Fatalf("%s=%q opened a %v FIFO", datapath.EnvFIFOLL, v, f)
		}
	}
	TestEmulatedNodes(t)
}

// TestEmulatedNodesSeq: the opt-out, MKERNEL_FIFO_LL=0, opens seq-word FIFOs that move the
// same data.
func TestEmulatedNodesSeq(t *testing.T) {
	t.Setenv(datapath.EnvFIFOLL, "0")
	if f := openAll(t, 2, "loopback", []int{0, 1})[0].Ring().Format(); f != fifo.FormatSeq {
		t.Fatalf("%s=0 opened a %v FIFO", datapath.EnvFIFOLL, f)
	}
	TestEmulatedNodes(t)
}

// recordCopier is a device copier that records its copies and finishes them at once.
type recordCopier struct {
	mu    sync.Mutex
	calls []string
}

func (c *recordCopier) Start(peer int, local transport.BufferID, localOff uint64, remote transport.BufferID, remoteOff, n uint64) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, fmt.Sprintf("to %d: %d+%d -> %d+%d, %d bytes", peer, local, localOff, remote, remoteOff, n))
	return uint64(len(c.calls) - 1), nil
}

func (c *recordCopier) Done(uint64) (bool, error) { return true, nil }

// TestDeviceBufferGPUDirect: with the loopback GPU-direct emulation (MKERNEL_NET_GDR=1) an
// offered GPU buffer stays GPU memory (BufferInfo says so, no host staging), a write from it
// is moved by the caller's device copier (and its signal placed after), and host buffers work
// beside it. Without a device copier the GPU buffers are refused, naming the cause.
func TestDeviceBufferGPUDirect(t *testing.T) {
	t.Setenv(loopback.EnvGPUDirect, "1")
	copiers := []*recordCopier{{}, {}}
	dps := openGroup(t, 2, func(r int) datapath.Config {
		return datapath.Config{
			DeviceCopy: copiers[r],
			Buffers:    []datapath.Buffer{{ID: bufSrc, Bytes: 4096}, {ID: bufData, Bytes: 4096}},
			Device: []datapath.DeviceBuffer{{ID: 7, Region: transport.DeviceRegion{
				GPU: 0, Ptr: 0xdead0000, Len: 1 << 16, DMABufFD: -1}}},
			Clock: fifo.ClockGlobaltimer,
			Node:  []int{0, 1}, Net: transport.Selection{Name: "loopback"}, Timeout: 5 * time.Second, BindHost: "127.0.0.1",
		}
	})
	for r, dp := range dps {
		kind, host, dev, ok := dp.BufferInfo(7)
		if !ok || kind != datapath.BufferDevice || host != nil || dev.Len != 1<<16 {
			t.Fatalf("rank %d: buffer 7 is kind %d (%d host bytes, device %+v, ok %v), want the GPU region", r, kind, len(host), dev, ok)
		}
	}
	if _, err := dps[0].Ring().Push(&fifo.Cmd{Kind: fifo.KindWriteSignal, Peer: 1, LocalBuf: 7, LocalOff: 4096, RemoteBuf: 7,
		RemoteOff: 8192, Bytes: 1 << 15, ArrivalSlot: 0, ArrivalSeq: 1}, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := fifo.WaitFlag(dps[1].Flag(0), 1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	copiers[0].mu.Lock()
	if got := strings.Join(copiers[0].calls, "; "); got != "to 1: 7+4096 -> 7+8192, 32768 bytes" {
		t.Errorf("rank 0's device copies: %q", got)
	}
	copiers[0].mu.Unlock()
	copy(dps[0].Buffer(bufSrc), "host bytes")
	if _, err := dps[0].Ring().Push(&fifo.Cmd{Kind: fifo.KindWriteSignal, Peer: 1, LocalBuf: bufSrc, RemoteBuf: bufData,
		Bytes: 10, ArrivalSlot: 1, ArrivalSeq: 1}, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := fifo.WaitFlag(dps[1].Flag(1), 1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := string(dps[1].Buffer(bufData)[:10]); got != "host bytes" {
		t.Fatalf("rank 1 got %q", got)
	}
	// A GPU-direct write into a host buffer is a malformed op: the proxy fails, naming the peer.
	if _, err := dps[0].Ring().Push(&fifo.Cmd{Kind: fifo.KindWrite, Peer: 1, LocalBuf: 7, RemoteBuf: bufData, Bytes: 8}, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dps[0].Done():
		if err := dps[0].Err(); err == nil || !strings.Contains(err.Error(), "not a GPU buffer") {
			t.Errorf("GPU -> host write: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("a GPU -> host write did not fail the proxy")
	}
}

// TestDeviceBufferGPUDirectNeedsCopier: MKERNEL_NET_GDR=1 with GPU buffers but no device copier
// (a caller built before the C ABI v3) fails at open, naming the cause, on every rank: never a
// path whose writes move no data.
func TestDeviceBufferGPUDirectNeedsCopier(t *testing.T) {
	t.Setenv(loopback.EnvGPUDirect, "1")
	g := transporttest.NewLocalGroup(2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dp, err := datapath.Open(context.Background(), localSession{g.Exchanger(r)}, datapath.Config{
				Device: []datapath.DeviceBuffer{{ID: 7, Region: transport.DeviceRegion{GPU: 0, Ptr: 0xdead0000, Len: 1 << 16, DMABufFD: -1}}},
				Clock:  fifo.ClockGlobaltimer, Node: []int{0, 1}, Net: transport.Selection{Name: "loopback"},
				Timeout: 2 * time.Second, BindHost: "127.0.0.1",
			})
			if err != nil {
				g.Fail(err)
			} else {
				dp.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, transport.ErrNotSupported) || !strings.Contains(err.Error(), "device copier") {
			t.Errorf("rank %d: Open = %v, want ErrNotSupported naming the device copier", r, err)
		}
	}
}
