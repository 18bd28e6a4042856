package capi

/*
#include "capi_types.h"
*/
import "C"

import (
	"context"
	"unsafe"

	"github.com/mkernel/mkernel/gocore/internal/coreinfo"
)

//export mk_topology_json
func mk_topology_json(sysfsRoot C.mk_cstr, buf *C.char, length *C.size_t) C.mk_status {
	return guard("topology_json", func() error {
		js, err := coreinfo.TopologyJSON(context.Background(), goString(sysfsRoot))
		if err != nil {
			return err
		}
		return writeOut(unsafe.Pointer(buf), length, []byte(js), true)
	})
}
