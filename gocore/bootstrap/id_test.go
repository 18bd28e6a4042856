package bootstrap

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestIDRoundTrip(t *testing.T) {
	root := listenLocal(t, 2)
	id := root.ID()
	if !strings.HasPrefix(id.Addr(), "127.0.0.1:") {
		t.Errorf("Addr = %q", id.Addr())
	}
	if len(id.secret) != SecretLen {
		t.Errorf("generated secret of %d bytes", len(id.secret))
	}
	s := id.String()
	if url.QueryEscape(s) != s {
		t.Errorf("%q is not URL-safe", s)
	}
	back, err := ParseID(s)
	if err != nil || back != id {
		t.Fatalf("ParseID(String()) = %v, %v", back, err)
	}
	if other := listenLocal(t, 2); other.ID().secret == id.secret {
		t.Error("two roots share a secret")
	}

	for _, addr := range []string{"[::1]:29500", "node-17.cluster.local:1", "10.0.0.5:65535"} {
		id, err := NewID(addr, bytes.Repeat([]byte{0xfe}, SecretMinLen))
		if err != nil {
			t.Fatalf("NewID(%q): %v", addr, err)
		}
		if back, err := ParseID(id.String()); err != nil || back != id {
			t.Errorf("%q: round trip gave %v, %v", addr, back, err)
		}
	}

	long := strings.Repeat("h", maxAddrLen-6) + ":65535"
	id, err = NewID(long, make([]byte, SecretMaxLen))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(id.String()); n != IDStringMaxLen {
		t.Errorf("longest ID is %d bytes, IDStringMaxLen = %d", n, IDStringMaxLen)
	}
}

func TestParseIDErrors(t *testing.T) {
	enc := func(raw []byte) string { return idPrefix + base64.RawURLEncoding.EncodeToString(raw) }
	secret := bytes.Repeat([]byte{1}, SecretLen)
	raw := func(secret []byte, addr string) []byte {
		return append(append([]byte{byte(len(secret))}, secret...), addr...)
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "missing"},
		{"no prefix", "abc", "missing"},
		{"other version", "mkb2." + enc(raw(secret, "h:1"))[5:], "missing"},
		{"bad base64", idPrefix + "!!!", "illegal base64"},
		{"padded base64", enc(raw(secret, "h:1")) + "=", "illegal base64"},
		{"nothing", idPrefix, "truncated"},
		{"secret overruns", enc([]byte{40, 1, 2, 3}), "truncated"},
		{"short secret", enc(raw(secret[:8], "h:1")), "8 bytes"},
		{"no port", enc(raw(secret, "host")), "missing port"},
		{"port 0", enc(raw(secret, "host:0")), "port must be"},
		{"no host", enc(raw(secret, ":80")), "no host"},
		{"too long", idPrefix + strings.Repeat("A", IDStringMaxLen), "longer than"},
	} {
		if _, err := ParseID(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ParseID(%q) = %v, want an error containing %q", tc.name, tc.in, err, tc.want)
		}
	}
	if _, err := NewID("h:1", make([]byte, SecretMaxLen+1)); err == nil {
		t.Error("NewID accepted a 65-byte secret")
	}
}

func TestJoinValidatesArguments(t *testing.T) {
	id, _ := NewID("127.0.0.1:1", testSecret())
	ctx := context.Background()
	for _, tc := range []struct {
		rank, world int
		id          ID
		want        string
	}{
		{0, 4, id, "rank 0 is the root"},
		{4, 4, id, "rank 4 outside 1..3"},
		{1, MaxWorld + 1, id, "world size 4097"},
		{1, 2, ID{}, "invalid ID"},
	} {
		if _, err := Join(ctx, tc.id, tc.rank, tc.world); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Join(rank %d, world %d) = %v, want %q", tc.rank, tc.world, err, tc.want)
		}
	}
	if _, err := Join(ctx, id, 1, 2, WithHeartbeat(time.Second, time.Second)); err == nil || !strings.Contains(err.Error(), "twice the interval") {
		t.Errorf("bad heartbeat accepted: %v", err)
	}
	if _, err := Listen(ctx, 2, WithListenAddr("0.0.0.0:0")); err == nil || !strings.Contains(err.Error(), "WithAdvertiseHost") {
		t.Errorf("Listen on 0.0.0.0 without an advertised host: %v", err)
	}
	r, err := Listen(ctx, 2, WithListenAddr("0.0.0.0:0"), WithAdvertiseHost("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !strings.HasPrefix(r.ID().Addr(), "127.0.0.1:") {
		t.Errorf("advertised %q", r.ID().Addr())
	}
}
