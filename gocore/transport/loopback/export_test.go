package loopback

import "golang.org/x/sys/unix"

// ReleaseLivenessForTest closes the liveness socket without marking the transport closed: what
// the kernel does to a process's files when it dies, before its pidfd reports the exit.
func (t *Transport) ReleaseLivenessForTest() {
	_ = unix.Close(t.listen)
	t.listen = -1
}
