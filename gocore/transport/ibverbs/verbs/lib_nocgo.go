//go:build !cgo

package verbs

import "fmt"

// This build has no cgo: the verbs calls cannot be made. Every entry point
// fails with ErrNotSupported, so the backends report themselves unavailable
// and the registry falls back to tcp.

var errNoCgo = fmt.Errorf("verbs: built without cgo (CGO_ENABLED=0): %w", ErrNotSupported)

// Built reports whether this build has the rdma-core headers; without cgo
// it has neither.
func Built() (verbs, efadv bool) { return false, false }

// Library is a loaded libibverbs; without cgo there is none.
type Library struct{ path string }

// Load fails: no cgo.
func Load(path string) (*Library, error) { return nil, fmt.Errorf("load %s: %w", path, errNoCgo) }

// Path is the path Load was given.
func (l *Library) Path() string { return l.path }

// LoadEFA fails: no cgo.
func (l *Library) LoadEFA(string) error { return errNoCgo }

// Features is empty.
func (l *Library) Features() Features { return Features{} }

// Devices fails: no cgo.
func (l *Library) Devices() ([]DeviceInfo, error) { return nil, errNoCgo }

// Open fails: no cgo.
func (l *Library) Open(string) (*Context, error) { return nil, errNoCgo }

// Context is an open device.
type Context struct{ name string }

func (c *Context) Name() string                             { return c.name }
func (c *Context) Library() *Library                        { return nil }
func (c *Context) Close() error                             { return nil }
func (c *Context) QueryDevice() (DeviceAttr, error)         { return DeviceAttr{}, errNoCgo }
func (c *Context) QueryPort(int) (PortAttr, error)          { return PortAttr{}, errNoCgo }
func (c *Context) QueryGID(int, int) (GID, error)           { return GID{}, errNoCgo }
func (c *Context) GIDTable(int, string) ([]GIDEntry, error) { return nil, errNoCgo }
func (c *Context) AllocPD() (*PD, error)                    { return nil, errNoCgo }
func (c *Context) CreateCQ(int) (*CQ, error)                { return nil, errNoCgo }
func (c *Context) EFAQueryDevice() (EFAAttr, error)         { return EFAAttr{}, errNoCgo }

// PD is a protection domain.
type PD struct{}

func (p *PD) Close() error                                                 { return nil }
func (p *PD) RegMR(uintptr, uint64, Access) (*MR, error)                   { return nil, errNoCgo }
func (p *PD) RegDMABufMR(uint64, uint64, uint64, int, Access) (*MR, error) { return nil, errNoCgo }
func (p *PD) CreateQP(QPInit, *CQ, *CQ) (*QP, error)                       { return nil, errNoCgo }
func (p *PD) CreateAH(AHAttr) (*AH, error)                                 { return nil, errNoCgo }

// MR is a registered memory region.
type MR struct{}

func (m *MR) LKey() uint32 { return 0 }
func (m *MR) RKey() uint32 { return 0 }
func (m *MR) Close() error { return nil }

// CQ is a completion queue.
type CQ struct{}

func (q *CQ) Size() int              { return 0 }
func (q *CQ) Close() error           { return nil }
func (q *CQ) Poll([]WC) (int, error) { return 0, errNoCgo }

// QP is a queue pair.
type QP struct{}

func (q *QP) Num() uint32                     { return 0 }
func (q *QP) Caps() QPCaps                    { return QPCaps{} }
func (q *QP) Close() error                    { return nil }
func (q *QP) Modify(QPAttr, QPAttrMask) error { return errNoCgo }
func (q *QP) PostSend([]SendWR) (int, error)  { return 0, errNoCgo }
func (q *QP) PostSendEx([]SendWR) error       { return errNoCgo }
func (q *QP) PostRecv([]RecvWR) (int, error)  { return 0, errNoCgo }

// AH is an address handle.
type AH struct{}

func (a *AH) Handle() AHHandle { return 0 }
func (a *AH) Close() error     { return nil }
