package bootstrap

import (
	"encoding/base64"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Secret sizes, in bytes.
const (
	SecretLen    = 32 // what Listen generates
	SecretMinLen = 16 // shortest secret accepted anywhere
	SecretMaxLen = 64 // longest secret an ID can carry
)

const (
	idPrefix   = "mkb1."
	maxAddrLen = 255
	// IDStringMaxLen is the longest text ID.String returns, for callers that keep it in a
	// fixed buffer (C ABI): the prefix plus unpadded base64 of 1+SecretMaxLen+255 bytes.
	IDStringMaxLen = len(idPrefix) + ((1+SecretMaxLen+maxAddrLen)*8+5)/6
)

// ID names one bootstrap job: the address of its root and the job's secret. It is what
// rank 0 publishes (for example through the torch.distributed store) so that the other
// ranks can Join, like NCCL's ncclUniqueId. The zero ID is invalid.
//
// The text form contains the secret: publish it only where the job's ranks can read it,
// and never log it (log Addr instead).
type ID struct {
	addr   string
	secret string // bytes, kept in a string so that an ID is immutable and comparable
}

// NewID builds an ID from the root's "host:port" address and the job secret
// (SecretMinLen..SecretMaxLen bytes, copied).
func NewID(addr string, secret []byte) (ID, error) {
	if err := checkAddr(addr); err != nil {
		return ID{}, fmt.Errorf("bootstrap: new ID: %w", err)
	}
	if err := checkSecret(secret); err != nil {
		return ID{}, fmt.Errorf("bootstrap: new ID: %w", err)
	}
	return ID{addr: addr, secret: string(secret)}, nil
}

// Addr returns the root's "host:port" address.
func (id ID) Addr() string { return id.addr }

// String returns the URL-safe text form ("mkb1." followed by unpadded base64url), at most
// IDStringMaxLen bytes. ParseID reverses it. The text contains the secret.
func (id ID) String() string {
	raw := make([]byte, 0, 1+len(id.secret)+len(id.addr))
	raw = append(raw, byte(len(id.secret)))
	raw = append(raw, id.secret...)
	raw = append(raw, id.addr...)
	return idPrefix + base64.RawURLEncoding.EncodeToString(raw)
}

// ParseID parses the text form made by ID.String.
func ParseID(s string) (ID, error) {
	if len(s) > IDStringMaxLen {
		return ID{}, fmt.Errorf("bootstrap: parse ID: %d bytes is longer than the maximum %d", len(s), IDStringMaxLen)
	}
	body, ok := strings.CutPrefix(s, idPrefix)
	if !ok {
		return ID{}, fmt.Errorf("bootstrap: parse ID: missing %q prefix", idPrefix)
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return ID{}, fmt.Errorf("bootstrap: parse ID: %w", err)
	}
	if len(raw) == 0 || int(raw[0]) > len(raw)-1 {
		return ID{}, fmt.Errorf("bootstrap: parse ID: truncated")
	}
	n := int(raw[0])
	id, err := NewID(string(raw[1+n:]), raw[1:1+n])
	if err != nil {
		return ID{}, fmt.Errorf("bootstrap: parse ID: %w", err)
	}
	return id, nil
}

func (id ID) validate() error {
	if err := checkAddr(id.addr); err != nil {
		return err
	}
	return checkSecret([]byte(id.secret))
}

func checkSecret(secret []byte) error {
	if len(secret) < SecretMinLen || len(secret) > SecretMaxLen {
		return fmt.Errorf("job secret of %d bytes: need %d to %d bytes", len(secret), SecretMinLen, SecretMaxLen)
	}
	return nil
}

// checkAddr accepts "host:port" with a non-empty host and a port in 1..65535.
func checkAddr(addr string) error {
	if len(addr) > maxAddrLen {
		return fmt.Errorf("address of %d bytes is longer than %d", len(addr), maxAddrLen)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	if host == "" {
		return fmt.Errorf("address %q has no host", addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("address %q: port must be 1..65535", addr)
	}
	return nil
}
