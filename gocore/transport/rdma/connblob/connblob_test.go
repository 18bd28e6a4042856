package connblob

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/internal/wire"
)

var (
	testKey = []byte("0123456789abcdef0123456789abcdef")
	format  = Format{Name: "test", Magic: 0x54534b4d, Version: 3, Label: "mkernel test blob v3"}
)

// A toy body: a region list, as the backends have.
func encode(t *testing.T, key []byte, h Header, spans []Span) []byte {
	t.Helper()
	data, err := format.Encode(key, h, func(w *wire.Writer) {
		w.U32(uint32(len(spans)))
		for _, s := range spans {
			w.U32(uint32(s.ID))
			w.U64(s.Addr)
			w.U64(s.Len)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func decode(data, key []byte) (Header, []Span, error) {
	var spans []Span
	h, err := format.Decode(data, key, func(r *wire.Reader) error {
		n, err := ReadCount(r, "regions", MaxRegions)
		if err != nil {
			return err
		}
		for i := uint32(0); i < n && r.Err() == nil; i++ {
			spans = append(spans, Span{ID: transport.BufferID(r.U32()), Addr: r.U64(), Len: r.U64()})
		}
		return nil
	})
	if err == nil {
		if err = CheckRegions(spans, func(s *Span) Span { return *s }); err != nil {
			err = format.Invalid(h, err)
		}
	}
	return h, spans, err
}

var sample = []Span{{ID: 1, Addr: 0x7f0000000000, Len: 1 << 20}, {ID: 9, Addr: 0x7e0000000000, Len: 64}}

func TestRoundTrip(t *testing.T) {
	for _, key := range [][]byte{testKey, nil} {
		data := encode(t, key, Header{Rank: 1, World: 3}, sample)
		h, spans, err := decode(data, key)
		if err != nil || h != (Header{Rank: 1, World: 3}) || len(spans) != 2 || spans[1] != sample[1] {
			t.Errorf("key %v: %+v %+v %v", key != nil, h, spans, err)
		}
	}
}

// TestTampered: every truncation, trailing byte, flipped bit, other key,
// missing MAC or oversized blob is refused as ErrProtocol or ErrAuth.
func TestTampered(t *testing.T) {
	good := encode(t, testKey, Header{Rank: 1, World: 3}, sample)
	for n := range len(good) {
		if _, _, err := decode(good[:n], testKey); !errors.Is(err, transport.ErrProtocol) {
			t.Fatalf("cut to %d of %d bytes: %v, want ErrProtocol", n, len(good), err)
		}
	}
	if _, _, err := decode(append(bytes.Clone(good), 0), testKey); !errors.Is(err, transport.ErrProtocol) {
		t.Errorf("trailing byte: %v", err)
	}
	for i := range len(good) - 36 { // not the MAC itself
		bad := bytes.Clone(good)
		bad[i] ^= 0x10
		if _, _, err := decode(bad, testKey); !errors.Is(err, transport.ErrAuth) && !errors.Is(err, transport.ErrProtocol) {
			t.Fatalf("bit flip at byte %d accepted: %v", i, err)
		}
	}
	if _, _, err := decode(good, []byte("another job's key, 32 bytes long")); !errors.Is(err, transport.ErrAuth) {
		t.Errorf("other key: %v, want ErrAuth", err)
	}
	unsigned := encode(t, nil, Header{Rank: 1, World: 3}, sample)
	if _, _, err := decode(unsigned, testKey); !errors.Is(err, transport.ErrAuth) {
		t.Errorf("a blob without MAC where a key is set: %v, want ErrAuth", err)
	}
	if _, _, err := decode(bytes.Repeat([]byte{0}, transport.MaxBlobSize+1), nil); !errors.Is(err, transport.ErrProtocol) {
		t.Errorf("oversized blob: %v", err)
	}
	bad := bytes.Clone(good)
	bad[0] ^= 0xff
	if _, _, err := decode(bad, testKey); !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), "not an test blob (magic") {
		t.Errorf("bad magic: %v", err)
	}
	bad = bytes.Clone(good)
	bad[4] = 9
	if _, _, err := decode(bad, testKey); !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), "test blob version 9, want 3") {
		t.Errorf("bad version: %v", err)
	}
}

// TestImpossible: well-formed, authentic blobs of impossible contents.
func TestImpossible(t *testing.T) {
	for name, tc := range map[string]struct {
		h     Header
		spans []Span
	}{
		"rank outside world": {Header{Rank: 3, World: 3}, sample},
		"negative rank":      {Header{Rank: -1, World: 3}, sample},
		"zero world":         {Header{Rank: 0, World: 0}, sample},
		"duplicate region":   {Header{Rank: 0, World: 1}, []Span{{ID: 1, Addr: 1, Len: 1}, {ID: 1, Addr: 8, Len: 1}}},
		"empty region":       {Header{Rank: 0, World: 1}, []Span{{ID: 1, Addr: 1}}},
		"wrapping region":    {Header{Rank: 0, World: 1}, []Span{{ID: 1, Addr: ^uint64(0) - 10, Len: 64}}},
	} {
		_, _, err := decode(encode(t, testKey, tc.h, tc.spans), testKey)
		if !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), "test blob of rank") {
			t.Errorf("%s: %v, want ErrProtocol naming the blob", name, err)
		}
	}
	if err := CheckPeer(Header{Rank: 1, World: 3}, 2, 3); !errors.Is(err, transport.ErrProtocol) {
		t.Errorf("rank 1's blob in rank 2's place: %v", err)
	}
	if err := CheckPeer(Header{Rank: 1, World: 3}, 1, 4); !errors.Is(err, transport.ErrProtocol) {
		t.Errorf("a blob of another world: %v", err)
	}
	if err := CheckPeer(Header{Rank: 1, World: 3}, 1, 3); err != nil {
		t.Errorf("the right blob: %v", err)
	}
}

func TestLimits(t *testing.T) {
	var many []Span
	for i := range MaxRegions + 1 {
		many = append(many, Span{ID: transport.BufferID(i), Addr: 1, Len: 1})
	}
	_, err := format.Encode(testKey, Header{World: 1}, func(w *wire.Writer) {
		for _, s := range many {
			w.U64(s.Addr)
			w.U64(s.Len)
		}
	})
	if !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("a blob over MaxBlobSize: %v, want ErrInvalid", err)
	}
	// A count over the limit is refused before the list is read.
	data, _ := format.Encode(testKey, Header{World: 1}, func(w *wire.Writer) { w.U32(MaxRegions + 1) })
	if _, _, err := decode(data, testKey); !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), "more than") {
		t.Errorf("region count over the limit: %v", err)
	}
}
