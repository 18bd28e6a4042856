package shm

import (
	"errors"
	"testing"

	"github.com/mkernel/mkernel/gocore/transport"
)

func TestCreateOpenShareMemory(t *testing.T) {
	a, err := Create("test", 10000)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Len()%4096 != 0 || a.Len() < 10000 {
		t.Fatalf("length %d not page-rounded", a.Len())
	}
	b, err := Open(a.Path(), 10000)
	if err != nil {
		t.Fatal(err)
	}
	a.Bytes()[9999] = 42
	if b.Bytes()[9999] != 42 {
		t.Fatal("a write through one mapping is not visible through the other")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := Open(a.Path(), a.Len()+1); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("Open past the end: %v, want ErrInvalid", err)
	}
	if _, err := Open("/proc/self/fd/999999", 10); err == nil {
		t.Fatal("Open of a missing path succeeded")
	}
}
