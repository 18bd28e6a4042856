package plugin

import (
	"sync/atomic"
	"unsafe"

	"github.com/mkernel/mkernel/gocore/transport"
)

// The shared segment: a control block, then the submission slots, then the completion
// slots. Both processes are built from this source, so the Go layouts agree; the sizes
// are still checked at Init.
const (
	ringSlots = 4096
	lineBytes = 128
)

// wireOp is a transport.Op with a fixed layout.
type wireOp struct {
	Kind        uint32
	Peer        int32
	Local       uint32
	Remote      uint32
	SignalBuf   uint32
	_           uint32
	LocalOff    uint64
	RemoteOff   uint64
	Len         uint64
	SignalOff   uint64
	SignalValue uint64
	Cookie      uint64
}

type wireComp struct {
	Cookie uint64
	Status uint64 // 0 ok, else the plugin failed (see ringCtrl.failed)
}

type ringCtrl struct {
	subHead  uint64 // host: ops submitted
	_        [lineBytes - 8]byte
	subTail  uint64 // plugin: ops taken
	_        [lineBytes - 8]byte
	compHead uint64 // plugin: completions written
	_        [lineBytes - 8]byte
	compTail uint64 // host: completions read
	_        [lineBytes - 8]byte
	failed   uint32 // plugin: nonzero once its transport failed
	closing  uint32 // host: nonzero when the plugin loop must stop
	opSize   uint32 // layout check
	slots    uint32
	_        [lineBytes - 16]byte
}

func segmentBytes() int {
	return int(unsafe.Sizeof(ringCtrl{})) + ringSlots*int(unsafe.Sizeof(wireOp{})) + ringSlots*int(unsafe.Sizeof(wireComp{}))
}

type rings struct {
	ctrl *ringCtrl
	sub  []wireOp
	comp []wireComp
}

func mapRings(mem []byte) rings {
	base := unsafe.Pointer(&mem[0])
	ctrl := (*ringCtrl)(base)
	subAt := unsafe.Add(base, unsafe.Sizeof(ringCtrl{}))
	compAt := unsafe.Add(subAt, ringSlots*unsafe.Sizeof(wireOp{}))
	return rings{
		ctrl: ctrl,
		sub:  unsafe.Slice((*wireOp)(subAt), ringSlots),
		comp: unsafe.Slice((*wireComp)(compAt), ringSlots),
	}
}

func toWire(op *transport.Op) wireOp {
	return wireOp{Kind: uint32(op.Kind), Peer: op.Peer, Local: uint32(op.Local), Remote: uint32(op.Remote), SignalBuf: uint32(op.SignalBuf),
		LocalOff: op.LocalOff, RemoteOff: op.RemoteOff, Len: op.Len, SignalOff: op.SignalOff, SignalValue: op.SignalValue, Cookie: op.Cookie}
}

func fromWire(w *wireOp) transport.Op {
	return transport.Op{Kind: transport.OpKind(w.Kind), Peer: w.Peer, Local: transport.BufferID(w.Local), Remote: transport.BufferID(w.Remote),
		SignalBuf: transport.BufferID(w.SignalBuf), LocalOff: w.LocalOff, RemoteOff: w.RemoteOff, Len: w.Len,
		SignalOff: w.SignalOff, SignalValue: w.SignalValue, Cookie: w.Cookie}
}

func load(p *uint64) uint64     { return atomic.LoadUint64(p) }
func store(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
