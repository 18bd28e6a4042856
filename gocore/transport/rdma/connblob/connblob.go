// Package connblob encodes and authenticates the connection blobs
// (Transport.Address) of the verbs backends. Every blob is, little-endian:
//
//	u32 magic  u8 version
//	u32 rank  u32 world
//	the backend's own fields (Format's body functions)
//	bytes mac: HMAC-SHA256 of the label and everything before it under the
//	           job key (empty without one)
//
// The package owns that envelope (size limits, magic, version, MAC) and the
// checks every backend makes of its contents (rank inside world, a region
// list without duplicates or empty or wrapping ranges); the fields between
// header and MAC are the backend's.
package connblob

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/internal/wire"
)

// MaxRegions bounds the regions one blob may list.
const MaxRegions = 4096

// macSize bounds the MAC field a decoder accepts (HMAC-SHA256 is 32 bytes).
const macSize = 64

// Format names one backend's blob.
type Format struct {
	Name    string // the backend, for error messages ("efa blob of rank 2")
	Magic   uint32
	Version uint8
	Label   string // the MAC's domain separation ("mkernel efa blob v1")
}

// Header is what every blob starts with after magic and version.
type Header struct{ Rank, World int }

func (f Format) mac(key, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(f.Label))
	m.Write(body)
	return m.Sum(nil)
}

// Encode writes h, then body's fields, then the MAC under key (none without
// a key). A blob over transport.MaxBlobSize is ErrInvalid.
func (f Format) Encode(key []byte, h Header, body func(w *wire.Writer)) ([]byte, error) {
	var w wire.Writer
	w.U32(f.Magic)
	w.U8(f.Version)
	w.U32(uint32(h.Rank))
	w.U32(uint32(h.World))
	body(&w)
	var mac []byte
	if len(key) > 0 {
		mac = f.mac(key, w.B)
	}
	w.Bytes(mac)
	if len(w.B) > transport.MaxBlobSize {
		return nil, fmt.Errorf("connection blob of %d bytes exceeds %d: %w", len(w.B), transport.MaxBlobSize, transport.ErrInvalid)
	}
	return w.B, nil
}

// Decode parses data's envelope and lets body read the backend's fields
// (body may return an error early, for a count past a limit; it should
// wrap ErrProtocol). Malformed input is ErrProtocol, a MAC that does not
// match key ErrAuth. It then checks the header (CheckHeader). The contents'
// own checks are the caller's, after Decode.
func (f Format) Decode(data, key []byte, body func(r *wire.Reader) error) (Header, error) {
	if len(data) > transport.MaxBlobSize {
		return Header{}, fmt.Errorf("blob of %d bytes exceeds %d: %w", len(data), transport.MaxBlobSize, transport.ErrProtocol)
	}
	r := wire.NewReader(data)
	if m := r.U32(); r.Err() == nil && m != f.Magic {
		return Header{}, fmt.Errorf("not an %s blob (magic %#x): %w", f.Name, m, transport.ErrProtocol)
	}
	if v := r.U8(); r.Err() == nil && v != f.Version {
		return Header{}, fmt.Errorf("%s blob version %d, want %d: %w", f.Name, v, f.Version, transport.ErrProtocol)
	}
	h := Header{Rank: int(r.U32()), World: int(r.U32())}
	if err := body(r); err != nil {
		return Header{}, err
	}
	mac := r.Bytes(macSize)
	if err := r.Done(); err != nil {
		return Header{}, fmt.Errorf("malformed %s blob: %w: %w", f.Name, err, transport.ErrProtocol)
	}
	bodyLen := len(data) - 4 - len(mac) // the MAC is the last field
	if len(key) > 0 && !hmac.Equal(mac, f.mac(key, data[:bodyLen])) {
		return Header{}, fmt.Errorf("%s blob of rank %d: %w: MAC does not match the job key", f.Name, h.Rank, transport.ErrAuth)
	}
	if err := CheckHeader(h); err != nil {
		return Header{}, f.Invalid(h, err)
	}
	return h, nil
}

// Invalid is the error for a well-formed, authentic blob whose contents are
// impossible: ErrProtocol, naming the backend and the blob's rank.
func (f Format) Invalid(h Header, err error) error {
	return fmt.Errorf("%s blob of rank %d: %w: %w", f.Name, h.Rank, err, transport.ErrProtocol)
}

// CheckHeader checks that the rank is inside the world.
func CheckHeader(h Header) error {
	if h.World < 1 || h.Rank < 0 || h.Rank >= h.World {
		return fmt.Errorf("rank %d of %d", h.Rank, h.World)
	}
	return nil
}

// ReadCount reads a u32 list length and refuses one over max (ErrProtocol,
// naming what the list holds).
func ReadCount(r *wire.Reader, what string, max uint32) (uint32, error) {
	n := r.U32()
	if r.Err() == nil && n > max {
		return 0, fmt.Errorf("blob lists %d %s, more than %d: %w", n, what, max, transport.ErrProtocol)
	}
	return n, nil
}

// Span is where a listed region lies in its owner's address space.
type Span struct {
	ID        transport.BufferID
	Addr, Len uint64
}

// CheckRegions checks a blob's region list: no ID twice, no empty range, no
// range that wraps around the address space.
func CheckRegions[R any](regions []R, span func(*R) Span) error {
	seen := make(map[transport.BufferID]bool, len(regions))
	for i := range regions {
		s := span(&regions[i])
		if seen[s.ID] {
			return fmt.Errorf("region %d listed twice", s.ID)
		}
		seen[s.ID] = true
		if s.Len == 0 || s.Addr+s.Len < s.Addr {
			return fmt.Errorf("region %d: [%#x, +%d)", s.ID, s.Addr, s.Len)
		}
	}
	return nil
}

// CheckPeer checks that a decoded blob is the one of rank r in a world of
// world ranks (ErrProtocol otherwise).
func CheckPeer(h Header, r, world int) error {
	if h.Rank != r || h.World != world {
		return fmt.Errorf("%w: blob is rank %d of %d, want rank %d of %d", transport.ErrProtocol, h.Rank, h.World, r, world)
	}
	return nil
}
