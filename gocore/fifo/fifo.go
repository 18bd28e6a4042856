package fifo

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Layout constants, as in fifo.h.
const (
	Magic       = 0x4f464b4d
	Version     = 1
	CmdBytes    = 64
	LineBytes   = 128
	Align       = 128
	FlagBytes   = 8
	PeerAll     = 0xffff
	MaxCapacity = 1 << 20
	// LLEntryBytes is one command in the LL format (mk_fifo_ll_entry).
	LLEntryBytes = 128
	// LLWords is the number of tagged words of an LL entry (MK_FIFO_LL_WORDS).
	LLWords = 14
)

// Format is how producers publish a slot (mk_fifo_format, Ctrl.Format).
type Format uint32

// Slot formats.
const (
	// FormatSeq: Cmd slots published by a store-release of Seq, written last (the default).
	FormatSeq Format = 0
	// FormatLL: LLEntry slots whose every word carries the ticket's tag; no publication
	// store, so a GPU producer needs no fence between payload and publication.
	FormatLL Format = 1
)

func (f Format) String() string {
	switch f {
	case FormatSeq:
		return "seq"
	case FormatLL:
		return "ll"
	}
	return fmt.Sprintf("format(%d)", uint32(f))
}

// LLEntry is mk_fifo_ll_entry: word i < LLWords holds payload word i in its low 32 bits
// and the tag uint32(ticket+1) in its high 32 bits; words 14 and 15 are unused.
type LLEntry [LLEntryBytes / 8]uint64

// Kind is a command's kind (mk_fifo_kind).
type Kind uint8

// Command kinds.
const (
	KindWrite       Kind = 1
	KindWriteSignal Kind = 2
	KindFence       Kind = 3
	KindBarrier     Kind = 4
)

func (k Kind) String() string {
	switch k {
	case KindWrite:
		return "write"
	case KindWriteSignal:
		return "write-signal"
	case KindFence:
		return "fence"
	case KindBarrier:
		return "barrier"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Clock is the domain of Cmd.EnqueueNS (mk_fifo_clock).
type Clock uint32

// Clock domains.
const (
	ClockNone        Clock = 0
	ClockMonotonic   Clock = 1
	ClockGlobaltimer Clock = 2
)

// Error codes of Ctrl.Error (mk_fifo_error).
const (
	ErrNone     = 0
	ErrProducer = 1
	ErrProxy    = 2
	ErrClosed   = 3
)

// States of Ctrl.ErrorState (mk_fifo_error_state): who owns the failure record.
const (
	ErrorFree    = 0 // no failure yet
	ErrorClaimed = 1 // a failing party is writing the details
	ErrorSet     = 2 // Error, ErrorPeer and ErrorTicket are final
)

// Cmd is mk_fifo_cmd.
type Cmd struct {
	Seq         uint64
	Kind        Kind
	Flags       uint8
	Peer        uint16
	ArrivalSlot uint32
	LocalBuf    uint32
	RemoteBuf   uint32
	LocalOff    uint64
	RemoteOff   uint64
	Bytes       uint64
	ArrivalSeq  uint64
	EnqueueNS   uint64
}

// Ctrl is mk_fifo_ctrl.
type Ctrl struct {
	Magic    uint32
	Version  uint16
	CmdBytes uint16
	Capacity uint32
	Clock    uint32
	Format   uint32
	_        [LineBytes - 20]byte

	Head uint64
	_    [LineBytes - 8]byte

	Tail uint64
	_    [LineBytes - 8]byte

	Done uint64
	_    [LineBytes - 8]byte

	// Line 4, the failure record: claimed with ErrorState, published by Error (last).
	Error       uint32
	ErrorPeer   uint32
	ErrorTicket uint64
	ErrorState  uint32
	_           uint32
	_           [LineBytes - 24]byte
}

// Bytes returns the size of a FIFO of capacity slots in FormatSeq (MK_FIFO_BYTES).
func Bytes(capacity int) int { return BytesFormat(capacity, FormatSeq) }

// BytesFormat returns the size of a FIFO of capacity slots in format f (MK_FIFO_BYTES_FMT).
func BytesFormat(capacity int, f Format) int {
	return int(unsafe.Sizeof(Ctrl{})) + capacity*f.slotBytes()
}

func (f Format) slotBytes() int {
	if f == FormatLL {
		return LLEntryBytes
	}
	return CmdBytes
}

// Sentinel errors.
var (
	// ErrTimeout: no credit (or no completion) within the timeout.
	ErrTimeout = errors.New("fifo: timed out")
	// ErrFailed: the FIFO was failed (Ctrl.Error is set).
	ErrFailed = errors.New("fifo: failed")
	// ErrLayout: memory that is not a FIFO of this version.
	ErrLayout = errors.New("fifo: bad layout")
)

// Ring is a FIFO in memory the caller owns (mmap, shm, host-pinned).
type Ring struct {
	ctrl   *Ctrl
	format Format
	n      int       // capacity in commands
	slots  []Cmd     // FormatSeq
	ll     []LLEntry // FormatLL
	dec    []Cmd     // FormatLL: the consumer's decoded copy of each entry
	mask   uint64
	mem    []byte
}

func view(mem []byte) (*Ring, error) {
	if len(mem) < Bytes(1) {
		return nil, fmt.Errorf("%w: %d bytes", ErrLayout, len(mem))
	}
	if uintptr(unsafe.Pointer(&mem[0]))%64 != 0 {
		return nil, fmt.Errorf("%w: memory at %p is not 64-byte aligned", ErrLayout, &mem[0])
	}
	return &Ring{ctrl: (*Ctrl)(unsafe.Pointer(&mem[0])), mem: mem}, nil
}

// Init formats mem (zeroed, from mmap or shm) as a FIFO of capacity slots, a power of
// two, whose enqueue timestamps are in clock's domain, in FormatSeq.
func Init(mem []byte, capacity int, clock Clock) (*Ring, error) {
	return InitFormat(mem, capacity, clock, FormatSeq)
}

// InitFormat is Init with the slot format chosen (mem must hold BytesFormat(capacity, f)).
func InitFormat(mem []byte, capacity int, clock Clock, f Format) (*Ring, error) {
	if capacity <= 0 || capacity&(capacity-1) != 0 || capacity > MaxCapacity {
		return nil, fmt.Errorf("%w: capacity %d is not a power of two up to %d", ErrLayout, capacity, MaxCapacity)
	}
	if f != FormatSeq && f != FormatLL {
		return nil, fmt.Errorf("%w: unknown slot %v", ErrLayout, f)
	}
	need := BytesFormat(capacity, f)
	if len(mem) < need {
		return nil, fmt.Errorf("%w: %d bytes for %d %v slots, need %d", ErrLayout, len(mem), capacity, f, need)
	}
	r, err := view(mem)
	if err != nil {
		return nil, err
	}
	clear(mem[:need])
	c := r.ctrl
	c.Version, c.CmdBytes, c.Capacity, c.Clock = Version, uint16(f.slotBytes()), uint32(capacity), uint32(clock)
	c.Format = uint32(f)
	atomic.StoreUint32(&c.Magic, Magic)
	r.setSlots()
	return r, nil
}

// Attach opens a FIFO another party initialised.
func Attach(mem []byte) (*Ring, error) {
	r, err := view(mem)
	if err != nil {
		return nil, err
	}
	c := r.ctrl
	switch {
	case atomic.LoadUint32(&c.Magic) != Magic:
		return nil, fmt.Errorf("%w: magic %#x", ErrLayout, c.Magic)
	case c.Format != uint32(FormatSeq) && c.Format != uint32(FormatLL):
		return nil, fmt.Errorf("%w: unknown slot %v", ErrLayout, Format(c.Format))
	case c.Version != Version || int(c.CmdBytes) != Format(c.Format).slotBytes():
		return nil, fmt.Errorf("%w: version %d with %d-byte %v commands, want %d and %d", ErrLayout, c.Version, c.CmdBytes,
			Format(c.Format), Version, Format(c.Format).slotBytes())
	case c.Capacity == 0 || c.Capacity&(c.Capacity-1) != 0 || c.Capacity > MaxCapacity:
		return nil, fmt.Errorf("%w: capacity %d", ErrLayout, c.Capacity)
	case len(mem) < BytesFormat(int(c.Capacity), Format(c.Format)):
		return nil, fmt.Errorf("%w: %d bytes for %d %v slots", ErrLayout, len(mem), c.Capacity, Format(c.Format))
	}
	r.setSlots()
	return r, nil
}

func (r *Ring) setSlots() {
	n := int(r.ctrl.Capacity)
	r.n, r.format, r.mask = n, Format(r.ctrl.Format), uint64(n-1)
	base := unsafe.Pointer(&r.mem[unsafe.Sizeof(Ctrl{})])
	if r.format == FormatLL {
		r.ll = unsafe.Slice((*LLEntry)(base), n)
		r.dec = make([]Cmd, n)
		return
	}
	r.slots = unsafe.Slice((*Cmd)(base), n)
}

// Capacity returns the number of slots (commands).
func (r *Ring) Capacity() int { return r.n }

// Format returns the slot format.
func (r *Ring) Format() Format { return r.format }

// Clock returns the domain of the enqueue timestamps.
func (r *Ring) Clock() Clock { return Clock(r.ctrl.Clock) }

// Ctrl returns the control block (for diagnostics; use the methods to change it).
func (r *Ring) Ctrl() *Ctrl { return r.ctrl }

// Memory returns the FIFO's memory.
func (r *Ring) Memory() []byte { return r.mem }

// ---- consumer ----

// Published returns the command of ticket pos if it is published, else nil. FormatSeq: the
// slot itself, after an acquire load of its seq word. FormatLL: a copy decoded from the
// entry, only when every one of its LLWords words carries pos's tag (each word loaded once,
// its tag checked and its payload taken from that same load). The pointer stays valid until
// the consumer moves the tail past pos. Only the consumer may call it.
func (r *Ring) Published(pos uint64) *Cmd {
	if r.format == FormatLL {
		d := &r.dec[pos&r.mask]
		if !llDecode(&r.ll[pos&r.mask], pos, d) {
			return nil
		}
		return d
	}
	s := &r.slots[pos&r.mask]
	if atomic.LoadUint64(&s.Seq) != pos+1 {
		return nil
	}
	return s
}

// Tail returns the consumer's progress.
func (r *Ring) Tail() uint64 { return atomic.LoadUint64(&r.ctrl.Tail) }

// SetTail releases every slot before pos to the producers.
func (r *Ring) SetTail(pos uint64) { atomic.StoreUint64(&r.ctrl.Tail, pos) }

// Done returns the number of commands finished in ticket order.
func (r *Ring) Done() uint64 { return atomic.LoadUint64(&r.ctrl.Done) }

// SetDone publishes that every command before ticket n has finished.
func (r *Ring) SetDone(n uint64) { atomic.StoreUint64(&r.ctrl.Done, n) }

// Head returns the host producers' ticket counter (0 when only GPU producers with their
// own counters use the FIFO).
func (r *Ring) Head() uint64 { return atomic.LoadUint64(&r.ctrl.Head) }

// Depth counts published, unconsumed commands by scanning from the tail (works whatever
// counter producers use). Diagnostics only: O(depth).
func (r *Ring) Depth() int {
	t := r.Tail()
	n := 0
	for n < r.n && r.ready(t+uint64(n)) {
		n++
	}
	return n
}

// Fail marks the FIFO failed so producers stop. The first caller wins — here, in C
// (mk_fifo_fail) or on the GPU (mk_fifo_fail_device): it claims the record (ErrorState
// free -> claimed), writes the details, then publishes Error, so a reader that sees Error
// set sees the details complete. Reports whether this call's record is the one kept.
func (r *Ring) Fail(code, peer uint32, ticket uint64) bool {
	c := r.ctrl
	if !atomic.CompareAndSwapUint32(&c.ErrorState, ErrorFree, ErrorClaimed) {
		return false
	}
	atomic.StoreUint32(&c.ErrorPeer, peer)
	atomic.StoreUint64(&c.ErrorTicket, ticket)
	atomic.StoreUint32(&c.Error, code)
	atomic.StoreUint32(&c.ErrorState, ErrorSet)
	return true
}

// Failure returns the error code, peer and ticket the first Fail recorded; code ErrNone
// (and zero details) while there is none or its details are still being written.
func (r *Ring) Failure() (code, peer uint32, ticket uint64) {
	c := r.ctrl
	if code = atomic.LoadUint32(&c.Error); code == ErrNone {
		return ErrNone, 0, 0
	}
	return code, atomic.LoadUint32(&c.ErrorPeer), atomic.LoadUint64(&c.ErrorTicket)
}

// ---- host producer ----

// Push runs the host producer protocol: take a ticket, wait (bounded) for credit, fill
// the slot from cmd (its Seq is ignored), publish. On ErrTimeout the caller still owns
// ticket: call Resume, or Fail — never drop it. Push does not allocate.
func (r *Ring) Push(cmd *Cmd, timeout time.Duration) (ticket uint64, err error) {
	if atomic.LoadUint32(&r.ctrl.Error) != ErrNone {
		return 0, ErrFailed
	}
	ticket = atomic.AddUint64(&r.ctrl.Head, 1) - 1
	return ticket, r.Resume(cmd, ticket, timeout)
}

// Resume waits for credit for a ticket Push returned with ErrTimeout, then publishes.
func (r *Ring) Resume(cmd *Cmd, ticket uint64, timeout time.Duration) error {
	if err := r.waitCredit(ticket, timeout); err != nil {
		return err
	}
	r.publish(cmd, ticket)
	return nil
}

// TryPush publishes cmd only if a slot is free right now; it never blocks and never
// leaves a ticket behind (it claims with compare-and-swap). ok is false when the FIFO is
// full.
func (r *Ring) TryPush(cmd *Cmd) (ticket uint64, ok bool, err error) {
	c := r.ctrl
	for {
		if atomic.LoadUint32(&c.Error) != ErrNone {
			return 0, false, ErrFailed
		}
		h := atomic.LoadUint64(&c.Head)
		if h-atomic.LoadUint64(&c.Tail) >= uint64(r.n) {
			return 0, false, nil
		}
		if atomic.CompareAndSwapUint64(&c.Head, h, h+1) {
			r.publish(cmd, h)
			return h, true, nil
		}
	}
}

func (r *Ring) waitCredit(ticket uint64, timeout time.Duration) error {
	return spinUntil(timeout, func() (bool, error) {
		if ticket-atomic.LoadUint64(&r.ctrl.Tail) < uint64(r.n) {
			return true, nil
		}
		if atomic.LoadUint32(&r.ctrl.Error) != ErrNone {
			return false, ErrFailed
		}
		return false, nil
	})
}

func (r *Ring) publish(cmd *Cmd, ticket uint64) {
	if r.format == FormatLL {
		llPublish(&r.ll[ticket&r.mask], ticket, cmd)
		return
	}
	s := &r.slots[ticket&r.mask]
	// Every field but Seq, then the release of Seq (the consumer reads Seq atomically).
	s.Kind, s.Flags, s.Peer, s.ArrivalSlot = cmd.Kind, cmd.Flags, cmd.Peer, cmd.ArrivalSlot
	s.LocalBuf, s.RemoteBuf, s.LocalOff, s.RemoteOff = cmd.LocalBuf, cmd.RemoteBuf, cmd.LocalOff, cmd.RemoteOff
	s.Bytes, s.ArrivalSeq, s.EnqueueNS = cmd.Bytes, cmd.ArrivalSeq, cmd.EnqueueNS
	atomic.StoreUint64(&s.Seq, ticket+1)
}

// WaitDone waits until command ticket and every earlier one finished.
func (r *Ring) WaitDone(ticket uint64, timeout time.Duration) error {
	return spinUntil(timeout, func() (bool, error) {
		if atomic.LoadUint64(&r.ctrl.Done) > ticket {
			return true, nil
		}
		if atomic.LoadUint32(&r.ctrl.Error) != ErrNone {
			return false, ErrFailed
		}
		return false, nil
	})
}

// spinUntil polls cond, yielding the processor now and then, until it is true, fails, or
// timeout passes (ErrTimeout).
func spinUntil(timeout time.Duration, cond func() (bool, error)) error {
	var deadline time.Time
	for i := 0; ; i++ {
		ok, err := cond()
		if ok || err != nil {
			return err
		}
		if i&255 == 255 {
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(timeout)
			} else if now.After(deadline) {
				return ErrTimeout
			}
			runtime.Gosched()
		}
	}
}

// ---- arrival flags ----

// Flag returns arrival flag word slot of a flag array.
func Flag(flags []byte, slot int) *uint64 {
	return (*uint64)(unsafe.Pointer(&flags[slot*FlagBytes]))
}

// WaitFlag waits until *flag >= seq (acquire loads).
func WaitFlag(flag *uint64, seq uint64, timeout time.Duration) error {
	return spinUntil(timeout, func() (bool, error) { return atomic.LoadUint64(flag) >= seq, nil })
}
