package loopback

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// listenLiveness creates this endpoint's liveness socket: a listening abstract Unix stream
// socket (no file, nothing to clean up) that never accepts. A peer's connection waits in its
// backlog; when this process's files are released — a clean Close, or the process dying — the
// kernel resets it and the peer's poll reports it at once.
func listenLiveness(rank int) (fd int, name string, err error) {
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return -1, "", err
	}
	name = fmt.Sprintf("@mkernel-loopback-%d-%d-%s", os.Getpid(), rank, hex.EncodeToString(nonce[:]))
	fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: name}); err != nil {
		_ = unix.Close(fd)
		return -1, "", fmt.Errorf("bind %s: %w", name, err)
	}
	if err := unix.Listen(fd, 256); err != nil {
		_ = unix.Close(fd)
		return -1, "", fmt.Errorf("listen %s: %w", name, err)
	}
	return fd, name, nil
}

// dialLiveness connects to a peer's liveness socket (name from its blob; abstract names only).
func dialLiveness(name string) (int, error) {
	if len(name) < 2 || name[0] != '@' {
		return -1, fmt.Errorf("not an abstract socket name: %q", name)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: name}); err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("connect %s: %w", name, err)
	}
	return fd, nil
}
