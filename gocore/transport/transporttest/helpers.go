package transporttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/shm"
)

// LocalGroup is an in-process bootstrap for World ranks: Exchanger(r) is rank r's view.
type LocalGroup struct {
	world int
	mu    sync.Mutex
	cond  *sync.Cond
	round []int      // next collective number per rank
	blobs [][][]byte // blobs per collective number
	count []int
	dead  error
}

// NewLocalGroup makes a group of world ranks.
func NewLocalGroup(world int) *LocalGroup {
	g := &LocalGroup{world: world, round: make([]int, world)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// Exchanger returns rank r's endpoint.
func (g *LocalGroup) Exchanger(r int) transport.Exchanger { return &localEx{g: g, rank: r} }

// Fail makes every pending and later AllGather return err.
func (g *LocalGroup) Fail(err error) {
	g.mu.Lock()
	g.dead = err
	g.mu.Unlock()
	g.cond.Broadcast()
}

type localEx struct {
	g    *LocalGroup
	rank int
}

func (e *localEx) Rank() int  { return e.rank }
func (e *localEx) World() int { return e.g.world }

func (e *localEx) AllGather(ctx context.Context, blob []byte) ([][]byte, error) {
	g := e.g
	stop := context.AfterFunc(ctx, func() { g.cond.Broadcast() })
	defer stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.round[e.rank]
	g.round[e.rank]++
	for len(g.blobs) <= n {
		g.blobs = append(g.blobs, make([][]byte, g.world))
		g.count = append(g.count, 0)
	}
	g.blobs[n][e.rank] = append([]byte(nil), blob...)
	g.count[n]++
	g.cond.Broadcast()
	for g.count[n] < g.world {
		if g.dead != nil {
			return nil, g.dead
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("local all-gather %d: %w", n, err)
		}
		g.cond.Wait()
	}
	out := make([][]byte, g.world)
	for i, b := range g.blobs[n] {
		out[i] = append([]byte(nil), b...)
	}
	return out, nil
}

// OpenFunc opens one rank's endpoint of the backend under test.
type OpenFunc func(ctx context.Context, cfg transport.Config) (transport.Transport, error)

// Buffer IDs and sizes of the regions StartJob registers on every rank.
const (
	BufData  transport.BufferID = 1 // destination of writes
	BufSrc   transport.BufferID = 2 // source of writes
	BufFlags transport.BufferID = 3 // arrival flags, 8 bytes each

	FlagWords = 512
)

// Rank is one rank of a Job.
type Rank struct {
	T     transport.Transport
	Data  *shm.Segment
	Src   *shm.Segment
	Flags *shm.Segment
}

// Flag returns a pointer to flag word i of this rank.
func (r *Rank) Flag(i int) *uint64 { return (*uint64)(unsafe.Pointer(&r.Flags.Bytes()[8*i])) }

// Job is World connected ranks of one backend in this process.
type Job struct {
	Ranks []*Rank
	Group *LocalGroup
}

// JobOptions tunes StartJob.
type JobOptions struct {
	World    int
	DataSize int           // bytes of BufData and BufSrc per rank; default 4 MiB
	Timeout  time.Duration // transport.Config.Timeout; default 5 s
	// Config, when set, edits each rank's config before Open.
	Config func(cfg *transport.Config)
}

// TestKey is the job key the suite's ranks share.
var TestKey = []byte("transporttest job key 0123456789")

// TB is the part of testing.TB StartJob uses (benchmark programs implement it too).
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// StartJob opens, registers and connects World ranks (concurrently, as real ranks do) and
// registers their Close with t.Cleanup.
func StartJob(t TB, open OpenFunc, o JobOptions) *Job {
	t.Helper()
	if o.DataSize == 0 {
		o.DataSize = 4 << 20
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	j := &Job{Ranks: make([]*Rank, o.World), Group: NewLocalGroup(o.World)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, o.World)
	var wg sync.WaitGroup
	for r := range o.World {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rk, err := startRank(ctx, open, o, r, j.Group)
			j.Ranks[r] = rk
			errs[r] = err
			if err != nil {
				j.Group.Fail(fmt.Errorf("rank %d failed: %w", r, err))
			}
		}()
	}
	wg.Wait()
	t.Cleanup(j.Close)
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("start a job of %d ranks: %v", o.World, err)
	}
	return j
}

func startRank(ctx context.Context, open OpenFunc, o JobOptions, r int, g *LocalGroup) (*Rank, error) {
	cfg := transport.Config{Rank: r, World: o.World, AllPeers: true, Key: TestKey, Timeout: o.Timeout, BindHost: "127.0.0.1"}
	if o.Config != nil {
		o.Config(&cfg)
	}
	rk := &Rank{}
	var err error
	if rk.Data, err = shm.Create(fmt.Sprintf("data%d", r), o.DataSize); err != nil {
		return rk, err
	}
	if rk.Src, err = shm.Create(fmt.Sprintf("src%d", r), o.DataSize); err != nil {
		return rk, err
	}
	if rk.Flags, err = shm.Create(fmt.Sprintf("flags%d", r), 8*FlagWords); err != nil {
		return rk, err
	}
	if rk.T, err = open(ctx, cfg); err != nil {
		return rk, fmt.Errorf("open: %w", err)
	}
	for _, b := range []struct {
		id  transport.BufferID
		seg *shm.Segment
	}{{BufData, rk.Data}, {BufSrc, rk.Src}, {BufFlags, rk.Flags}} {
		if err := rk.T.Register(b.id, b.seg.Region()); err != nil {
			return rk, fmt.Errorf("register buffer %d: %w", b.id, err)
		}
	}
	if err := transport.Connect(ctx, rk.T, g.Exchanger(r)); err != nil {
		return rk, err
	}
	return rk, nil
}

// Close closes every rank's transport and memory.
func (j *Job) Close() {
	for _, rk := range j.Ranks {
		if rk == nil {
			continue
		}
		if rk.T != nil {
			_ = rk.T.Close()
		}
		for _, s := range []*shm.Segment{rk.Data, rk.Src, rk.Flags} {
			if s != nil {
				_ = s.Close()
			}
		}
	}
}

// Run posts ops on t and polls until each has completed or the deadline passes, from the
// calling goroutine (which must own t's data path). Other ranks keep progressing only if
// something polls them: use Drivers for that.
func RunOps(t transport.Transport, ops []transport.Op, timeout time.Duration) error {
	done := make([]transport.Completion, 64)
	deadline := time.Now().Add(timeout)
	posted, finished := 0, 0
	for finished < len(ops) {
		if posted < len(ops) {
			n, err := t.Post(ops[posted:])
			if err != nil {
				return fmt.Errorf("post op %d of %d: %w", posted, len(ops), err)
			}
			posted += n
		}
		n, err := t.Poll(done)
		if err != nil {
			return fmt.Errorf("poll (%d of %d ops finished): %w", finished, len(ops), err)
		}
		for _, c := range done[:n] {
			if c.Err != nil {
				return fmt.Errorf("op %d: %w", c.Cookie, c.Err)
			}
		}
		finished += n
		if n == 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d ops unfinished after %v (%d posted)", len(ops)-finished, len(ops), timeout, posted)
			}
			idle()
		}
	}
	return nil
}

// Driver owns one transport's data path in a goroutine: it posts what Do hands it and
// polls continuously (also when idle, for backends that progress only in Poll).
type Driver struct {
	t    transport.Transport
	reqs chan driverReq
	stop chan struct{}
	done chan struct{}
	err  atomic.Value
}

type driverReq struct {
	ops   []transport.Op
	reply chan error
}

// NewDriver starts a driver for t; Stop ends it.
func NewDriver(t transport.Transport) *Driver {
	d := &Driver{t: t, reqs: make(chan driverReq), stop: make(chan struct{}), done: make(chan struct{})}
	go d.loop()
	return d
}

func (d *Driver) loop() {
	defer close(d.done)
	comps := make([]transport.Completion, 64)
	for {
		select {
		case <-d.stop:
			return
		case r := <-d.reqs:
			r.reply <- RunOps(d.t, r.ops, 20*time.Second)
			continue
		default:
		}
		n, err := d.t.Poll(comps)
		if err != nil {
			d.err.Store(err)
			select {
			case <-d.stop:
				return
			case r := <-d.reqs:
				r.reply <- err
			}
			continue
		}
		if n == 0 {
			idle()
		}
	}
}

// Do runs ops on the driver's transport and waits for their completions.
func (d *Driver) Do(ops ...transport.Op) error {
	r := driverReq{ops: ops, reply: make(chan error, 1)}
	select {
	case d.reqs <- r:
	case <-d.done:
		return errors.New("driver stopped")
	}
	return <-r.reply
}

// Stop ends the driver and waits for it.
func (d *Driver) Stop() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	<-d.done
}

// Drivers starts a driver per rank of j, stopped at cleanup.
func (j *Job) Drivers(t testing.TB) []*Driver {
	ds := make([]*Driver, len(j.Ranks))
	for i, rk := range j.Ranks {
		ds[i] = NewDriver(rk.T)
	}
	t.Cleanup(func() {
		for _, d := range ds {
			d.Stop()
		}
	})
	return ds
}

// WaitFlag waits until the flag word holds at least want, with acquire loads.
func WaitFlag(flag *uint64, want uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for i := 0; ; i++ {
		if atomic.LoadUint64(flag) >= want {
			return nil
		}
		if i%1024 == 1023 {
			if time.Now().After(deadline) {
				return fmt.Errorf("flag holds %d after %v, want >= %d", atomic.LoadUint64(flag), timeout, want)
			}
			idle()
		}
	}
}

func idle() { time.Sleep(20 * time.Microsecond) }
