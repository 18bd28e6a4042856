package capi

/*
#cgo CFLAGS: -I${SRCDIR}/../../csrc/include
#include <stdlib.h>
#include "capi_types.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/debug"
	"unsafe"

	"github.com/mkernel/mkernel/gocore/bootstrap"
	"github.com/mkernel/mkernel/gocore/logging"
)

// errBufferTooSmall and errClosed map to their own status codes.
var (
	errBufferTooSmall = errors.New("output buffer too small")
	errClosed         = errors.New("handle closed or unknown")
	errInvalid        = errors.New("invalid argument")
	errVersion        = errors.New("ABI version mismatch")
)

// statusOf maps an error chain onto the ABI's status codes.
func statusOf(err error) C.mk_status {
	switch {
	case err == nil:
		return C.MK_OK
	case errors.Is(err, errBufferTooSmall):
		return C.MK_ERR_BUFFER_TOO_SMALL
	case errors.Is(err, errClosed):
		return C.MK_ERR_CLOSED
	case errors.Is(err, errInvalid):
		return C.MK_ERR_INVALID_ARGUMENT
	case errors.Is(err, errVersion):
		return C.MK_ERR_VERSION
	case errors.Is(err, bootstrap.ErrTimeout):
		return C.MK_ERR_TIMEOUT
	case errors.Is(err, bootstrap.ErrPeerGone):
		return C.MK_ERR_REMOTE
	case errors.Is(err, bootstrap.ErrAuth):
		return C.MK_ERR_AUTH
	}
	return transportStatus(err)
}

// guard runs one ABI call: it records the error message for last_error and
// turns a panic into MK_ERR_INTERNAL, so no panic unwinds into C.
func guard(call string, fn func() error) (st C.mk_status) {
	defer func() {
		if r := recover(); r != nil {
			msg := fmt.Sprintf("%s: internal error (recovered panic): %v", call, r)
			logging.Named("capi").Error(msg)
			logging.Named("capi").Debug(string(debug.Stack()))
			setLastError(msg)
			st = C.MK_ERR_INTERNAL
		}
	}()
	err := fn()
	if err != nil {
		setLastError(fmt.Sprintf("%s: %v", call, err))
	} else {
		setLastError("")
	}
	return statusOf(err)
}

func setLastError(msg string) {
	cs := C.CString(msg)
	C.mk_capi_set_last_error(cs)
	C.free(unsafe.Pointer(cs))
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errInvalid, fmt.Sprintf(format, args...))
}

// goString copies a borrowed C string; NULL becomes "".
func goString(s C.mk_cstr) string {
	if s == nil {
		return ""
	}
	return C.GoString((*C.char)(unsafe.Pointer(s)))
}

// writeOut implements the (buf, *len) rule of core_api.h: *len is the
// capacity on entry and the size needed on return.
func writeOut(buf unsafe.Pointer, length *C.size_t, data []byte, nulTerminate bool) error {
	if length == nil {
		return invalid("len must not be NULL")
	}
	need := len(data)
	if nulTerminate {
		need++
	}
	capacity := int(*length)
	*length = C.size_t(need)
	if buf == nil || capacity < need {
		return fmt.Errorf("%w: need %d bytes, have %d", errBufferTooSmall, need, capacity)
	}
	dst := unsafe.Slice((*byte)(buf), need)
	copy(dst, data)
	if nulTerminate {
		dst[need-1] = 0
	}
	return nil
}

// getLastErrorForTest reads this thread's last error (tests cannot use cgo).
func getLastErrorForTest() string { return C.GoString(C.mk_capi_get_last_error()) }
