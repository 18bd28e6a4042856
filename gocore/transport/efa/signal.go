package efa

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
)

// Signals on SRD.
//
// An OpWriteSignal with data is two work requests, posted together:
//
//   - the data, as an RDMA WRITE WITH IMMEDIATE whose 32-bit immediate is the
//     token rank<<16 | seq (seq: the op's per-peer sequence number, low 16
//     bits). The receiver's device consumes a posted receive for it and
//     reports a receive completion only once the data is placed;
//   - the signal descriptor — which flag word, which value — as a 32-byte
//     SEND carrying the same token, into one of the receiver's posted
//     buffers.
//
// SRD may deliver the two in either order, so the receiver pairs them by
// token in a per-peer window and stores the flag, on the CPU, when it holds
// both completions: the flag is thus written by the receiver's backend
// after it has seen the data complete (contract rule 1), never by a second
// RDMA write that could overtake the first. The store is an atomic
// max (rule 3), since two signals to one word may be applied in either order.
// A signal without data is the descriptor alone, applied on arrival; what it
// covers are the ops whose completion came back before it was posted (rule
// 2): an SRD write completes at the sender only after the receiving device
// acknowledged it, and the descriptor's receive completion, written by the
// same device later, is ordered after that data over PCIe.

// descriptor is the SEND payload.
type descriptor struct {
	kind    uint8
	hasData bool
	seq     uint16
	rank    uint32
	buf     uint32
	off     uint64
	value   uint64
}

const (
	descSize  = 32
	descMagic = 0x5345454d // "MEES"

	descHello  = 1
	descSignal = 2
)

// put writes d into b (descSize bytes) without allocating.
func (d *descriptor) put(b []byte) {
	_ = b[descSize-1]
	binary.LittleEndian.PutUint32(b[0:], descMagic)
	b[4] = d.kind
	b[5] = 0
	if d.hasData {
		b[5] = 1
	}
	binary.LittleEndian.PutUint16(b[6:], d.seq)
	binary.LittleEndian.PutUint32(b[8:], d.rank)
	binary.LittleEndian.PutUint32(b[12:], d.buf)
	binary.LittleEndian.PutUint64(b[16:], d.off)
	binary.LittleEndian.PutUint64(b[24:], d.value)
}

// parseDescriptor reads a received descriptor of n bytes; ok is false for
// anything malformed.
func parseDescriptor(b []byte, n uint32) (descriptor, bool) {
	if n != descSize || len(b) < descSize || binary.LittleEndian.Uint32(b) != descMagic || b[5] > 1 {
		return descriptor{}, false
	}
	d := descriptor{
		kind:    b[4],
		hasData: b[5] == 1,
		seq:     binary.LittleEndian.Uint16(b[6:]),
		rank:    binary.LittleEndian.Uint32(b[8:]),
		buf:     binary.LittleEndian.Uint32(b[12:]),
		off:     binary.LittleEndian.Uint64(b[16:]),
		value:   binary.LittleEndian.Uint64(b[24:]),
	}
	if d.kind != descHello && d.kind != descSignal {
		return descriptor{}, false
	}
	return d, true
}

func token(rank int, seq uint16) uint32 { return uint32(rank)<<16 | uint32(seq) }

func splitToken(imm uint32) (rank int, seq uint16) { return int(imm >> 16), uint16(imm) }

// window pairs a peer's data arrivals with their descriptors. Entries are
// indexed by seq modulo its size; a slot taken by another seq means the
// sender ran more than the window ahead of this receiver, which the
// per-peer queue limit (Caps.MaxInflight, a quarter of the window) makes
// impossible unless the peer misbehaves.
type window struct {
	slots []pending
}

type pending struct {
	used     bool
	seq      uint16
	haveData bool
	haveDesc bool
	desc     descriptor
}

func newWindow(size int) window { return window{slots: make([]pending, size)} }

// data records that the data of signal seq arrived; it returns the
// descriptor to apply when the descriptor came first.
func (w *window) data(seq uint16) (descriptor, bool, error) {
	p := &w.slots[int(seq)%len(w.slots)]
	if p.used && p.seq != seq {
		return descriptor{}, false, fmt.Errorf("signal window overrun: data of signal %d while %d is unfinished", seq, p.seq)
	}
	if p.used && p.haveData {
		return descriptor{}, false, fmt.Errorf("data of signal %d arrived twice", seq)
	}
	if p.used && p.haveDesc {
		d := p.desc
		*p = pending{}
		return d, true, nil
	}
	*p = pending{used: true, seq: seq, haveData: true}
	return descriptor{}, false, nil
}

// descriptor records the descriptor of a signal with data; it returns true
// when the data already arrived (apply now).
func (w *window) descriptor(d descriptor) (bool, error) {
	p := &w.slots[int(d.seq)%len(w.slots)]
	if p.used && p.seq != d.seq {
		return false, fmt.Errorf("signal window overrun: descriptor of signal %d while %d is unfinished", d.seq, p.seq)
	}
	if p.used && p.haveDesc {
		return false, fmt.Errorf("descriptor of signal %d arrived twice", d.seq)
	}
	if p.used && p.haveData {
		*p = pending{}
		return true, nil
	}
	*p = pending{used: true, seq: d.seq, haveDesc: true, desc: d}
	return false, nil
}

// storeMax raises the flag word to v with release semantics (Go's atomics
// are sequentially consistent); it never lowers it.
func storeMax(flag *uint64, v uint64) {
	for {
		old := atomic.LoadUint64(flag)
		if old >= v || atomic.CompareAndSwapUint64(flag, old, v) {
			return
		}
	}
}
