package bootstrap

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

// Wire format. Every message is one frame: a 16-byte header, big-endian,
//
//	magic u32 "MKBS" | version u8 | type u8 | flags u16 (0) | payload length u64
//
// and the payload. A reader knows, for each state it is in, which types it accepts and how
// long each may be, and drops the connection on anything else before allocating.
const (
	wireMagic   uint32 = 0x4d4b4253 // "MKBS"
	wireVersion uint8  = 1
	headerLen          = 16
	nonceLen           = 32
	macLen             = sha256.Size
	helloLen           = 4 + 4 + nonceLen + macLen // rank, world, nonce, mac
	collHeadLen        = 8 + 1                     // seq u64, op u8
	maxMsgLen          = 4096                      // error message text
	ioChunk            = 1 << 20                   // deadlines are renewed per chunk of a large frame
	maxIovecs          = 1024                      // buffers per vectored write (Linux IOV_MAX)
)

type msgType uint8

const (
	msgChallenge msgType = 1 + iota // root→rank: nonce[32]
	msgHello                        // rank→root: rank u32, world u32, nonce[32], mac[32]
	msgWelcome                      // root→rank: mac[32]; the rank is registered
	msgReady                        // root→rank: every rank has joined
	msgContrib                      // rank→root: seq u64, op u8, blob
	msgResult                       // root→rank: seq u64, op u8, [W × len u32, blobs] for all-gather
	msgError                        // either way: kind u8, text; the session (or the handshake) is over
	msgPing                         // either way: empty; keeps an idle connection provably alive
)

func (t msgType) String() string {
	names := [...]string{"invalid", "challenge", "hello", "welcome", "ready", "contribution", "result", "error", "ping"}
	if int(t) < len(names) {
		return names[t]
	}
	return fmt.Sprintf("type-%d", uint8(t))
}

type opCode uint8

const (
	opAllGather opCode = 1
	opBarrier   opCode = 2
)

func (op opCode) String() string {
	switch op {
	case opAllGather:
		return "all-gather"
	case opBarrier:
		return "barrier"
	}
	return fmt.Sprintf("op-%d", uint8(op))
}

// frame is an outgoing message. head is small and owned by the frame; parts are large,
// read-only and may be shared by the frames of several connections (an all-gather result).
type frame struct {
	typ   msgType // 0: no message, only the "last" action
	head  []byte
	parts [][]byte
	last  bool // the link closes its write side after this frame
}

var pingFrame = &frame{typ: msgPing}

func (f *frame) size() uint64 {
	n := uint64(len(f.head))
	for _, p := range f.parts {
		n += uint64(len(p))
	}
	return n
}

// versionError is a frame from a different protocol version; the root answers it (the
// other side speaks the header) instead of dropping it silently.
type versionError struct{ got uint8 }

func (e *versionError) Error() string {
	return fmt.Sprintf("%v: protocol version %d, this end speaks %d", ErrProtocol, e.got, wireVersion)
}

func (e *versionError) Unwrap() error { return ErrProtocol }

// errBadMagic marks a connection that is not speaking this protocol at all (a port scan,
// an HTTP client): the root drops it without an answer.
var errBadMagic = fmt.Errorf("%w: bad magic (not an mkernel bootstrap endpoint)", ErrProtocol)

// limitFunc says whether a reader accepts frames of type t and how long their payload may be.
type limitFunc func(t msgType) (max uint64, ok bool)

// readFrame reads one frame. refresh, if not nil, renews the read deadline before the
// header and before each chunk of the payload, so a slow but moving transfer is not cut
// while a stalled one is.
func readFrame(c net.Conn, refresh func(), limit limitFunc) (msgType, []byte, error) {
	var h [headerLen]byte
	if refresh != nil {
		refresh()
	}
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return 0, nil, err
	}
	if binary.BigEndian.Uint32(h[0:4]) != wireMagic {
		return 0, nil, errBadMagic
	}
	if h[4] != wireVersion {
		return 0, nil, &versionError{got: h[4]}
	}
	t := msgType(h[5])
	if flags := binary.BigEndian.Uint16(h[6:8]); flags != 0 {
		return 0, nil, fmt.Errorf("%w: %v frame with reserved flags %#x", ErrProtocol, t, flags)
	}
	n := binary.BigEndian.Uint64(h[8:16])
	max, ok := limit(t)
	if !ok {
		return 0, nil, fmt.Errorf("%w: unexpected %v frame", ErrProtocol, t)
	}
	if n > max {
		return 0, nil, fmt.Errorf("%w: %v frame of %d bytes exceeds the limit of %d", ErrProtocol, t, n, max)
	}
	buf := make([]byte, n)
	for off := 0; off < len(buf); off += ioChunk {
		if refresh != nil {
			refresh()
		}
		if _, err := io.ReadFull(c, buf[off:min(off+ioChunk, len(buf))]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, nil, err
		}
	}
	return t, buf, nil
}

// writeFrame writes f with vectored writes of at most ioChunk bytes each; refresh, if not
// nil, renews the write deadline before each. A result is W parts: batching them keeps the
// root at one system call per chunk rather than one per rank.
func writeFrame(c net.Conn, f *frame, refresh func()) error {
	if f.typ == 0 {
		return nil
	}
	var h [headerLen]byte
	binary.BigEndian.PutUint32(h[0:4], wireMagic)
	h[4] = wireVersion
	h[5] = byte(f.typ)
	binary.BigEndian.PutUint64(h[8:16], f.size())
	rest := make([][]byte, 0, 2+len(f.parts)) // our own list: f.parts may be shared
	rest = append(rest, h[:], f.head)
	rest = append(rest, f.parts...)
	iov := make([][]byte, 0, min(len(rest), maxIovecs))
	for len(rest) > 0 {
		iov = iov[:0]
		n := 0
		for len(rest) > 0 && n < ioChunk && len(iov) < maxIovecs {
			b := rest[0]
			if take := ioChunk - n; len(b) > take {
				iov = append(iov, b[:take])
				rest[0] = b[take:]
				n += take
				break
			}
			if len(b) > 0 {
				iov = append(iov, b)
			}
			n += len(b)
			rest = rest[1:]
		}
		if refresh != nil {
			refresh()
		}
		batch := net.Buffers(iov) // WriteTo consumes it; iov is rebuilt each round
		if _, err := batch.WriteTo(c); err != nil {
			return err
		}
	}
	return nil
}

// Payload codecs.

type hello struct {
	rank, world uint32
	nonce, mac  []byte
}

func encodeHello(h hello) []byte {
	b := make([]byte, 8, helloLen)
	binary.BigEndian.PutUint32(b[0:4], h.rank)
	binary.BigEndian.PutUint32(b[4:8], h.world)
	return append(append(b, h.nonce...), h.mac...)
}

func decodeHello(p []byte) (hello, error) {
	if len(p) != helloLen {
		return hello{}, fmt.Errorf("%w: hello of %d bytes, want %d", ErrProtocol, len(p), helloLen)
	}
	return hello{
		rank:  binary.BigEndian.Uint32(p[0:4]),
		world: binary.BigEndian.Uint32(p[4:8]),
		nonce: p[8 : 8+nonceLen],
		mac:   p[8+nonceLen:],
	}, nil
}

func errorFrame(k kind, msg string) *frame {
	if len(msg) > maxMsgLen {
		msg = msg[:maxMsgLen]
	}
	return &frame{typ: msgError, head: append([]byte{byte(k)}, msg...)}
}

func decodeError(p []byte) (kind, string) {
	if len(p) == 0 {
		return kindOther, "(no reason given)"
	}
	return wireKind(p[0]), string(p[1:])
}

func collHead(seq uint64, op opCode, extra int) []byte {
	b := make([]byte, collHeadLen, collHeadLen+extra)
	binary.BigEndian.PutUint64(b[0:8], seq)
	b[8] = byte(op)
	return b
}

func decodeCollHead(p []byte) (seq uint64, op opCode, rest []byte, err error) {
	if len(p) < collHeadLen {
		return 0, 0, nil, fmt.Errorf("%w: collective frame of %d bytes", ErrProtocol, len(p))
	}
	op = opCode(p[8])
	if op != opAllGather && op != opBarrier {
		return 0, 0, nil, fmt.Errorf("%w: unknown collective %v", ErrProtocol, op)
	}
	return binary.BigEndian.Uint64(p[0:8]), op, p[collHeadLen:], nil
}

// resultFrame encodes the result of collective seq; blobs are shared, not copied.
func resultFrame(seq uint64, op opCode, blobs [][]byte) *frame {
	if op != opAllGather {
		return &frame{typ: msgResult, head: collHead(seq, op, 0)}
	}
	head := collHead(seq, op, 4*len(blobs))
	for _, b := range blobs {
		head = binary.BigEndian.AppendUint32(head, uint32(len(b)))
	}
	return &frame{typ: msgResult, head: head, parts: blobs}
}

// resultLimit is the largest result payload for world ranks.
func resultLimit(world int) uint64 {
	return collHeadLen + uint64(world)*(4+MaxBlobSize)
}

// decodeResult splits an all-gather result into one slice per rank; the slices share p
// and are capped so that appending to one cannot overwrite the next.
func decodeResult(p []byte, world int) (uint64, opCode, [][]byte, error) {
	seq, op, rest, err := decodeCollHead(p)
	if err != nil {
		return 0, 0, nil, err
	}
	if op != opAllGather {
		if len(rest) != 0 {
			return 0, 0, nil, fmt.Errorf("%w: %v result with %d payload bytes", ErrProtocol, op, len(rest))
		}
		return seq, op, nil, nil
	}
	if len(rest) < 4*world {
		return 0, 0, nil, fmt.Errorf("%w: all-gather result too short for %d lengths", ErrProtocol, world)
	}
	lens, data := rest[:4*world], rest[4*world:]
	out := make([][]byte, world)
	off := 0
	for i := range out {
		n := int(binary.BigEndian.Uint32(lens[4*i:]))
		if n > MaxBlobSize || n > len(data)-off {
			return 0, 0, nil, fmt.Errorf("%w: all-gather result: blob %d of %d bytes overruns the frame", ErrProtocol, i, n)
		}
		out[i] = data[off : off+n : off+n]
		off += n
	}
	if off != len(data) {
		return 0, 0, nil, fmt.Errorf("%w: all-gather result has %d trailing bytes", ErrProtocol, len(data)-off)
	}
	return seq, op, out, nil
}

// Authentication: each side proves it knows the job secret by a MAC over both fresh nonces
// and the rank's claim; a role byte keeps one side's proof from being replayed as the
// other's. The secret itself never crosses the wire.
const (
	authLabel = "mkernel-bootstrap-v1"
	rolePeer  = 'P'
	roleRoot  = 'R'
)

func authMAC(secret []byte, role byte, rootNonce []byte, rank, world uint32, peerNonce []byte) []byte {
	m := hmac.New(sha256.New, secret)
	var b [8]byte
	binary.BigEndian.PutUint32(b[0:4], rank)
	binary.BigEndian.PutUint32(b[4:8], world)
	m.Write([]byte(authLabel))
	m.Write([]byte{role})
	m.Write(rootNonce)
	m.Write(b[:])
	m.Write(peerNonce)
	return m.Sum(nil)
}
