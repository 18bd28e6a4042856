// Package wire encodes the small binary blobs backends exchange (connection addresses,
// region tables): little-endian integers and length-prefixed strings, with a Reader that
// records the first error instead of panicking on short or hostile input.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrShort is what a Reader reports for input that ends early or claims absurd lengths.
var ErrShort = errors.New("truncated or malformed")

// Writer appends to a byte slice.
type Writer struct{ B []byte }

func (w *Writer) U8(v uint8)   { w.B = append(w.B, v) }
func (w *Writer) U32(v uint32) { w.B = binary.LittleEndian.AppendUint32(w.B, v) }
func (w *Writer) U64(v uint64) { w.B = binary.LittleEndian.AppendUint64(w.B, v) }
func (w *Writer) Bytes(b []byte) {
	w.U32(uint32(len(b)))
	w.B = append(w.B, b...)
}
func (w *Writer) String(s string) { w.Bytes([]byte(s)) }

// Reader consumes a byte slice; after the first failure every read returns zero and Err
// reports it.
type Reader struct {
	b   []byte
	err error
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

func (r *Reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: need %d more bytes, have %d", ErrShort, n, len(r.b))
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *Reader) U8() uint8 {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *Reader) U32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *Reader) U64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// Bytes reads a length-prefixed byte string of at most max bytes (copied).
func (r *Reader) Bytes(max int) []byte {
	n := r.U32()
	if r.err == nil && int64(n) > int64(max) {
		r.err = fmt.Errorf("%w: field of %d bytes exceeds %d", ErrShort, n, max)
		return nil
	}
	return append([]byte(nil), r.take(int(n))...)
}

func (r *Reader) String(max int) string { return string(r.Bytes(max)) }

// Err returns the first failure.
func (r *Reader) Err() error { return r.err }

// Done fails unless everything was consumed without error.
func (r *Reader) Done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes", ErrShort, len(r.b))
	}
	return r.err
}
