package plugin

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	hplugin "github.com/hashicorp/go-plugin"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/shm"
)

// Serve serves backend as a plugin and never returns. It is the whole main of a plugin
// binary. The process exits when its parent (the host) does.
func Serve(backend transport.Backend) {
	go watchParent()
	hplugin.Serve(&hplugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         hplugin.PluginSet{pluginName: &rpcPlugin{srv: &server{backend: backend}}},
		Logger:          hclog.New(&hclog.LoggerOptions{Name: "mkernel-net-plugin", Level: hclog.Warn, Output: os.Stderr}),
	})
}

func watchParent() {
	parent := os.Getppid()
	for range time.Tick(100 * time.Millisecond) {
		if os.Getppid() != parent {
			os.Exit(3)
		}
	}
}

// server is the plugin side: the real transport and the loop between it and the rings.
type server struct {
	backend transport.Backend
	mu      sync.Mutex
	t       transport.Transport
	seg     *shm.Segment
	r       rings
	regions []*shm.Segment
	failErr atomic.Pointer[error]
	stop    chan struct{}
	stopped chan struct{}
}

func (s *server) init(a InitArgs) (string, transport.Caps, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.t != nil {
		return "", transport.Caps{}, fmt.Errorf("%w: Init called twice", transport.ErrInvalid)
	}
	if a.RingBytes != segmentBytes() {
		return "", transport.Caps{}, fmt.Errorf("%w: host ring of %d bytes, plugin expects %d (mismatched builds)", transport.ErrProtocol, a.RingBytes, segmentBytes())
	}
	seg, err := shm.Open(a.RingPath, a.RingBytes)
	if err != nil {
		return "", transport.Caps{}, err
	}
	t, err := s.backend.Open(context.Background(), transport.Config{
		Rank: a.Rank, World: a.World, Node: a.Node, AllPeers: a.AllPeers, Key: a.Key, Placement: a.Placement,
		BindHost: a.BindHost, RouteTo: a.RouteTo, Timeout: time.Duration(a.TimeoutNS),
	})
	if err != nil {
		seg.Close()
		return "", transport.Caps{}, err
	}
	s.t, s.seg, s.r = t, seg, mapRings(seg.Bytes())
	return t.Name(), t.Caps(), nil
}

func (s *server) register(a RegisterArgs) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.t == nil {
		return fmt.Errorf("%w: Register before Init", transport.ErrInvalid)
	}
	if a.Len == 0 || a.Offset+a.Len < a.Offset || a.Offset+a.Len > 1<<46 {
		return fmt.Errorf("%w: region %d of %d bytes at %d", transport.ErrInvalid, a.ID, a.Len, a.Offset)
	}
	seg, err := shm.Open(a.Path, int(a.Offset+a.Len))
	if err != nil {
		return err
	}
	s.regions = append(s.regions, seg)
	b := seg.Bytes()[a.Offset : a.Offset+a.Len]
	return s.t.Register(a.ID, transport.Region{Bytes: b, File: seg.Shared(), FileOffset: a.Offset})
}

func (s *server) address() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.t == nil {
		return nil, fmt.Errorf("%w: Address before Init", transport.ErrInvalid)
	}
	return s.t.Address()
}

func (s *server) connect(a ConnectArgs) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.t == nil {
		return fmt.Errorf("%w: Connect before Init", transport.ErrInvalid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(a.TimeoutNS))
	defer cancel()
	if err := s.t.Connect(ctx, a.Blobs); err != nil {
		return err
	}
	s.stop, s.stopped = make(chan struct{}), make(chan struct{})
	go s.loop()
	return nil
}

func (s *server) failure() error {
	if e := s.failErr.Load(); e != nil {
		return *e
	}
	if s.t != nil {
		return s.t.Err()
	}
	return nil
}

func (s *server) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		close(s.stop)
		<-s.stopped
		s.stop = nil
	}
	var err error
	if s.t != nil {
		err = s.t.Close()
	}
	for _, r := range s.regions {
		r.Close()
	}
	s.regions = nil
	if s.seg != nil {
		s.seg.Close()
		s.seg = nil
	}
	return err
}

// loop moves submissions into the transport and completions out of it; like the proxy
// it spins while there is work and sleeps briefly when idle.
func (s *server) loop() {
	runtime.LockOSThread()
	defer close(s.stopped)
	c := s.r.ctrl
	ops := make([]transport.Op, 0, 256)
	comps := make([]transport.Completion, 256)
	idle := 0
	fail := func(err error) {
		s.failErr.CompareAndSwap(nil, &err)
		atomic.StoreUint32(&c.failed, 1)
	}
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		if atomic.LoadUint32(&c.closing) != 0 {
			return
		}
		progress := false
		// Submissions: take what fits, keep what the transport refused for next time.
		for head, tail := load(&c.subHead), load(&c.subTail); tail < head && len(ops) < cap(ops); tail++ {
			ops = append(ops, fromWire(&s.r.sub[tail%ringSlots]))
			store(&c.subTail, tail+1)
			progress = true
		}
		if len(ops) > 0 && atomic.LoadUint32(&c.failed) == 0 {
			n, err := s.t.Post(ops)
			if err != nil {
				fail(err)
			}
			ops = ops[:copy(ops, ops[n:])]
		}
		// Completions: only as many as the host has room for.
		room := ringSlots - int(load(&c.compHead)-load(&c.compTail))
		if room > 0 && atomic.LoadUint32(&c.failed) == 0 {
			n, err := s.t.Poll(comps[:min(room, len(comps))])
			if err != nil {
				fail(err)
			}
			h := load(&c.compHead)
			for i := range n {
				st := uint64(0)
				if comps[i].Err != nil {
					st = 1
					fail(comps[i].Err)
				}
				s.r.comp[(h+uint64(i))%ringSlots] = wireComp{Cookie: comps[i].Cookie, Status: st}
			}
			store(&c.compHead, h+uint64(n))
			progress = progress || n > 0
		}
		if progress {
			idle = 0
			continue
		}
		if idle++; idle > 2000 {
			time.Sleep(20 * time.Microsecond)
		} else if idle%64 == 0 {
			runtime.Gosched()
		}
	}
}
