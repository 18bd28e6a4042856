// Package capi is the control plane behind the C ABI of
// csrc/include/mkernel/core_api.h, linked into libmkernel_core.so by
// gocore/libcore.
//
// The library exports one entry point, mk_get_api, returning the versioned
// table of functions built in table.c from the //export functions of this
// package. The Python bindings (gocore/pyapi, linked into the same library
// with -tags gopy) hand TableAddress to the torch extension, so the Python
// module and the torch extension share one Go runtime; this package does not
// depend on them.
//
// Rules at this boundary: no panic crosses it (guard recovers and returns
// MK_ERR_INTERNAL), errors become a status code plus a per-thread message,
// handles are runtime/cgo handles, never Go pointers.
package capi
