// Package memreg is the registered memory of a verbs endpoint: the table of
// regions the caller registered on the endpoint's protection domain (host
// memory with ibv_reg_mr; GPU memory with ibv_reg_dmabuf_mr, falling back to
// ibv_reg_mr on the device pointer for nvidia-peermem), the backend's own
// registered scratch buffers, and the bounds checks an op must pass against
// the local table and a peer's.
package memreg

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
)

// Kind says what memory a region is. It travels in connection blobs.
type Kind uint8

const (
	Host   Kind = 1
	Device Kind = 2
)

// Access is what a region's MRs allow, without relaxed ordering.
const Access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead

// Region is one registered buffer.
type Region struct {
	ID   transport.BufferID
	Mem  []byte // host memory (kept reachable; flags may be stored through it); nil for GPU memory
	Addr uint64
	Len  uint64
	Kind Kind
	MR   *verbs.MR // data writes
	// SignalMR is for flag writes: never relaxed-ordered. It is MR unless
	// the table registers with relaxed ordering.
	SignalMR *verbs.MR
}

// Table is the regions registered on one PD.
type Table struct {
	pd      *verbs.PD
	max     int
	relaxed bool
	log     *zap.Logger
	regions map[transport.BufferID]*Region
}

// NewTable registers up to max regions on pd. With relaxed, data MRs allow
// IBV_ACCESS_RELAXED_ORDERING and each region gets a second, strictly
// ordered MR for flag writes (Region.SignalMR).
func NewTable(pd *verbs.PD, max int, relaxed bool, log *zap.Logger) *Table {
	return &Table{pd: pd, max: max, relaxed: relaxed, log: log, regions: map[transport.BufferID]*Region{}}
}

// Lookup returns region id, nil if it is not registered.
func (t *Table) Lookup(id transport.BufferID) *Region { return t.regions[id] }

// Sorted returns every region in ID order.
func (t *Table) Sorted() []*Region {
	rs := make([]*Region, 0, len(t.regions))
	for _, r := range t.regions {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b *Region) int { return cmp.Compare(a.ID, b.ID) })
	return rs
}

func (t *Table) access(relaxed bool) verbs.Access {
	if relaxed {
		return Access | verbs.AccessRelaxedOrdering
	}
	return Access
}

// Register registers r as id. Errors for a duplicate, a full table or an
// empty region match ErrInvalid; GPU memory that neither DMA-BUF nor
// nvidia-peermem can register matches ErrNotSupported.
func (t *Table) Register(id transport.BufferID, r transport.Region) error {
	switch {
	case t.regions[id] != nil:
		return fmt.Errorf("%w: already registered", transport.ErrInvalid)
	case len(t.regions) >= t.max:
		return fmt.Errorf("%w: more than %d regions", transport.ErrInvalid, t.max)
	case r.Device == nil && len(r.Bytes) == 0:
		return fmt.Errorf("%w: empty region", transport.ErrInvalid)
	case r.Device != nil && (r.Device.Len == 0 || r.Device.Ptr == 0):
		return fmt.Errorf("%w: empty device region", transport.ErrInvalid)
	}
	reg := &Region{ID: id}
	var err error
	if r.Device != nil {
		err = t.registerDevice(reg, r.Device)
	} else {
		reg.Mem, reg.Kind = r.Bytes, Host
		reg.Addr, reg.Len = uint64(uintptr(unsafe.Pointer(&r.Bytes[0]))), uint64(len(r.Bytes))
		err = t.registerHost(reg)
	}
	if err != nil {
		return err
	}
	t.regions[id] = reg
	return nil
}

// registerHost registers reg (Addr, Len set) once, or twice with relaxed
// ordering (a relaxed MR for data, a strict one for flags).
func (t *Table) registerHost(reg *Region) error {
	mr, err := t.pd.RegMR(uintptr(reg.Addr), reg.Len, t.access(t.relaxed))
	if err != nil {
		return err
	}
	reg.MR, reg.SignalMR = mr, mr
	if t.relaxed {
		if reg.SignalMR, err = t.pd.RegMR(uintptr(reg.Addr), reg.Len, t.access(false)); err != nil {
			_ = mr.Close()
			return fmt.Errorf("strict MR for flags: %w", err)
		}
	}
	return nil
}

func (t *Table) registerDevice(reg *Region, d *transport.DeviceRegion) error {
	reg.Kind, reg.Addr, reg.Len = Device, uint64(d.Ptr), d.Len
	var dmaErr error
	if d.DMABufFD >= 0 {
		reg.MR, dmaErr = t.pd.RegDMABufMR(d.DMABufOffset, d.Len, uint64(d.Ptr), d.DMABufFD, t.access(t.relaxed))
		if dmaErr == nil {
			reg.SignalMR = reg.MR
			if !t.relaxed {
				return nil
			}
			var err error
			if reg.SignalMR, err = t.pd.RegDMABufMR(d.DMABufOffset, d.Len, uint64(d.Ptr), d.DMABufFD, t.access(false)); err == nil {
				return nil
			}
			_ = reg.MR.Close()
			reg.MR, reg.SignalMR = nil, nil
			return fmt.Errorf("GPU %d memory: strict DMA-BUF MR for flags: %w", d.GPU, err)
		}
	} else {
		dmaErr = errors.New("no DMA-BUF fd")
	}
	// nvidia-peermem: the HCA driver pins the GPU pages through the
	// peer-memory client given the device virtual address.
	if err := t.registerHost(reg); err != nil {
		reg.MR, reg.SignalMR = nil, nil
		return fmt.Errorf("GPU %d memory at %#x (+%d): DMA-BUF: %v; ibv_reg_mr (nvidia-peermem): %w: %w",
			d.GPU, d.Ptr, d.Len, dmaErr, err, transport.ErrNotSupported)
	}
	t.log.Info("GPU memory registered through nvidia-peermem", zap.Int("gpu", d.GPU), zap.Uint32("buffer", uint32(reg.ID)), zap.NamedError("dmabuf", dmaErr))
	return nil
}

// Release deregisters every region's MRs, in ID order, and empties the
// table. It returns every failure, each naming its buffer.
func (t *Table) Release() error {
	if t == nil {
		return nil
	}
	var errs []error
	for _, r := range t.Sorted() {
		if r.SignalMR != nil && r.SignalMR != r.MR {
			if err := r.SignalMR.Close(); err != nil {
				errs = append(errs, fmt.Errorf("deregister buffer %d (flag MR): %w", r.ID, err))
			}
		}
		if r.MR != nil {
			if err := r.MR.Close(); err != nil {
				errs = append(errs, fmt.Errorf("deregister buffer %d: %w", r.ID, err))
			}
		}
	}
	clear(t.regions)
	return errors.Join(errs...)
}

// Scratch is anonymous memory the backend maps and registers for itself
// (receive buffers, send descriptors, flag sources).
type Scratch struct {
	Mem []byte
	MR  *verbs.MR
}

// MapScratch maps at least n bytes (whole pages) of private anonymous
// memory and registers them on pd with access.
func MapScratch(pd *verbs.PD, n int, access verbs.Access) (Scratch, error) {
	size := (n + unix.Getpagesize() - 1) &^ (unix.Getpagesize() - 1)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return Scratch{}, fmt.Errorf("map %d bytes: %w", size, err)
	}
	mr, err := pd.RegMR(uintptr(unsafe.Pointer(&mem[0])), uint64(size), access)
	if err != nil {
		_ = unix.Munmap(mem)
		return Scratch{}, fmt.Errorf("register %d bytes: %w", size, err)
	}
	return Scratch{Mem: mem, MR: mr}, nil
}

// Addr returns the address of byte off.
func (s *Scratch) Addr(off int) uint64 { return uint64(uintptr(unsafe.Pointer(&s.Mem[off]))) }

// Release deregisters and unmaps s (nothing if it was never mapped).
func (s *Scratch) Release() error {
	var errs []error
	if s.MR != nil {
		if err := s.MR.Close(); err != nil {
			errs = append(errs, fmt.Errorf("deregister: %w", err))
		}
		s.MR = nil
	}
	if s.Mem != nil {
		if err := unix.Munmap(s.Mem); err != nil {
			errs = append(errs, fmt.Errorf("unmap: %w", err))
		}
		s.Mem = nil
	}
	return errors.Join(errs...)
}

// Remote is a peer's region as its blob described it.
type Remote struct {
	Addr, Len uint64
	RKey      uint32
	SignalKey uint32 // the rkey for flag writes (RKey where the peer has no strict twin)
	Kind      Kind
}

// CheckOp checks op's kind and ranges against the local table, the peer's
// regions (remote) and the largest op (maxOp) and returns the peer's flag
// region for a signal. Errors match ErrInvalid and say what is wrong; the
// caller adds the op and peer.
func CheckOp(op *transport.Op, local *Table, remote map[transport.BufferID]Remote, maxOp uint64) (Remote, error) {
	bad := func(format string, args ...any) (Remote, error) {
		return Remote{}, fmt.Errorf("%w: %s", transport.ErrInvalid, fmt.Sprintf(format, args...))
	}
	if op.Kind != transport.OpWrite && op.Kind != transport.OpWriteSignal {
		return bad("unknown kind %d", op.Kind)
	}
	if op.Len == 0 && op.Kind == transport.OpWrite {
		return bad("zero-length write")
	}
	if op.Len > maxOp {
		return bad("%d bytes exceed the %d-byte limit", op.Len, maxOp)
	}
	if op.Len > 0 {
		lr := local.Lookup(op.Local)
		if lr == nil {
			return bad("unknown local buffer %d", op.Local)
		}
		if !transport.InRange(op.LocalOff, op.Len, lr.Len) {
			return bad("local [%d, +%d) outside buffer %d of %d bytes", op.LocalOff, op.Len, op.Local, lr.Len)
		}
		rr, ok := remote[op.Remote]
		if !ok {
			return bad("unknown remote buffer %d", op.Remote)
		}
		if !transport.InRange(op.RemoteOff, op.Len, rr.Len) {
			return bad("remote [%d, +%d) outside buffer %d of %d bytes", op.RemoteOff, op.Len, op.Remote, rr.Len)
		}
	}
	if op.Kind != transport.OpWriteSignal {
		return Remote{}, nil
	}
	sr, ok := remote[op.SignalBuf]
	if !ok {
		return bad("unknown flag buffer %d", op.SignalBuf)
	}
	if op.SignalOff%8 != 0 || !transport.InRange(op.SignalOff, 8, sr.Len) || (sr.Addr+op.SignalOff)%8 != 0 {
		return bad("flag at %d of buffer %d (%d bytes) is not an aligned 8-byte word in it", op.SignalOff, op.SignalBuf, sr.Len)
	}
	return sr, nil
}
