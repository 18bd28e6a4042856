package bootstrap

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// link is one authenticated connection (root side: to a rank; rank side: to the root). It
// owns two goroutines: a reader that hands every frame but pings to handle, and a writer
// that sends queued frames in order and a ping whenever the interval passes. Reads carry a
// deadline (silence longer than the heartbeat timeout kills the link), writes too.
//
// A link ends in one of three ways:
//   - it fails (read or write error, protocol violation): down is called once, from one of
//     its goroutines;
//   - finish: the writer sends the queued frames and a last one, closes its write side, and
//     the reader discards input until the other side closes (bounded by lingerTimeout);
//     down is not called;
//   - kill: the socket is closed at once.
//
// dead is closed once both goroutines have returned.
type link struct {
	conn   net.Conn
	limit  limitFunc
	handle func(t msgType, payload []byte) error // runs on the reader; must not block
	down   func(err error)                       // runs on the reader or the writer; must not block
	hb     time.Duration                         // ping interval, 0: none
	idle   time.Duration                         // read/write deadline, 0: none

	out     chan *frame
	killed  chan struct{}
	rdone   chan struct{}
	dead    chan struct{}
	running atomic.Int32
	closing atomic.Bool

	finishOnce, killOnce, downOnce sync.Once
	cause                          atomic.Pointer[error] // why kill was called, reported instead of the socket error

	dlMu     sync.Mutex
	draining bool
	lingerAt time.Time
}

// linkQueue bounds the frames waiting to be sent. Collectives are serialized, so a link
// holds at most a welcome, a ready, one result and a last frame; more means a bug or a
// peer that stopped reading, and kills the link.
const linkQueue = 16

func newLink(conn net.Conn, hb, idle time.Duration, limit limitFunc,
	handle func(msgType, []byte) error, down func(error)) *link {
	return &link{
		conn:   conn,
		limit:  limit,
		handle: handle,
		down:   down,
		hb:     hb,
		idle:   idle,
		out:    make(chan *frame, linkQueue),
		killed: make(chan struct{}),
		rdone:  make(chan struct{}),
		dead:   make(chan struct{}),
	}
}

func (l *link) start() {
	l.running.Store(2)
	go l.readLoop()
	go l.writeLoop()
}

// send queues f; it never blocks. It reports false if the link is closing or broken.
func (l *link) send(f *frame) bool {
	if l.closing.Load() {
		return false
	}
	select {
	case l.out <- f:
		return true
	default:
		l.killWith(errQueueFull)
		return false
	}
}

var errQueueFull = &sessionError{kind: kindProtocol, msg: "send queue overflow (peer not reading?)"}

// finish queues f (nil: nothing) as the last frame, then closes the link gracefully.
func (l *link) finish(f *frame) {
	l.finishOnce.Do(func() {
		l.closing.Store(true)
		last := &frame{last: true}
		if f != nil {
			*last = *f
			last.last = true
		}
		select {
		case l.out <- last:
		default:
			l.kill()
		}
	})
}

func (l *link) kill() {
	l.killOnce.Do(func() {
		close(l.killed)
		l.conn.Close()
	})
}

func (l *link) killWith(err error) {
	l.cause.CompareAndSwap(nil, &err)
	l.kill()
}

func (l *link) exit() {
	if l.running.Add(-1) == 0 {
		close(l.dead)
	}
}

// lost ends the link after an I/O or protocol error and reports it, unless the link was
// being closed on purpose.
func (l *link) lost(err error) {
	// Record the cause before closing: closing makes the other loop fail too ("use of
	// closed network connection"), and that echo must not replace the real reason.
	l.cause.CompareAndSwap(nil, &err)
	l.conn.Close()
	if l.closing.Load() {
		return
	}
	l.downOnce.Do(func() { l.down(*l.cause.Load()) })
}

func (l *link) readLoop() {
	defer l.exit()
	defer close(l.rdone)
	for {
		t, p, err := readFrame(l.conn, l.refreshRead, l.limit)
		if err != nil {
			l.lost(err)
			return
		}
		if t == msgPing || l.closing.Load() {
			continue
		}
		if err := l.handle(t, p); err != nil {
			l.lost(err)
			return
		}
	}
}

func (l *link) writeLoop() {
	defer l.exit()
	var tick <-chan time.Time
	if l.hb > 0 {
		t := time.NewTicker(l.hb)
		defer t.Stop()
		tick = t.C
	}
	for {
		f := pingFrame
		select {
		case f = <-l.out:
		case <-tick:
		case <-l.rdone:
			return
		case <-l.killed:
			return
		}
		if err := writeFrame(l.conn, f, l.refreshWrite); err != nil {
			l.lost(err)
			return
		}
		if f.last {
			l.drain()
			return
		}
	}
}

// drain closes the write side after the last frame and lets the reader discard what is
// still coming until the other side closes too. Closing both sides at once would make
// the kernel answer unread input with a reset, which can destroy our last frame before
// the other side reads it.
func (l *link) drain() {
	l.dlMu.Lock()
	l.draining = true
	l.lingerAt = time.Now().Add(lingerTimeout)
	l.conn.SetReadDeadline(l.lingerAt)
	l.dlMu.Unlock()
	if tc, ok := l.conn.(interface{ CloseWrite() error }); ok && tc.CloseWrite() == nil {
		return
	}
	l.conn.Close()
}

func (l *link) refreshRead() {
	l.dlMu.Lock()
	defer l.dlMu.Unlock()
	switch {
	case l.draining:
		l.conn.SetReadDeadline(l.lingerAt)
	case l.idle > 0:
		l.conn.SetReadDeadline(time.Now().Add(l.idle))
	}
}

func (l *link) refreshWrite() {
	switch {
	case l.closing.Load():
		l.conn.SetWriteDeadline(time.Now().Add(lingerTimeout))
	case l.idle > 0:
		l.conn.SetWriteDeadline(time.Now().Add(l.idle))
	}
}

// waitLinks waits until every link is dead; links still alive after timeout are killed.
func waitLinks(links []*link, timeout time.Duration) (killed int) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for i, l := range links {
		select {
		case <-l.dead:
			continue
		case <-t.C:
		}
		for _, m := range links[i:] {
			select {
			case <-m.dead:
			default:
				m.kill()
				killed++
			}
		}
		for _, m := range links[i:] {
			<-m.dead
		}
		return killed
	}
	return 0
}
