// Package fifo is the Go side of the command FIFO defined in csrc/include/mkernel/fifo.h:
// the same layout (Cmd, Ctrl, checked against the C compiler's view by a cgo test in
// gocore/capi), the consumer protocol the proxy runs, and the host producer protocol for
// Go producers (tests, benchmarks, the host reference backend when it drives the FIFO
// from Go).
//
// The header's comment is the normative description of both protocols; this package
// implements it with sync/atomic (sequentially consistent, so at least as strong as the
// acquire and release the protocol asks for) on memory that may be shared with another
// process or a GPU: a Ring never owns its memory, and never lets the Go heap hold it.
package fifo
