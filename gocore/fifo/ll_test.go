package fifo

import (
	"errors"
	"math/rand"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// llCmd is a command whose every payload word depends on the ticket (and uses both halves
// of the 64-bit fields), so a mix of two tickets' words never decodes to either.
func llCmd(ticket uint64) Cmd {
	return Cmd{
		Kind: KindWriteSignal, Flags: uint8(ticket), Peer: uint16(ticket*7 + 1), ArrivalSlot: uint32(ticket*3 + 5),
		LocalBuf: uint32(ticket + 2), RemoteBuf: uint32(ticket + 3),
		LocalOff: ticket<<33 | ticket*11, RemoteOff: ticket<<34 | ticket*13, Bytes: ticket<<35 | ticket*17,
		ArrivalSeq: ticket<<36 | ticket*19, EnqueueNS: ticket<<37 | ticket*23,
	}
}

// llWords is what a producer stores for ticket's entry.
func llWords(ticket uint64) [LLWords]uint64 {
	var p [LLWords]uint32
	c := llCmd(ticket)
	llPayload(&c, &p)
	var w [LLWords]uint64
	for i := range w {
		w[i] = uint64(llTag(ticket))<<32 | uint64(p[i])
	}
	return w
}

func wantLL(t *testing.T, got *Cmd, ticket uint64) {
	t.Helper()
	want := llCmd(ticket)
	want.Seq = ticket + 1
	if got == nil || *got != want {
		t.Fatalf("ticket %d decoded as %+v, want %+v", ticket, got, want)
	}
}

func TestLLLayout(t *testing.T) {
	r := newRingFormat(t, 8, FormatLL)
	if r.Format() != FormatLL || r.Capacity() != 8 || len(r.Memory()) < BytesFormat(8, FormatLL) ||
		BytesFormat(8, FormatLL) != 5*LineBytes+8*LLEntryBytes || r.Ctrl().CmdBytes != LLEntryBytes {
		t.Fatalf("LL ring: format %v capacity %d cmd_bytes %d", r.Format(), r.Capacity(), r.Ctrl().CmdBytes)
	}
	a, err := Attach(r.Memory())
	if err != nil || a.Format() != FormatLL || a.Capacity() != 8 {
		t.Fatalf("attach: %v", err)
	}
	if _, err := Attach(r.Memory()[:BytesFormat(8, FormatSeq)]); !errors.Is(err, ErrLayout) {
		t.Errorf("attach to an LL FIFO cut to the SEQ size: %v", err)
	}
	r.Ctrl().Format = 7
	if _, err := Attach(r.Memory()); !errors.Is(err, ErrLayout) {
		t.Errorf("attach with an unknown format: %v", err)
	}
}

// TestLLPartialEntryNeverPublished is the torn-read check: an entry with ANY word not yet
// written (still zero, or still the previous lap's) is not a command, whichever words did
// land. It covers every "all words but k" state for each k (so dropping the tag check of
// any single word fails it), and random prefixes of random store orders.
func TestLLPartialEntryNeverPublished(t *testing.T) {
	const capacity = 4
	for _, lap := range []uint64{0, 1, 1 << 32 / capacity} { // zeroed entry; previous lap's; across the 32-bit tag wrap
		r := newRingFormat(t, capacity, FormatLL)
		ticket := lap*capacity + 2
		e := &r.ll[ticket&r.mask]
		background := [LLWords]uint64{} // lap 0: a zeroed entry
		if lap > 0 {
			background = llWords(ticket - capacity) // what the previous lap's command left
		}
		reset := func() {
			for i := range LLWords {
				e[i] = background[i]
			}
		}
		full := llWords(ticket)
		for k := range LLWords {
			reset()
			for i := range LLWords {
				if i != k {
					e[i] = full[i]
				}
			}
			if c := r.Published(ticket); c != nil {
				t.Fatalf("lap %d: entry missing only word %d published as %+v", lap, k, *c)
			}
			if r.Depth() != 0 {
				t.Fatalf("lap %d: Depth counts an entry missing word %d", lap, k)
			}
		}
		rng := rand.New(rand.NewSource(int64(lap) + 1))
		for trial := range 200 {
			reset()
			order := rng.Perm(LLWords)
			for n, i := range order {
				if c := r.Published(ticket); c != nil {
					t.Fatalf("lap %d trial %d: published after %d of %d words (%v): %+v", lap, trial, n, LLWords, order[:n], *c)
				}
				e[i] = full[i]
			}
			wantLL(t, r.Published(ticket), ticket)
		}
		if lap > 0 {
			reset() // the previous lap's complete entry is that ticket's, not this one's
			if r.Published(ticket) != nil {
				t.Fatalf("lap %d: a stale complete entry published as ticket %d", lap, ticket)
			}
		}
	}
}

// TestLLConcurrentTornWrites: a producer stores each entry's words in a random order,
// yielding between stores, while the consumer polls; every command the consumer takes
// must be exactly its ticket's (run with -race: all accesses are atomic).
func TestLLConcurrentTornWrites(t *testing.T) {
	const capacity, total = 4, 3000
	r := newRingFormat(t, capacity, FormatLL)
	go func() {
		rng := rand.New(rand.NewSource(7))
		for ticket := uint64(0); ticket < total; ticket++ {
			for ticket-atomic.LoadUint64(&r.ctrl.Tail) >= capacity {
				runtime.Gosched()
			}
			e, w := &r.ll[ticket&r.mask], llWords(ticket)
			for _, i := range rng.Perm(LLWords) {
				atomic.StoreUint64(&e[i], w[i])
				if rng.Intn(4) == 0 {
					runtime.Gosched()
				}
			}
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for pos := uint64(0); pos < total; {
		c := r.Published(pos)
		if c == nil {
			if time.Now().After(deadline) {
				t.Fatalf("stuck at ticket %d", pos)
			}
			runtime.Gosched()
			continue
		}
		wantLL(t, c, pos)
		pos++
		r.SetTail(pos)
	}
}

// TestLLHostPushRoundTrip: Ring.Push in LL writes what the consumer decodes, for every
// field, through several laps of the ring.
func TestLLHostPushRoundTrip(t *testing.T) {
	r := newRingFormat(t, 2, FormatLL)
	for ticket := uint64(0); ticket < 9; ticket++ {
		cmd := llCmd(ticket)
		got, err := r.Push(&cmd, time.Second)
		if err != nil || got != ticket {
			t.Fatalf("push %d: ticket %d, %v", ticket, got, err)
		}
		wantLL(t, r.Published(ticket), ticket)
		if r.Published(ticket+1) != nil {
			t.Fatalf("ticket %d published before it was pushed", ticket+1)
		}
		r.SetTail(ticket + 1)
	}
}

// acceptsPartial reports the first word k such that decode accepts ticket's entry with
// every word written but k (the rest of the entry zeroed), or -1 when it accepts none.
func acceptsPartial(decode func(e *LLEntry, ticket uint64, out *Cmd) bool) int {
	const ticket = 6
	full := llWords(ticket)
	for k := range LLWords {
		var e LLEntry
		for i := range LLWords {
			if i != k {
				e[i] = full[i]
			}
		}
		var out Cmd
		if decode(&e, ticket, &out) {
			return k
		}
	}
	return -1
}

// TestLLCheckIsPerWord is the mutation check of the torn-read tests: a decoder that omits
// the tag check of any one word (or checks only the first word, as a seq-style consumer
// would) accepts a half-written entry and is caught; the real decoder is not.
func TestLLCheckIsPerWord(t *testing.T) {
	if k := acceptsPartial(llDecode); k >= 0 {
		t.Fatalf("llDecode accepts an entry missing word %d", k)
	}
	for skip := range LLWords {
		weak := func(e *LLEntry, ticket uint64, out *Cmd) bool {
			for i := range LLWords {
				if i != skip && uint32(atomic.LoadUint64(&e[i])>>32) != llTag(ticket) {
					return false
				}
			}
			return true
		}
		if k := acceptsPartial(weak); k != skip {
			t.Fatalf("a decoder without word %d's check went unnoticed (caught at %d)", skip, k)
		}
	}
	firstOnly := func(e *LLEntry, ticket uint64, out *Cmd) bool {
		return uint32(atomic.LoadUint64(&e[0])>>32) == llTag(ticket)
	}
	if acceptsPartial(firstOnly) < 0 {
		t.Fatal("a first-word-only decoder went unnoticed")
	}
}
