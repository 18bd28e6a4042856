package main

/*
#include "capi_types.h"
*/
import "C"

import (
	"unsafe"

	"github.com/mkernel/mkernel/gocore/pyapi"
)

//export mk_topology_json
func mk_topology_json(sysfsRoot C.mk_cstr, buf *C.char, length *C.size_t) C.mk_status {
	return guard("topology_json", func() error {
		js, err := pyapi.TopologyJSON(goString(sysfsRoot))
		if err != nil {
			return err
		}
		return writeOut(unsafe.Pointer(buf), length, []byte(js), true)
	})
}
