package efa

import (
	"strings"
	"testing"
)

func TestDescriptorRoundTrip(t *testing.T) {
	in := descriptor{kind: descSignal, hasData: true, seq: 0xbeef, rank: 70000, buf: 3, off: 4088, value: 1<<63 + 5}
	b := make([]byte, recvSlot)
	in.put(b)
	out, ok := parseDescriptor(b, descSize)
	if !ok || out != in {
		t.Fatalf("round trip: %+v, %v; want %+v", out, ok, in)
	}
	allocs := testing.AllocsPerRun(100, func() { in.put(b) })
	if allocs != 0 {
		t.Errorf("put allocates %v", allocs)
	}
	for name, edit := range map[string]func([]byte) uint32{
		"short":     func([]byte) uint32 { return descSize - 1 },
		"long":      func([]byte) uint32 { return descSize + 1 },
		"magic":     func(b []byte) uint32 { b[0] ^= 1; return descSize },
		"kind":      func(b []byte) uint32 { b[4] = 9; return descSize },
		"data flag": func(b []byte) uint32 { b[5] = 2; return descSize },
	} {
		c := make([]byte, recvSlot)
		in.put(c)
		if _, ok := parseDescriptor(c, edit(c)); ok {
			t.Errorf("%s: malformed descriptor accepted", name)
		}
	}
}

func TestToken(t *testing.T) {
	for _, tc := range []struct {
		rank int
		seq  uint16
	}{{0, 0}, {1, 65535}, {65535, 1}, {300, 42}} {
		r, s := splitToken(token(tc.rank, tc.seq))
		if r != tc.rank || s != tc.seq {
			t.Errorf("token(%d, %d) splits into %d, %d", tc.rank, tc.seq, r, s)
		}
	}
}

func TestWindowPairsEitherOrder(t *testing.T) {
	w := newWindow(8)
	d := descriptor{kind: descSignal, hasData: true, seq: 3, buf: 1, off: 8, value: 9}
	// Data first.
	if _, ready, err := w.data(3); ready || err != nil {
		t.Fatalf("data alone: ready %v, %v", ready, err)
	}
	if ready, err := w.descriptor(d); !ready || err != nil {
		t.Fatalf("descriptor after data: ready %v, %v", ready, err)
	}
	// Descriptor first, with seq wrapping past the window.
	d.seq = 11
	if ready, err := w.descriptor(d); ready || err != nil {
		t.Fatalf("descriptor alone: ready %v, %v", ready, err)
	}
	got, ready, err := w.data(11)
	if !ready || err != nil || got != d {
		t.Fatalf("data after descriptor: %+v, %v, %v", got, ready, err)
	}
	// Overruns and duplicates are errors, never a wrong pairing.
	if _, _, err := w.data(4); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.data(12); err == nil || !strings.Contains(err.Error(), "overrun") {
		t.Errorf("seq 12 while 4 waits in the same slot: %v", err)
	}
	if _, _, err := w.data(4); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate data: %v", err)
	}
	d.seq = 5
	if _, err := w.descriptor(d); err != nil {
		t.Fatal(err)
	}
	if _, err := w.descriptor(d); err == nil {
		t.Error("duplicate descriptor accepted")
	}
	d.seq = 13
	if _, err := w.descriptor(d); err == nil {
		t.Error("descriptor overrun accepted")
	}
}

func TestStoreMax(t *testing.T) {
	var f uint64
	for _, v := range []uint64{5, 3, 9, 9, 1} {
		storeMax(&f, v)
	}
	if f != 9 {
		t.Errorf("flag %d, want 9", f)
	}
}

func TestSRDStates(t *testing.T) {
	st := srdStates(0x1234, true)
	if len(st) != 3 || st[0].attr.QKey != 0x1234 || st[0].attr.Port != 1 || st[2].attr.RNRRetry != 7 {
		t.Fatalf("%+v", st)
	}
	// The UD attribute table: INIT needs pkey index, port and qkey; RTR
	// nothing; RTS the send PSN (+ RNR retry as an option).
	if m := st[0].mask; m != 1|1<<4|1<<5|1<<6 {
		t.Errorf("INIT mask %#x", m)
	}
	if m := st[1].mask; m != 1 {
		t.Errorf("RTR mask %#x", m)
	}
	if m := st[2].mask; m != 1|1<<16|1<<11 {
		t.Errorf("RTS mask %#x", m)
	}
	if m := srdStates(1, false)[2].mask; m != 1|1<<16 {
		t.Errorf("RTS mask without RNR retry %#x", m)
	}
}
