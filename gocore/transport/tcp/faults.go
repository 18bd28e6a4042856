package tcp

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"
)

// faultState is WithFaults' receiver: it holds frames for a random delay and applies due
// frames in random order, acknowledging only the contiguous prefix applied. Test-only, so
// it allocates freely.
type faultState struct {
	p        *peer
	rng      *rand.Rand
	maxDelay time.Duration
	in       chan staged
	quit     chan struct{}
	once     sync.Once
	next     uint64
}

type staged struct {
	seq   uint64
	dst   []byte
	data  []byte
	flag  *uint64
	value uint64
	due   time.Time
}

func newFaultState(p *peer, seed uint64, maxDelay time.Duration) *faultState {
	return &faultState{p: p, rng: rand.New(rand.NewPCG(seed, 99)), maxDelay: maxDelay,
		in: make(chan staged, 256), quit: make(chan struct{})}
}

// stage reads the frame's payload into a private copy and hands it to the applier.
func (f *faultState) stage(dst []byte, flag *uint64, value uint64) error {
	data := make([]byte, len(dst))
	if _, err := io.ReadFull(f.p.br, data); err != nil {
		return fmt.Errorf("payload of %d bytes: %w", len(dst), err)
	}
	seq := f.next // only the reader goroutine stages
	f.next++
	select {
	case f.in <- staged{seq: seq, dst: dst, data: data, flag: flag, value: value}:
	case <-f.quit:
	}
	return nil
}

func (f *faultState) stop() { f.once.Do(func() { close(f.quit) }) }

func (f *faultState) applyLoop() {
	defer f.p.t.wg.Done()
	var held []staged
	done := map[uint64]bool{}
	var prefix uint64
	for {
		select {
		case s := <-f.in:
			held = append(held, f.delay(s))
			continue
		case <-f.quit:
			return
		default:
		}
		now := time.Now()
		var due []int
		for i, s := range held {
			if !s.due.After(now) {
				due = append(due, i)
			}
		}
		if len(due) == 0 {
			select {
			case s := <-f.in:
				held = append(held, f.delay(s))
			case <-f.quit:
				return
			case <-time.After(50 * time.Microsecond):
			}
			continue
		}
		i := due[f.rng.IntN(len(due))]
		s := held[i]
		held = append(held[:i], held[i+1:]...)
		copy(s.dst, s.data)
		if s.flag != nil {
			storeMax(s.flag, s.value)
		}
		done[s.seq] = true
		for done[prefix] {
			delete(done, prefix)
			prefix++
		}
		f.p.applied.Store(prefix)
		f.p.wakeWriter()
	}
}

// delay gives a staged frame its due time (in the applier: the rng is its own).
func (f *faultState) delay(s staged) staged {
	s.due = time.Now()
	if f.maxDelay > 0 {
		s.due = s.due.Add(time.Duration(f.rng.Int64N(int64(f.maxDelay))))
	}
	return s
}
