package ibverbs

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
	"github.com/mkernel/mkernel/gocore/transport/internal/wire"
)

// The connection blob (Transport.Address), little-endian:
//
//	u32 magic "MKIB"  u8 version
//	u32 rank  u32 world
//	u8 link layer  u8 port  u32 lid  16 B gid  u8 gid type  u8 active MTU (ibv_mtu)
//	u32 n, then n regions: u32 id, u64 addr, u64 len, u32 rkey, u32 signal rkey, u8 kind
//	u32 n, then n queue pairs: u32 peer rank, u32 qpn, u32 psn
//	bytes mac: HMAC-SHA256 of everything before it under the job key (empty without one)
//
// One RC QP exists per peer, so the blob lists the QPN this rank created for
// each peer; peer r reads the entry for itself. The signal rkey is the key of
// the region's MR without relaxed ordering (equal to rkey unless
// WithRelaxedOrdering), which flag writes use.
const (
	blobMagic   = 0x42494b4d // "MKIB"
	blobVersion = 1
	maxRegions  = 4096
	macLabel    = "mkernel ibverbs blob v1"
)

// regionKind says what memory a region is; peers do not need it, it is in
// the blob for diagnostics.
const (
	kindHost   = 1
	kindDevice = 2
)

type blobRegion struct {
	ID         transport.BufferID
	Addr, Len  uint64
	RKey       uint32
	SignalRKey uint32
	Kind       uint8
}

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

func blobMAC(key, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(macLabel))
	m.Write(body)
	return m.Sum(nil)
}

func (b *blob) encode(key []byte) ([]byte, error) {
	var w wire.Writer
	w.U32(blobMagic)
	w.U8(blobVersion)
	w.U32(uint32(b.Rank))
	w.U32(uint32(b.World))
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
		w.U8(r.Kind)
	}
	w.U32(uint32(len(b.QPs)))
	for _, q := range b.QPs {
		w.U32(uint32(q.Peer))
		w.U32(q.QPN)
		w.U32(q.PSN)
	}
	var mac []byte
	if len(key) > 0 {
		mac = blobMAC(key, w.B)
	}
	w.Bytes(mac)
	if len(w.B) > transport.MaxBlobSize {
		return nil, fmt.Errorf("connection blob of %d bytes (%d regions, %d queue pairs) exceeds %d: %w",
			len(w.B), len(b.Regions), len(b.QPs), transport.MaxBlobSize, transport.ErrInvalid)
	}
	return w.B, nil
}

// decodeBlob parses and authenticates a peer's blob. Malformed input is
// ErrProtocol, a bad MAC ErrAuth.
func decodeBlob(data, key []byte) (*blob, error) {
	if len(data) > transport.MaxBlobSize {
		return nil, fmt.Errorf("blob of %d bytes exceeds %d: %w", len(data), transport.MaxBlobSize, transport.ErrProtocol)
	}
	r := wire.NewReader(data)
	if m := r.U32(); r.Err() == nil && m != blobMagic {
		return nil, fmt.Errorf("not an ibverbs blob (magic %#x): %w", m, transport.ErrProtocol)
	}
	if v := r.U8(); r.Err() == nil && v != blobVersion {
		return nil, fmt.Errorf("ibverbs blob version %d, want %d: %w", v, blobVersion, transport.ErrProtocol)
	}
	b := &blob{}
	b.Rank = int(r.U32())
	b.World = int(r.U32())
	b.LinkLayer = verbs.LinkLayer(r.U8())
	b.Port = r.U8()
	lid := r.U32()
	for i := range b.GID {
		b.GID[i] = r.U8()
	}
	b.GIDType = verbs.GIDType(r.U8())
	b.MTU = verbs.MTU(r.U8())
	n := r.U32()
	if r.Err() == nil && n > maxRegions {
		return nil, fmt.Errorf("blob lists %d regions, more than %d: %w", n, maxRegions, transport.ErrProtocol)
	}
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		b.Regions = append(b.Regions, blobRegion{
			ID: transport.BufferID(r.U32()), Addr: r.U64(), Len: r.U64(), RKey: r.U32(), SignalRKey: r.U32(), Kind: r.U8(),
		})
	}
	n = r.U32()
	if r.Err() == nil && n > transport.MaxBlobSize/12 {
		return nil, fmt.Errorf("blob lists %d queue pairs: %w", n, transport.ErrProtocol)
	}
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		b.QPs = append(b.QPs, blobQP{Peer: int(r.U32()), QPN: r.U32(), PSN: r.U32()})
	}
	mac := r.Bytes(64)
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("malformed ibverbs blob: %w: %w", err, transport.ErrProtocol)
	}
	bodyLen := len(data) - 4 - len(mac) // the MAC is the last field
	if len(key) > 0 && !hmac.Equal(mac, blobMAC(key, data[:bodyLen])) {
		return nil, fmt.Errorf("ibverbs blob of rank %d: %w: MAC does not match the job key", b.Rank, transport.ErrAuth)
	}
	if err := b.check(lid); err != nil {
		return nil, fmt.Errorf("ibverbs blob of rank %d: %w: %w", b.Rank, err, transport.ErrProtocol)
	}
	b.LID = uint16(lid)
	return b, nil
}

func (b *blob) check(lid uint32) error {
	switch {
	case b.World < 1 || b.Rank < 0 || b.Rank >= b.World:
		return fmt.Errorf("rank %d of %d", b.Rank, b.World)
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
	seen := make(map[transport.BufferID]bool, len(b.Regions))
	for _, r := range b.Regions {
		if seen[r.ID] {
			return fmt.Errorf("region %d listed twice", r.ID)
		}
		seen[r.ID] = true
		if r.Len == 0 || r.Addr+r.Len < r.Addr {
			return fmt.Errorf("region %d: [%#x, +%d)", r.ID, r.Addr, r.Len)
		}
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
