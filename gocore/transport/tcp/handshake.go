package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/mkernel/mkernel/gocore/transport"
)

const (
	connMagic      = 0x43544b4d // "MKTC"
	connVersion    = 1
	helloSize      = 40
	nonceSize      = 16
	macSize        = sha256.Size
	statusAccepted = 1
)

type hello struct {
	world, from, to uint32
	nonce           [nonceSize]byte
}

func (h *hello) encode() []byte {
	b := make([]byte, helloSize)
	binary.LittleEndian.PutUint32(b[0:], connMagic)
	binary.LittleEndian.PutUint32(b[4:], connVersion)
	binary.LittleEndian.PutUint32(b[8:], h.world)
	binary.LittleEndian.PutUint32(b[12:], h.from)
	binary.LittleEndian.PutUint32(b[16:], h.to)
	copy(b[24:], h.nonce[:])
	return b
}

func mac(key []byte, label string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// dialHandshake proves to rank `to` that this end holds the key, and checks the converse.
func (t *Transport) dialHandshake(c net.Conn, to int, deadline time.Time) error {
	_ = c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	h := hello{world: uint32(t.cfg.World), from: uint32(t.cfg.Rank), to: uint32(to)}
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return err
	}
	hb := h.encode()
	if _, err := c.Write(hb); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	var reply [nonceSize + macSize]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		return fmt.Errorf("%w: no handshake reply (wrong key, or not rank %d's transport): %w", transport.ErrAuth, to, err)
	}
	nonceA := reply[:nonceSize]
	if !hmac.Equal(reply[nonceSize:], mac(t.cfg.Key, "mkernel tcp acceptor", hb, nonceA)) {
		return fmt.Errorf("%w: rank %d could not prove it holds the job key", transport.ErrAuth, to)
	}
	if _, err := c.Write(mac(t.cfg.Key, "mkernel tcp dialer", hb, nonceA)); err != nil {
		return fmt.Errorf("send proof: %w", err)
	}
	var status [1]byte
	if _, err := io.ReadFull(c, status[:]); err != nil || status[0] != statusAccepted {
		return fmt.Errorf("%w: rank %d refused the connection", transport.ErrAuth, to)
	}
	return nil
}

var errReject = errors.New("rejected")

// acceptHandshake authenticates an incoming connection and returns the dialer's rank.
func (t *Transport) acceptHandshake(c net.Conn, deadline time.Time) (int, error) {
	_ = c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	hb := make([]byte, helloSize)
	if _, err := io.ReadFull(c, hb); err != nil {
		return -1, fmt.Errorf("%w: read hello: %w", errReject, err)
	}
	magic, version := binary.LittleEndian.Uint32(hb[0:]), binary.LittleEndian.Uint32(hb[4:])
	world, from, to := binary.LittleEndian.Uint32(hb[8:]), binary.LittleEndian.Uint32(hb[12:]), binary.LittleEndian.Uint32(hb[16:])
	switch {
	case magic != connMagic:
		return -1, fmt.Errorf("%w: not an mkernel tcp transport (magic %#x)", errReject, magic)
	case version != connVersion:
		return -1, fmt.Errorf("%w: protocol version %d, want %d", errReject, version, connVersion)
	case int(world) != t.cfg.World || int(to) != t.cfg.Rank:
		return -1, fmt.Errorf("%w: hello for rank %d of %d reached rank %d of %d", errReject, to, world, t.cfg.Rank, t.cfg.World)
	case int(from) >= t.cfg.Rank || !t.cfg.Peer(int(from)):
		return -1, fmt.Errorf("%w: rank %d does not dial rank %d", errReject, from, t.cfg.Rank)
	}
	var reply [nonceSize + macSize]byte
	nonceA := reply[:nonceSize]
	if _, err := rand.Read(nonceA); err != nil {
		return -1, err
	}
	copy(reply[nonceSize:], mac(t.cfg.Key, "mkernel tcp acceptor", hb, nonceA))
	if _, err := c.Write(reply[:]); err != nil {
		return -1, fmt.Errorf("%w: send reply: %w", errReject, err)
	}
	proof := make([]byte, macSize)
	if _, err := io.ReadFull(c, proof); err != nil {
		return -1, fmt.Errorf("%w: claims rank %d, sent no proof: %w", errReject, from, err)
	}
	if !hmac.Equal(proof, mac(t.cfg.Key, "mkernel tcp dialer", hb, nonceA)) {
		return -1, fmt.Errorf("%w: claims rank %d without the job key", errReject, from)
	}
	return int(from), nil
}
