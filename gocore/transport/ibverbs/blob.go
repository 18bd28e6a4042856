package ibverbs

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
//	u8 link layer  u8 port  u32 lid  16 B gid  u8 gid type  u8 active MTU (ibv_mtu)
//	u32 n, then n regions: u32 id, u64 addr, u64 len, u32 rkey, u32 signal rkey, u8 kind
//	u32 n, then n queue pairs: u32 peer rank, u32 qpn, u32 psn
//
// One RC QP exists per peer, so the blob lists the QPN this rank created for
// each peer; peer r reads the entry for itself. The signal rkey is the key of
// the region's MR without relaxed ordering (equal to rkey unless
// WithRelaxedOrdering), which flag writes use. The region kind is for
// diagnostics only: on RC peers do not need it.
var blobFormat = connblob.Format{Name: "ibverbs", Magic: 0x42494b4d /* "MKIB" */, Version: 1, Label: "mkernel ibverbs blob v1"}

type blobRegion struct {
	ID         transport.BufferID
	Addr, Len  uint64
	RKey       uint32
	SignalRKey uint32
	Kind       memreg.Kind
}

func (r *blobRegion) span() connblob.Span { return connblob.Span{ID: r.ID, Addr: r.Addr, Len: r.Len} }

type blobQP struct {
	Peer     int
	QPN, PSN uint32
}

type blob struct {
	Rank, World int
	LinkLayer   verbs.LinkLayer
	Port        uint8
	LID         uint16
	GID         verbs.GID
	GIDType     verbs.GIDType
	MTU         verbs.MTU
	Regions     []blobRegion
	QPs         []blobQP
}

func (b *blob) encode(key []byte) ([]byte, error) {
	data, err := blobFormat.Encode(key, connblob.Header{Rank: b.Rank, World: b.World}, func(w *wire.Writer) {
		w.U8(uint8(b.LinkLayer))
		w.U8(b.Port)
		w.U32(uint32(b.LID))
		w.B = append(w.B, b.GID[:]...)
		w.U8(uint8(b.GIDType))
		w.U8(uint8(b.MTU))
		w.U32(uint32(len(b.Regions)))
		for _, r := range b.Regions {
			w.U32(uint32(r.ID))
			w.U64(r.Addr)
			w.U64(r.Len)
			w.U32(r.RKey)
			w.U32(r.SignalRKey)
			w.U8(uint8(r.Kind))
		}
		w.U32(uint32(len(b.QPs)))
		for _, q := range b.QPs {
			w.U32(uint32(q.Peer))
			w.U32(q.QPN)
			w.U32(q.PSN)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%d regions, %d queue pairs: %w", len(b.Regions), len(b.QPs), err)
	}
	return data, nil
}

// decodeBlob parses and authenticates a peer's blob. Malformed input is
// ErrProtocol, a bad MAC ErrAuth.
func decodeBlob(data, key []byte) (*blob, error) {
	b := &blob{}
	var lid uint32
	h, err := blobFormat.Decode(data, key, func(r *wire.Reader) error {
		b.LinkLayer = verbs.LinkLayer(r.U8())
		b.Port = r.U8()
		lid = r.U32()
		for i := range b.GID {
			b.GID[i] = r.U8()
		}
		b.GIDType = verbs.GIDType(r.U8())
		b.MTU = verbs.MTU(r.U8())
		n, err := connblob.ReadCount(r, "regions", connblob.MaxRegions)
		if err != nil {
			return err
		}
		for i := uint32(0); i < n && r.Err() == nil; i++ {
			b.Regions = append(b.Regions, blobRegion{
				ID: transport.BufferID(r.U32()), Addr: r.U64(), Len: r.U64(), RKey: r.U32(), SignalRKey: r.U32(), Kind: memreg.Kind(r.U8()),
			})
		}
		if n, err = connblob.ReadCount(r, "queue pairs", transport.MaxBlobSize/12); err != nil {
			return err
		}
		for i := uint32(0); i < n && r.Err() == nil; i++ {
			b.QPs = append(b.QPs, blobQP{Peer: int(r.U32()), QPN: r.U32(), PSN: r.U32()})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	b.Rank, b.World = h.Rank, h.World
	if err := b.check(lid); err != nil {
		return nil, blobFormat.Invalid(h, err)
	}
	b.LID = uint16(lid)
	return b, nil
}

func (b *blob) check(lid uint32) error {
	switch {
	case b.LinkLayer != verbs.LinkLayerInfiniBand && b.LinkLayer != verbs.LinkLayerEthernet:
		return fmt.Errorf("link layer %d", b.LinkLayer)
	case b.Port == 0:
		return fmt.Errorf("port 0")
	case lid > 0xffff:
		return fmt.Errorf("LID %#x", lid)
	case b.MTU.Bytes() == 0:
		return fmt.Errorf("MTU enum %d", b.MTU)
	case b.GIDType > verbs.GIDTypeRoCEv2:
		return fmt.Errorf("GID type %d", b.GIDType)
	}
	if err := connblob.CheckRegions(b.Regions, (*blobRegion).span); err != nil {
		return err
	}
	peers := make(map[int]bool, len(b.QPs))
	for _, q := range b.QPs {
		if q.Peer < 0 || q.Peer >= b.World || q.Peer == b.Rank || peers[q.Peer] {
			return fmt.Errorf("queue pair entry for rank %d", q.Peer)
		}
		peers[q.Peer] = true
		if q.QPN == 0 || q.QPN > 0xffffff || q.PSN > 0xffffff {
			return fmt.Errorf("queue pair for rank %d: qpn %#x psn %#x", q.Peer, q.QPN, q.PSN)
		}
	}
	return nil
}

// qpFor returns the entry the blob's rank made for peer.
func (b *blob) qpFor(peer int) (blobQP, bool) {
	for _, q := range b.QPs {
		if q.Peer == peer {
			return q, true
		}
	}
	return blobQP{}, false
}
