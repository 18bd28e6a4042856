package capi

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mkernel/mkernel/gocore/fifo"
)

// TestFIFOLayoutMatchesC compares Go's view of csrc/include/mkernel/fifo.h with the C
// compiler's, field by field.
func TestFIFOLayoutMatchesC(t *testing.T) {
	goView, cView := fifo.Layout(), fifoLayoutC()
	if len(goView) != len(cView) {
		t.Fatalf("Go lists %d layout entries, C %d", len(goView), len(cView))
	}
	for i, f := range goView {
		if f.Offset != cView[i] {
			t.Errorf("%s: Go %d, C %d", f.Name, f.Offset, cView[i])
		}
	}
}

// TestFIFOCProducerGoConsumer pushes from C's mk_fifo_push into a ring Go initialised, in
// both slot formats (C's publish follows the ring's ctrl.format).
func TestFIFOCProducerGoConsumer(t *testing.T) {
	for _, f := range []fifo.Format{fifo.FormatSeq, fifo.FormatLL} {
		t.Run(f.String(), func(t *testing.T) {
			mem, err := unix.Mmap(-1, 0, fifo.BytesFormat(4, f), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(mem)
			r, err := fifo.InitFormat(mem, 4, fifo.ClockMonotonic, f)
			if err != nil {
				t.Fatal(err)
			}
			bytesOf := func(i uint64) uint64 { return 100*i + i<<40 } // both 32-bit halves
			for i := range 3 {
				ticket, rc := fifoPushFromC(mem, uint16(i+1), bytesOf(uint64(i)))
				if rc != 0 || ticket != uint64(i) {
					t.Fatalf("push %d from C: rc %d ticket %d", i, rc, ticket)
				}
			}
			for pos := uint64(0); pos < 3; pos++ {
				c := r.Published(pos)
				if c == nil {
					t.Fatalf("ticket %d not published", pos)
				}
				if c.Kind != fifo.KindWriteSignal || c.Peer != uint16(pos+1) || c.Bytes != bytesOf(pos) || c.ArrivalSlot != 7 || c.ArrivalSeq != 42 {
					t.Fatalf("ticket %d read back as %+v", pos, *c)
				}
				if now := fifo.MonotonicNanos(); c.EnqueueNS == 0 || c.EnqueueNS > now {
					t.Fatalf("C timestamp %d is not in Go's monotonic domain (now %d)", c.EnqueueNS, now)
				}
			}
		})
	}
}

// TestFIFOFailFirstWinsAcrossLanguages: C's mk_fifo_fail and Go's Ring.Fail claim the
// same record; whoever comes first keeps it, and the loser changes nothing.
func TestFIFOFailFirstWinsAcrossLanguages(t *testing.T) {
	for _, cFirst := range []bool{true, false} {
		mem, err := unix.Mmap(-1, 0, fifo.Bytes(4), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		r, err := fifo.Init(mem, 4, fifo.ClockMonotonic)
		if err != nil {
			t.Fatal(err)
		}
		var won, lost bool
		if cFirst {
			won, lost = fifoFailFromC(mem, fifo.ErrProducer, 3, 11), r.Fail(fifo.ErrProxy, 5, 22)
		} else {
			won, lost = r.Fail(fifo.ErrProducer, 3, 11), fifoFailFromC(mem, fifo.ErrProxy, 5, 22)
		}
		code, peer, ticket := r.Failure()
		if !won || lost || code != fifo.ErrProducer || peer != 3 || ticket != 11 || r.Ctrl().ErrorState != fifo.ErrorSet {
			t.Fatalf("C first %v: won %v lost %v, record %d/%d/%d state %d", cFirst, won, lost, code, peer, ticket, r.Ctrl().ErrorState)
		}
		unix.Munmap(mem)
	}
}
