package capi

/*
#include "capi_types.h"
*/
import "C"

import (
	"unsafe"

	"github.com/mkernel/mkernel/gocore/internal/coreinfo"
	"github.com/mkernel/mkernel/gocore/logging"
)

var (
	cVersion  = C.CString(coreinfo.Version)
	cStatuses = map[C.mk_status]*C.char{}
	cUnknown  = C.CString("unknown status")
)

func init() {
	for st, s := range map[C.mk_status]string{
		C.MK_OK:                   "ok",
		C.MK_ERR_INVALID_ARGUMENT: "invalid argument",
		C.MK_ERR_TIMEOUT:          "timeout",
		C.MK_ERR_REMOTE:           "remote peer failed",
		C.MK_ERR_AUTH:             "authentication failed",
		C.MK_ERR_NOT_SUPPORTED:    "not supported",
		C.MK_ERR_SYSTEM:           "system error",
		C.MK_ERR_BUFFER_TOO_SMALL: "buffer too small",
		C.MK_ERR_CLOSED:           "handle closed",
		C.MK_ERR_INTERNAL:         "internal error",
		C.MK_ERR_VERSION:          "ABI version mismatch",
	} {
		cStatuses[st] = C.CString(s)
	}
}

// TableAddress is the address of this library's mk_api_v1 table (table.c).
// The Python bindings (gocore/pyapi) hand it to the torch extension, which
// binds to the same table, and so to the same Go runtime, as C callers do.
func TableAddress() uint64 { return uint64(C.mk_capi_table_address()) }

//export mk_get_version
func mk_get_version() C.mk_cstr { return C.mk_cstr(cVersion) }

//export mk_status_string
func mk_status_string(st C.mk_status) C.mk_cstr {
	if s, ok := cStatuses[st]; ok {
		return C.mk_cstr(s)
	}
	return C.mk_cstr(cUnknown)
}

//export mk_last_error
func mk_last_error(buf *C.char, length *C.size_t) C.mk_status {
	// Not guarded: guard would overwrite the message being read.
	msg := C.GoString(C.mk_capi_get_last_error())
	if err := writeOut(unsafe.Pointer(buf), length, []byte(msg), true); err != nil {
		return statusOf(err)
	}
	return C.MK_OK
}

//export mk_log_set_level
func mk_log_set_level(level C.mk_cstr) C.mk_status {
	return guard("log_set_level", func() error {
		if err := logging.SetLevel(goString(level)); err != nil {
			return invalid("level: %v", err)
		}
		return nil
	})
}

//export mk_log_emit
func mk_log_emit(level, logger, msg C.mk_cstr) C.mk_status {
	return guard("log_emit", func() error {
		if err := logging.Emit(goString(level), goString(logger), goString(msg)); err != nil {
			return invalid("level: %v", err)
		}
		return nil
	})
}
