package ibverbs

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
	"github.com/mkernel/mkernel/gocore/transport/rdma/connblob"
	"github.com/mkernel/mkernel/gocore/transport/rdma/memreg"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func sampleBlob() blob {
	g, _ := verbs.ParseGID("::ffff:10.1.2.3")
	return blob{
		Rank: 2, World: 4, LinkLayer: verbs.LinkLayerEthernet, Port: 1, LID: 0, GID: g, GIDType: verbs.GIDTypeRoCEv2, MTU: 3,
		Regions: []blobRegion{
			{ID: 1, Addr: 0x7f0000001000, Len: 4 << 20, RKey: 0x1234, SignalRKey: 0x1234, Kind: memreg.Host},
			{ID: 3, Addr: 0x7f2000000000, Len: 4096, RKey: 0x99, SignalRKey: 0x9a, Kind: memreg.Device},
		},
		QPs: []blobQP{{Peer: 0, QPN: 0x101, PSN: 0xabcdef}, {Peer: 1, QPN: 0x102, PSN: 1}, {Peer: 3, QPN: 0xffffff, PSN: 0}},
	}
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
			t.Fatalf("decode (key %v): %v", key != nil, err)
		}
		if d := cmp.Diff(&b, got); d != "" {
			t.Errorf("round trip (-want +got):\n%s", d)
		}
		if q, ok := got.qpFor(3); !ok || q.QPN != 0xffffff {
			t.Errorf("qpFor(3) = %+v, %v", q, ok)
		}
		if _, ok := got.qpFor(2); ok {
			t.Error("a blob has no queue pair for its own rank")
		}
	}
	ib := blob{Rank: 0, World: 2, LinkLayer: verbs.LinkLayerInfiniBand, Port: 1, LID: 0xbeef, MTU: 5,
		QPs: []blobQP{{Peer: 1, QPN: 7, PSN: 9}}}
	data, err := ib.encode(testKey)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decodeBlob(data, testKey); err != nil || got.LID != 0xbeef {
		t.Errorf("IB blob: %+v, %v", got, err)
	}
}

func TestBlobMalformed(t *testing.T) {
	b := sampleBlob()
	good, err := b.encode(testKey)
	if err != nil {
		t.Fatal(err)
	}
	// The envelope is connblob's (tested there); the ibverbs fields parse
	// without panicking however the blob is cut.
	for n := range len(good) {
		if _, err := decodeBlob(good[:n], testKey); !errors.Is(err, transport.ErrProtocol) {
			t.Fatalf("blob cut to %d of %d bytes: %v, want ErrProtocol", n, len(good), err)
		}
	}

	// Well-formed encodings of impossible contents.
	for name, edit := range map[string]func(*blob){
		"rank outside world":   func(b *blob) { b.Rank = 4 },
		"zero world":           func(b *blob) { b.World, b.Rank = 0, 0 },
		"link layer":           func(b *blob) { b.LinkLayer = 7 },
		"port 0":               func(b *blob) { b.Port = 0 },
		"MTU enum":             func(b *blob) { b.MTU = 9 },
		"GID type":             func(b *blob) { b.GIDType = 5 },
		"duplicate region":     func(b *blob) { b.Regions[1].ID = b.Regions[0].ID },
		"empty region":         func(b *blob) { b.Regions[0].Len = 0 },
		"wrapping region":      func(b *blob) { b.Regions[0].Addr = ^uint64(0) - 10 },
		"QP for itself":        func(b *blob) { b.QPs[0].Peer = 2 },
		"QP for rank past end": func(b *blob) { b.QPs[0].Peer = 9 },
		"duplicate QP peer":    func(b *blob) { b.QPs[1].Peer = 0 },
		"QPN 0":                func(b *blob) { b.QPs[0].QPN = 0 },
		"QPN over 24 bits":     func(b *blob) { b.QPs[0].QPN = 1 << 24 },
		"PSN over 24 bits":     func(b *blob) { b.QPs[0].PSN = 1 << 24 },
	} {
		x := sampleBlob()
		edit(&x)
		data, err := x.encode(testKey)
		if err != nil {
			t.Fatalf("%s: encode: %v", name, err)
		}
		if _, err := decodeBlob(data, testKey); !errors.Is(err, transport.ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
}

func TestBlobTooLarge(t *testing.T) {
	b := sampleBlob()
	b.Regions = nil
	for i := range connblob.MaxRegions {
		b.Regions = append(b.Regions, blobRegion{ID: transport.BufferID(i), Addr: 1, Len: 1})
	}
	if _, err := b.encode(testKey); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("a blob over MaxBlobSize: %v, want ErrInvalid", err)
	}
}
