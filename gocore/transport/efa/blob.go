package efa

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
//	u32 magic "MKEF"  u8 version
//	u32 rank  u32 world
//	16 B gid  u32 qpn  u32 qkey
//	u32 n, then n regions: u32 id, u64 addr, u64 len, u32 rkey, u8 kind
//	bytes mac: HMAC-SHA256 of everything before it under the job key (empty without one)
//
// SRD is connectionless: one QP per endpoint serves every peer, addressed by
// an address handle on the GID plus the QP number and qkey.
const (
	blobMagic   = 0x46454b4d // "MKEF"
	blobVersion = 1
	maxRegions  = 4096
	macLabel    = "mkernel efa blob v1"

	kindHost   = 1
	kindDevice = 2
)

type blobRegion struct {
	ID        transport.BufferID
	Addr, Len uint64
	RKey      uint32
	Kind      uint8
}

type blob struct {
	Rank, World int
	GID         verbs.GID
	QPN, QKey   uint32
	Regions     []blobRegion
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
	w.B = append(w.B, b.GID[:]...)
	w.U32(b.QPN)
	w.U32(b.QKey)
	w.U32(uint32(len(b.Regions)))
	for _, r := range b.Regions {
		w.U32(uint32(r.ID))
		w.U64(r.Addr)
		w.U64(r.Len)
		w.U32(r.RKey)
		w.U8(r.Kind)
	}
	var mac []byte
	if len(key) > 0 {
		mac = blobMAC(key, w.B)
	}
	w.Bytes(mac)
	if len(w.B) > transport.MaxBlobSize {
		return nil, fmt.Errorf("connection blob of %d bytes (%d regions) exceeds %d: %w", len(w.B), len(b.Regions), transport.MaxBlobSize, transport.ErrInvalid)
	}
	return w.B, nil
}

// decodeBlob parses and authenticates a peer's blob: malformed input is
// ErrProtocol, a bad MAC ErrAuth.
func decodeBlob(data, key []byte) (*blob, error) {
	if len(data) > transport.MaxBlobSize {
		return nil, fmt.Errorf("blob of %d bytes exceeds %d: %w", len(data), transport.MaxBlobSize, transport.ErrProtocol)
	}
	r := wire.NewReader(data)
	if m := r.U32(); r.Err() == nil && m != blobMagic {
		return nil, fmt.Errorf("not an efa blob (magic %#x): %w", m, transport.ErrProtocol)
	}
	if v := r.U8(); r.Err() == nil && v != blobVersion {
		return nil, fmt.Errorf("efa blob version %d, want %d: %w", v, blobVersion, transport.ErrProtocol)
	}
	b := &blob{Rank: int(r.U32()), World: int(r.U32())}
	for i := range b.GID {
		b.GID[i] = r.U8()
	}
	b.QPN = r.U32()
	b.QKey = r.U32()
	n := r.U32()
	if r.Err() == nil && n > maxRegions {
		return nil, fmt.Errorf("blob lists %d regions, more than %d: %w", n, maxRegions, transport.ErrProtocol)
	}
	for i := uint32(0); i < n && r.Err() == nil; i++ {
		b.Regions = append(b.Regions, blobRegion{ID: transport.BufferID(r.U32()), Addr: r.U64(), Len: r.U64(), RKey: r.U32(), Kind: r.U8()})
	}
	mac := r.Bytes(64)
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("malformed efa blob: %w: %w", err, transport.ErrProtocol)
	}
	body := data[:len(data)-4-len(mac)]
	if len(key) > 0 && !hmac.Equal(mac, blobMAC(key, body)) {
		return nil, fmt.Errorf("efa blob of rank %d: %w: MAC does not match the job key", b.Rank, transport.ErrAuth)
	}
	if err := b.check(); err != nil {
		return nil, fmt.Errorf("efa blob of rank %d: %w: %w", b.Rank, err, transport.ErrProtocol)
	}
	return b, nil
}

func (b *blob) check() error {
	switch {
	case b.World < 1 || b.Rank < 0 || b.Rank >= b.World:
		return fmt.Errorf("rank %d of %d", b.Rank, b.World)
	case b.GID.IsZero():
		return fmt.Errorf("zero GID")
	case b.QPN == 0 || b.QPN > 0xffffff:
		return fmt.Errorf("qpn %#x", b.QPN)
	case b.QKey == 0 || b.QKey&0x80000000 != 0:
		return fmt.Errorf("qkey %#x", b.QKey)
	}
	seen := make(map[transport.BufferID]bool, len(b.Regions))
	for _, r := range b.Regions {
		if seen[r.ID] {
			return fmt.Errorf("region %d listed twice", r.ID)
		}
		seen[r.ID] = true
		if r.Len == 0 || r.Addr+r.Len < r.Addr || (r.Kind != kindHost && r.Kind != kindDevice) {
			return fmt.Errorf("region %d: [%#x, +%d) kind %d", r.ID, r.Addr, r.Len, r.Kind)
		}
	}
	return nil
}
