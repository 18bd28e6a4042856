package shm

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/mkernel/mkernel/gocore/transport"
)

// Segment is one mapped shared-memory segment.
type Segment struct {
	name string
	path string
	f    *os.File
	b    []byte
	once sync.Once
	err  error
}

// Create makes a new zeroed segment of size bytes (rounded up to whole pages) named name
// (the name shows in /proc/<pid>/maps; it need not be unique).
func Create(name string, size int) (*Segment, error) {
	if size <= 0 {
		return nil, fmt.Errorf("shm: create %q: size %d must be positive", name, size)
	}
	size = roundPage(size)
	fd, err := unix.MemfdCreate("mkernel:"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shm: create %q: memfd_create: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), "memfd:"+name)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: create %q: resize to %d bytes: %w", name, size, err)
	}
	// The size is now fixed: a peer's mapping can never be cut short under it.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: create %q: seal: %w", name, err)
	}
	s, err := mapFile(name, f, size)
	if err != nil {
		return nil, fmt.Errorf("shm: create %q: %w", name, err)
	}
	s.path = "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.Itoa(fd)
	return s, nil
}

// Open maps the segment another process created, by its Path. size must not exceed the
// segment's size.
func Open(path string, size int) (*Segment, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: open %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: open %s: %w", path, err)
	}
	if size <= 0 || int64(size) > st.Size() {
		f.Close()
		return nil, fmt.Errorf("shm: open %s: %w: want %d bytes of a %d-byte segment", path, transport.ErrInvalid, size, st.Size())
	}
	s, err := mapFile(path, f, roundPage(size))
	if err != nil {
		return nil, fmt.Errorf("shm: open %s: %w", path, err)
	}
	s.path = path
	s.b = s.b[:size]
	return s, nil
}

// FromFile maps size bytes of f (e.g. a memfd received from another process); the Segment
// owns f from then on.
func FromFile(f *os.File, size int) (*Segment, error) {
	s, err := mapFile(f.Name(), f, roundPage(size))
	if err != nil {
		return nil, fmt.Errorf("shm: map %s: %w", f.Name(), err)
	}
	s.path = "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.Itoa(int(f.Fd()))
	s.b = s.b[:size]
	return s, nil
}

func mapFile(name string, f *os.File, size int) (*Segment, error) {
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return &Segment{name: name, f: f, b: b}, nil
}

func roundPage(n int) int {
	p := os.Getpagesize()
	return (n + p - 1) / p * p
}

// Bytes returns the mapped memory. It stays valid until Close.
func (s *Segment) Bytes() []byte { return s.b }

// Len returns the usable size in bytes.
func (s *Segment) Len() int { return len(s.b) }

// Path returns what another process passes to Open.
func (s *Segment) Path() string { return s.path }

// File returns the segment's descriptor, e.g. to hand it to a child process.
func (s *Segment) File() *os.File { return s.f }

// Shared describes the segment for transport.Region.File.
func (s *Segment) Shared() transport.SharedFile {
	return transport.SharedFile{Path: s.path, Size: uint64(len(s.b))}
}

// Region returns a transport.Region covering the whole segment.
func (s *Segment) Region() transport.Region {
	return transport.Region{Bytes: s.b, File: s.Shared()}
}

// Close unmaps the segment and closes its descriptor; later calls return the first result.
func (s *Segment) Close() error {
	s.once.Do(func() {
		b := s.b[:cap(s.b)]
		s.b = nil
		s.err = errors.Join(unix.Munmap(b), s.f.Close())
		if s.err != nil {
			s.err = fmt.Errorf("shm: close %s: %w", s.name, s.err)
		}
	})
	return s.err
}
