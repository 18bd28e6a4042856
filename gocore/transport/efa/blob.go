package efa

import (
	"fmt"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
	"github.com/mkernel/mkernel/gocore/transport/internal/wire"
	"github.com/mkernel/mkernel/gocore/transport/rdma/connblob"
	"github.com/mkernel/mkernel/gocore/transport/rdma/memreg"
)

// The connection blob (Transport.Address), in connblob's envelope:
//
//	16 B gid  u32 qpn  u32 qkey
//	u32 n, then n regions: u32 id, u64 addr, u64 len, u32 rkey, u8 kind
//
// SRD is connectionless: one QP per endpoint serves every peer, addressed by
// an address handle on the GID plus the QP number and qkey.
var blobFormat = connblob.Format{Name: "efa", Magic: 0x46454b4d /* "MKEF" */, Version: 1, Label: "mkernel efa blob v1"}

type blobRegion struct {
	ID        transport.BufferID
	Addr, Len uint64
	RKey      uint32
	Kind      memreg.Kind
}

func (r *blobRegion) span() connblob.Span { return connblob.Span{ID: r.ID, Addr: r.Addr, Len: r.Len} }

type blob struct {
	Rank, World int
	GID         verbs.GID
	QPN, QKey   uint32
	Regions     []blobRegion
}

func (b *blob) encode(key []byte) ([]byte, error) {
	data, err := blobFormat.Encode(key, connblob.Header{Rank: b.Rank, World: b.World}, func(w *wire.Writer) {
		w.B = append(w.B, b.GID[:]...)
		w.U32(b.QPN)
		w.U32(b.QKey)
		w.U32(uint32(len(b.Regions)))
		for _, r := range b.Regions {
			w.U32(uint32(r.ID))
			w.U64(r.Addr)
			w.U64(r.Len)
			w.U32(r.RKey)
			w.U8(uint8(r.Kind))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%d regions: %w", len(b.Regions), err)
	}
	return data, nil
}

// decodeBlob parses and authenticates a peer's blob: malformed input is
// ErrProtocol, a bad MAC ErrAuth.
func decodeBlob(data, key []byte) (*blob, error) {
	b := &blob{}
	h, err := blobFormat.Decode(data, key, func(r *wire.Reader) error {
		for i := range b.GID {
			b.GID[i] = r.U8()
		}
		b.QPN = r.U32()
		b.QKey = r.U32()
		n, err := connblob.ReadCount(r, "regions", connblob.MaxRegions)
		if err != nil {
			return err
		}
		for i := uint32(0); i < n && r.Err() == nil; i++ {
			b.Regions = append(b.Regions, blobRegion{ID: transport.BufferID(r.U32()), Addr: r.U64(), Len: r.U64(), RKey: r.U32(), Kind: memreg.Kind(r.U8())})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	b.Rank, b.World = h.Rank, h.World
	if err := b.check(); err != nil {
		return nil, blobFormat.Invalid(h, err)
	}
	return b, nil
}

func (b *blob) check() error {
	switch {
	case b.GID.IsZero():
		return fmt.Errorf("zero GID")
	case b.QPN == 0 || b.QPN > 0xffffff:
		return fmt.Errorf("qpn %#x", b.QPN)
	case b.QKey == 0 || b.QKey&0x80000000 != 0:
		return fmt.Errorf("qkey %#x", b.QKey)
	}
	for _, r := range b.Regions {
		// The kind matters here, unlike on RC: flags must be host memory.
		if r.Kind != memreg.Host && r.Kind != memreg.Device {
			return fmt.Errorf("region %d: kind %d", r.ID, r.Kind)
		}
	}
	return connblob.CheckRegions(b.Regions, (*blobRegion).span)
}
