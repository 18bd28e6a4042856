package efa

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
	"github.com/mkernel/mkernel/gocore/transport/rdma/memreg"
)

// The envelope (magic, version, MAC, sizes, rank and region checks) is
// connblob's and tested there; these are the efa fields.

var testKey = []byte("0123456789abcdef0123456789abcdef")

func sampleBlob() blob {
	g, _ := verbs.ParseGID("fe80::4b2:c4ff:fe5d:1f4b")
	return blob{Rank: 1, World: 3, GID: g, QPN: 0x1a2b3c, QKey: 0x11223344, Regions: []blobRegion{
		{ID: 1, Addr: 0x7f0000000000, Len: 1 << 20, RKey: 7, Kind: memreg.Host},
		{ID: 9, Addr: 0x7e0000000000, Len: 64, RKey: 8, Kind: memreg.Device},
	}}
}

func TestBlobRoundTrip(t *testing.T) {
	for _, key := range [][]byte{testKey, nil} {
		b := sampleBlob()
		data, err := b.encode(key)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeBlob(data, key)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(&b, got); d != "" {
			t.Errorf("(-want +got):\n%s", d)
		}
		for n := range len(data) {
			if _, err := decodeBlob(data[:n], key); !errors.Is(err, transport.ErrProtocol) {
				t.Fatalf("cut to %d bytes: %v", n, err)
			}
		}
	}
}

func TestBlobMalformed(t *testing.T) {
	ibBlob := []byte{0x4d, 0x4b, 0x49, 0x42, 1} // the ibverbs magic
	if _, err := decodeBlob(ibBlob, testKey); !errors.Is(err, transport.ErrProtocol) {
		t.Errorf("an ibverbs blob: %v", err)
	}
	for name, edit := range map[string]func(*blob){
		"rank":             func(b *blob) { b.Rank = 3 },
		"zero GID":         func(b *blob) { b.GID = verbs.GID{} },
		"QPN 0":            func(b *blob) { b.QPN = 0 },
		"QPN over 24 bits": func(b *blob) { b.QPN = 1 << 24 },
		"controlled qkey":  func(b *blob) { b.QKey = 0x80000001 },
		"duplicate region": func(b *blob) { b.Regions[1].ID = 1 },
		"region kind":      func(b *blob) { b.Regions[0].Kind = 7 },
		"empty region":     func(b *blob) { b.Regions[0].Len = 0 },
	} {
		x := sampleBlob()
		edit(&x)
		data, _ := x.encode(testKey)
		if _, err := decodeBlob(data, testKey); !errors.Is(err, transport.ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
}
