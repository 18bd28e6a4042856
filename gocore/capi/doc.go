// Command capi builds libmkernel_core.so (go build -buildmode=c-shared): the
// control plane behind the C ABI of csrc/include/mkernel/core_api.h.
//
// The library exports one entry point, mk_get_api, returning the versioned
// table of functions built in table.c from the //export functions of this
// package. Built with -tags gopy (see the Makefile's core target), the same
// library also carries the gopy-generated wrappers of gocore/pyapi, so the
// Python module and the torch extension share one Go runtime.
//
// Rules at this boundary: no panic crosses it (guard recovers and returns
// MK_ERR_INTERNAL), errors become a status code plus a per-thread message,
// handles are runtime/cgo handles, never Go pointers.
package main
