package bootstrap

import (
	"bytes"
	"testing"
)

func TestDeriveKeySameOnEveryRank(t *testing.T) {
	checkLeaks(t)
	ss := startJob(t, 3)
	defer closeAll(ss)
	k0 := ss[0].DeriveKey("transport")
	if len(k0) != 32 {
		t.Fatalf("key of %d bytes, want 32", len(k0))
	}
	for _, s := range ss[1:] {
		if got := s.DeriveKey("transport"); !bytes.Equal(got, k0) {
			t.Errorf("rank %d derived %x, rank 0 %x", s.Rank(), got, k0)
		}
		if s.RootAddr() != ss[0].RootAddr() || s.RootAddr() == "" {
			t.Errorf("rank %d root address %q, rank 0 %q", s.Rank(), s.RootAddr(), ss[0].RootAddr())
		}
	}
	if bytes.Equal(ss[0].DeriveKey("other"), k0) {
		t.Error("different labels derived the same key")
	}
}
