package memreg

import (
	"errors"
	"strings"
	"testing"

	"github.com/mkernel/mkernel/gocore/transport"
)

// Registration needs a PD (the ibverbs and efa tests run it against the fake
// provider); the checks and the table's order do not.

func table() *Table {
	t := NewTable(nil, 4, false, nil)
	t.regions[2] = &Region{ID: 2, Addr: 0x1000, Len: 4096, Kind: Host}
	t.regions[1] = &Region{ID: 1, Addr: 0x9000, Len: 64, Kind: Host}
	return t
}

func TestTable(t *testing.T) {
	tb := table()
	if rs := tb.Sorted(); len(rs) != 2 || rs[0].ID != 1 || rs[1].ID != 2 {
		t.Errorf("Sorted = %v", rs)
	}
	if tb.Lookup(3) != nil || tb.Lookup(2) == nil {
		t.Error("Lookup")
	}
	for name, r := range map[string]transport.Region{
		"duplicate":    {Bytes: make([]byte, 8)},
		"empty":        {},
		"empty device": {Device: &transport.DeviceRegion{Ptr: 0x1000}},
	} {
		id := transport.BufferID(7)
		if name == "duplicate" {
			id = 1
		}
		if err := tb.Register(id, r); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	tb.regions[3], tb.regions[4] = &Region{ID: 3}, &Region{ID: 4}
	if err := tb.Register(5, transport.Region{Bytes: make([]byte, 8)}); !errors.Is(err, transport.ErrInvalid) || !strings.Contains(err.Error(), "more than 4") {
		t.Errorf("a full table: %v", err)
	}
	if err := tb.Release(); err != nil || len(tb.regions) != 0 {
		t.Errorf("Release = %v, %d left", err, len(tb.regions))
	}
}

func TestCheckOp(t *testing.T) {
	local := table()
	remote := map[transport.BufferID]Remote{1: {Addr: 0x5000, Len: 1 << 20, RKey: 1}, 3: {Addr: 0x8004, Len: 64, Kind: Device}}
	ok := transport.Op{Kind: transport.OpWriteSignal, Peer: 1, Local: 2, LocalOff: 96, Len: 4000, Remote: 1, RemoteOff: 8, SignalBuf: 1, SignalOff: 16}
	if sr, err := CheckOp(&ok, local, remote, 1<<20); err != nil || sr.Addr != 0x5000 {
		t.Fatalf("a valid op: %+v, %v", sr, err)
	}
	for name, edit := range map[string]func(op *transport.Op){
		"kind":              func(op *transport.Op) { op.Kind = 9 },
		"zero-length write": func(op *transport.Op) { op.Kind, op.Len = transport.OpWrite, 0 },
		"too long":          func(op *transport.Op) { op.Len = 1<<20 + 1 },
		"unknown local":     func(op *transport.Op) { op.Local = 7 },
		"local range":       func(op *transport.Op) { op.LocalOff = 97 },
		"unknown remote":    func(op *transport.Op) { op.Remote = 7 },
		"remote range":      func(op *transport.Op) { op.RemoteOff = 1<<20 - 3999 },
		"unknown flag":      func(op *transport.Op) { op.SignalBuf = 7 },
		"unaligned offset":  func(op *transport.Op) { op.SignalOff = 4 },
		"flag past the end": func(op *transport.Op) { op.SignalBuf, op.SignalOff = 3, 64 },
		"unaligned address": func(op *transport.Op) { op.SignalBuf, op.SignalOff = 3, 8 },
	} {
		op := ok
		edit(&op)
		if _, err := CheckOp(&op, local, remote, 1<<20); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	pure := transport.Op{Kind: transport.OpWriteSignal, Peer: 1, SignalBuf: 1, SignalOff: 8}
	if _, err := CheckOp(&pure, local, remote, 1<<20); err != nil {
		t.Errorf("a signal without data: %v", err)
	}
}
